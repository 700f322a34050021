// cholesky and triangular-solve: per matrix of the batch, computed in
// double precision and stored in the element type.
#include <cmath>
#include <limits>
#include <vector>

#include "base/status_macros.h"
#include "runtime/host/kernel.h"

namespace kiln::host {
namespace {

using ir::Instruction;
using ir::Opcode;

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

template <typename T>
T FromDouble(double v) {
  return static_cast<T>(v);
}

// Factors each n x n matrix: a = l l^T with l lower (`lower`), or u^T u
// with u upper. The other triangle of the result is zero. A matrix that is
// not positive definite gives NaN from the first column that fails on.
void Cholesky(const double* a, double* out, int64_t n, bool lower) {
  // Works on the lower factor; the upper one is its transpose.
  auto at = [&](int64_t i, int64_t j) { return lower ? a[i * n + j] : a[j * n + i]; };
  std::vector<double> l(n * n, 0.0);
  bool failed = false;
  for (int64_t j = 0; j < n; ++j) {
    double d = at(j, j);
    for (int64_t k = 0; k < j; ++k) d -= l[j * n + k] * l[j * n + k];
    if (failed || !(d > 0)) failed = true;
    const double djj = failed ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(d);
    l[j * n + j] = djj;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = at(i, j);
      for (int64_t k = 0; k < j; ++k) s -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = s / djj;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = lower ? l[i * n + j] : l[j * n + i];
  }
}

// Solves op(a) x = b (left side; b is m x k) or x op(a) = b (b is k x m)
// for x, reading only `lower`'s triangle of the m x m matrix a (and taking
// its diagonal as ones when `unit`); op transposes a for kTranspose and
// kAdjoint (real types have no conjugate).
void TriangularSolve(const double* a, const double* b, double* x, int64_t m, int64_t k,
                     const ir::LinalgOptions& o) {
  const bool transposed = o.transpose_a != ir::TransposeKind::kNoTranspose;
  // t(i, j): element (i, j) of op(a), zero outside the triangle read.
  auto t = [&](int64_t i, int64_t j) -> double {
    const int64_t r = transposed ? j : i, c = transposed ? i : j;
    if (r == c) return o.unit_diagonal ? 1.0 : a[r * m + c];
    return (o.lower ? r > c : r < c) ? a[r * m + c] : 0.0;
  };
  // op(a) is lower triangular when exactly one of `lower` and the
  // transpose holds.
  const bool op_lower = o.lower != transposed;
  if (o.left_side) {
    // Column by column of x (m x k): forward or back substitution.
    for (int64_t col = 0; col < k; ++col) {
      for (int64_t s = 0; s < m; ++s) {
        const int64_t i = op_lower ? s : m - 1 - s;
        double v = b[i * k + col];
        for (int64_t s2 = 0; s2 < s; ++s2) {
          const int64_t j = op_lower ? s2 : m - 1 - s2;
          v -= t(i, j) * x[j * k + col];
        }
        x[i * k + col] = v / t(i, i);
      }
    }
  } else {
    // Row by row of x (k x m): x op(a) = b, so op(a)^T x^T = b^T, whose
    // matrix is upper triangular when op(a) is lower.
    for (int64_t row = 0; row < k; ++row) {
      for (int64_t s = 0; s < m; ++s) {
        const int64_t j = op_lower ? m - 1 - s : s;
        double v = b[row * m + j];
        for (int64_t s2 = 0; s2 < s; ++s2) {
          const int64_t i = op_lower ? m - 1 - s2 : s2;
          v -= x[row * m + i] * t(i, j);
        }
        x[row * m + j] = v / t(j, j);
      }
    }
  }
}

}  // namespace

absl::StatusOr<Kernel> MakeLinalgKernel(const Instruction& instr) {
  const ir::Shape out_shape = instr.shape();
  const ir::Shape a_shape = instr.operand(0)->shape();
  const ir::LinalgOptions options = instr.attrs().linalg;
  const bool cholesky = instr.opcode() == Opcode::kCholesky;
  const int rank = a_shape.rank();
  const int64_t m = a_shape.dim(rank - 1);
  const int64_t matrices = m == 0 ? 0 : a_shape.ElementCount() / (m * m);
  const int64_t per_b = matrices == 0 ? 0 : out_shape.ElementCount() / matrices;
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    ir::DispatchType(out_shape.type(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (ir::kIsFloat<T>) {
        const T* a = ops[0]->as<T>();
        const T* b = cholesky ? nullptr : ops[1]->as<T>();
        T* o = out->as<T>();
        std::vector<double> am(m * m), bm(per_b), xm(cholesky ? m * m : per_b);
        for (int64_t mat = 0; mat < matrices; ++mat) {
          for (int64_t i = 0; i < m * m; ++i) am[i] = ToDouble(a[mat * m * m + i]);
          if (cholesky) {
            Cholesky(am.data(), xm.data(), m, options.lower);
          } else {
            for (int64_t i = 0; i < per_b; ++i) bm[i] = ToDouble(b[mat * per_b + i]);
            TriangularSolve(am.data(), bm.data(), xm.data(), m, per_b / std::max<int64_t>(m, 1),
                            options);
          }
          const int64_t count = cholesky ? m * m : per_b;
          for (int64_t i = 0; i < count; ++i) o[mat * count + i] = FromDouble<T>(xm[i]);
        }
      }
    });
    return out;
  });
}

}  // namespace kiln::host
