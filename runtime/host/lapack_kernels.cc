// XLA's LAPACK calls that the host backend runs through LAPACK itself (the
// one in OpenBLAS), as jaxlib's CPU kernels do: getrf, geqrf, orgqr, syevd
// and gesdd of f32 and f64 matrices, over leading batch dimensions. LAPACK
// reads column-major matrices: each matrix is transposed into a
// column-major copy, factored there, and transposed back.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/hlo_lowering.h"
#include "runtime/host/cancel.h"
#include "runtime/host/kernel.h"

extern "C" {
// LAPACK's Fortran interface; character arguments carry their lengths last.
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work,
             const int* lwork, int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda,
             const float* tau, float* work, const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda,
             const double* tau, double* work, const int* lwork, int* info);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda,
             float* w, float* work, const int* lwork, int* iwork, const int* liwork, int* info,
             size_t jobz_len, size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
             double* w, double* work, const int* lwork, int* iwork, const int* liwork,
             int* info, size_t jobz_len, size_t uplo_len);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s,
             float* u, const int* ldu, float* vt, const int* ldvt, float* work,
             const int* lwork, int* iwork, int* info, size_t jobz_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s,
             double* u, const int* ldu, double* vt, const int* ldvt, double* work,
             const int* lwork, int* iwork, int* info, size_t jobz_len);
}

namespace kiln::host {
namespace {

using ir::ElementType;
using ir::Shape;

// One overload set per routine, so one template serves both precisions.
void Getrf(int m, int n, float* a, int* ipiv, int* info) { sgetrf_(&m, &n, a, &m, ipiv, info); }
void Getrf(int m, int n, double* a, int* ipiv, int* info) { dgetrf_(&m, &n, a, &m, ipiv, info); }
void Geqrf(int m, int n, float* a, float* tau, float* work, int lwork, int* info) {
  sgeqrf_(&m, &n, a, &m, tau, work, &lwork, info);
}
void Geqrf(int m, int n, double* a, double* tau, double* work, int lwork, int* info) {
  dgeqrf_(&m, &n, a, &m, tau, work, &lwork, info);
}
void Orgqr(int m, int n, int k, float* a, const float* tau, float* work, int lwork, int* info) {
  sorgqr_(&m, &n, &k, a, &m, tau, work, &lwork, info);
}
void Orgqr(int m, int n, int k, double* a, const double* tau, double* work, int lwork,
           int* info) {
  dorgqr_(&m, &n, &k, a, &m, tau, work, &lwork, info);
}
void Syevd(char jobz, char uplo, int n, float* a, float* w, float* work, int lwork, int* iwork,
           int liwork, int* info) {
  ssyevd_(&jobz, &uplo, &n, a, &n, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void Syevd(char jobz, char uplo, int n, double* a, double* w, double* work, int lwork,
           int* iwork, int liwork, int* info) {
  dsyevd_(&jobz, &uplo, &n, a, &n, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void Gesdd(char jobz, int m, int n, float* a, float* s, float* u, int ldu, float* vt, int ldvt,
           float* work, int lwork, int* iwork, int* info) {
  sgesdd_(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void Gesdd(char jobz, int m, int n, double* a, double* s, double* u, int ldu, double* vt,
           int ldvt, double* work, int lwork, int* iwork, int* info) {
  dgesdd_(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}

// Row-major rows x cols at `from` into column-major at `to`, and back.
template <typename T>
void ToColumnMajor(const T* from, T* to, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) to[j * rows + i] = from[i * cols + j];
  }
}
template <typename T>
void FromColumnMajor(const T* from, T* to, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) to[i * cols + j] = from[j * rows + i];
  }
}

// Scratch for LAPACK, 64-byte aligned: OpenBLAS picks its kernels by the
// alignment of what it is given, and results must not depend on where an
// allocation happened to land.
template <typename T>
class Scratch {
 public:
  // Zeroed, so that nothing of an earlier matrix (or of the heap) can be
  // read back. False when the memory is not there.
  bool resize(size_t n) {
    if (n > size_) {
      data_.reset(static_cast<T*>(
          ::operator new(n * sizeof(T), std::align_val_t(64), std::nothrow)));
      size_ = data_ == nullptr ? 0 : n;
      if (data_ == nullptr) return false;
    }
    if (n > 0) std::memset(static_cast<void*>(data_.get()), 0, n * sizeof(T));
    return true;
  }
  T* data() { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

// A LAPACK size from a workspace query (returned as a float, rounded up
// with room for the float's rounding); 0 when it does not fit an int.
template <typename T>
int WorkSize(T query) {
  const double size = std::ceil(static_cast<double>(query) * (1 + 1e-6)) + 1;
  if (!(size < static_cast<double>(std::numeric_limits<int>::max()))) return 0;
  return std::max(1, static_cast<int>(size));
}

constexpr int64_t kMaxSide = 16384;
constexpr int64_t kMaxElements = int64_t{1} << 26;

// What a call computes, checked once when the kernel is built.
struct Call {
  std::string routine;  // "getrf", ...
  ElementType type;
  std::vector<int64_t> batch;
  int64_t matrices = 1;
  int64_t m = 0, n = 0;  // of operand 0
  int64_t k = 0;         // orgqr: reflectors
  char mode = 'V', uplo = 'L';
  // gesdd: columns of u and rows of vt as declared.
  int64_t u_cols = 0, vt_rows = 0;
};

absl::Status Expect(const Shape& got, const Shape& want, const std::string& target,
                    const std::string& what) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(target, ": ", what, " must be ",
                                                 want.ToString(), ", declared ",
                                                 got.ToString()));
}

absl::StatusOr<Call> Check(const ir::Instruction& instr) {
  // A module may come as a proto, past the parser's checks: the target,
  // its options and its sizes are all checked again here.
  const std::string& target = instr.attrs().custom_call_target;
  absl::string_view name = target;
  const bool named = absl::ConsumePrefix(&name, "lapack_") && absl::ConsumeSuffix(&name, "_ffi");
  Call c;
  if (!named || name.size() < 2 || (name[0] != 's' && name[0] != 'd')) {
    return absl::InvalidArgumentError(absl::StrCat("custom-call '", target,
                                                   "' is not a LAPACK call Kiln runs"));
  }
  c.routine = std::string(name.substr(1));
  c.type = name[0] == 's' ? ElementType::kF32 : ElementType::kF64;
  if (c.routine != "getrf" && c.routine != "geqrf" && c.routine != "orgqr" &&
      c.routine != "syevd" && c.routine != "gesdd") {
    return absl::InvalidArgumentError(absl::StrCat("custom-call '", target,
                                                   "' is not a LAPACK call Kiln runs"));
  }
  if (instr.operand_count() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(target, " takes a matrix"));
  }
  const Shape& a = instr.operand(0)->shape();
  if (!a.IsArray() || a.type() != c.type || a.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(target, ": a must be a ",
                                                   ir::ElementTypeName(c.type),
                                                   " matrix or a batch of them, got ",
                                                   a.ToString()));
  }
  c.batch.assign(a.dims().begin(), a.dims().end() - 2);
  for (int64_t d : c.batch) c.matrices *= d;
  c.m = a.dim(a.rank() - 2);
  c.n = a.dim(a.rank() - 1);
  // LAPACK sizes its workspaces in 32-bit ints, up to a few times m n (and
  // 2 n^2 for syevd): matrices up to 16384 on a side and 2^26 elements
  // keep every one of them far from overflowing.
  if (c.m > kMaxSide || c.n > kMaxSide || c.m * c.n > kMaxElements) {
    return absl::InvalidArgumentError(absl::StrCat(
        target, ": ", a.ToString(), " is larger than Kiln's LAPACK calls take (", kMaxSide,
        " on a side, ", kMaxElements, " elements per matrix)"));
  }
  ASSIGN_OR_RETURN(auto options, ir::ParseFfiOptions(instr.attrs().config.empty()
                                                         ? "{}" : instr.attrs().config));
  c.mode = c.routine == "gesdd" ? 'A' : 'V';
  for (const auto& [key, value] : options) {
    const bool ok =
        (c.routine == "syevd" && key == "mode" && (value == 'N' || value == 'V')) ||
        (c.routine == "syevd" && key == "uplo" && (value == 'L' || value == 'U')) ||
        (c.routine == "gesdd" && key == "mode" && (value == 'A' || value == 'S' || value == 'N'));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(target, ": option ", key, " = ", value,
                                                     " is not one it takes"));
    }
    (key == "mode" ? c.mode : c.uplo) = static_cast<char>(value);
  }
  const int64_t mn = std::min(c.m, c.n);
  auto dims = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> d = c.batch;
    d.insert(d.end(), tail);
    return d;
  };
  const Shape info(ElementType::kS32, c.batch);
  const Shape& out = instr.shape();
  const int operands = c.routine == "orgqr" ? 2 : 1;
  if (instr.operand_count() != operands) {
    return absl::InvalidArgumentError(absl::StrCat(target, " takes ", operands,
                                                   " operands, got ", instr.operand_count()));
  }
  if (c.routine == "orgqr") {
    const Shape& tau = instr.operand(1)->shape();
    if (!tau.IsArray() || tau.type() != c.type || tau.rank() != a.rank() - 1 ||
        !std::equal(c.batch.begin(), c.batch.end(), tau.dims().begin())) {
      return absl::InvalidArgumentError(absl::StrCat(target, ": tau must be ",
                                                     ir::ElementTypeName(c.type),
                                                     " vectors over a's batch, got ",
                                                     tau.ToString()));
    }
    c.k = tau.dim(tau.rank() - 1);
    if (c.m < c.n || c.n < c.k) {
      return absl::InvalidArgumentError(absl::StrCat(target, ": needs rows >= columns >= "
                                                     "reflectors, got ", a.ToString(), " and ",
                                                     tau.ToString()));
    }
    RETURN_IF_ERROR(Expect(out, a, target, "the result"));
    return c;
  }
  if (!out.IsTuple()) {
    return absl::InvalidArgumentError(absl::StrCat(target, " returns a tuple, declared ",
                                                   out.ToString()));
  }
  std::vector<Shape> want;
  if (c.routine == "getrf") {
    want = {a, Shape(ElementType::kS32, dims({mn})), info};
  } else if (c.routine == "geqrf") {
    want = {a, Shape(c.type, dims({mn}))};
  } else if (c.routine == "syevd") {
    if (c.m != c.n) {
      return absl::InvalidArgumentError(absl::StrCat(target, ": a must be square, got ",
                                                     a.ToString()));
    }
    want = {a, Shape(c.type, dims({c.n})), info};
  } else {  // gesdd
    if (out.tuple_shapes().size() == 5) {
      const Shape& u = out.tuple_shape(2);
      const Shape& vt = out.tuple_shape(3);
      c.u_cols = u.rank() == a.rank() ? u.dim(u.rank() - 1) : -1;
      c.vt_rows = vt.rank() == a.rank() ? vt.dim(vt.rank() - 2) : -1;
    }
    if (c.mode == 'A') {
      c.u_cols = c.m;
      c.vt_rows = c.n;
    } else if (c.mode == 'S') {
      c.u_cols = mn;
      c.vt_rows = mn;
    }
    if (c.u_cols < 0 || c.vt_rows < 0) {
      return absl::InvalidArgumentError(absl::StrCat(target, ": u and vt must be matrices "
                                                     "over a's batch, declared ",
                                                     out.ToString()));
    }
    want = {a, Shape(c.type, dims({mn})), Shape(c.type, dims({c.m, c.u_cols})),
            Shape(c.type, dims({c.vt_rows, c.n})), info};
  }
  RETURN_IF_ERROR(Expect(out, Shape::Tuple(want), target, "the result"));
  return c;
}

template <typename T>
absl::StatusOr<BufferPtr> Run(const Call& c, ExecState& st, const std::vector<BufferPtr>& ops,
                              const Shape& out_shape) {
  std::vector<BufferPtr> outs;
  if (out_shape.IsTuple()) {
    for (const Shape& s : out_shape.tuple_shapes()) {
      ASSIGN_OR_RETURN(BufferPtr b, st.Allocate(s));
      if (s.ByteSize() > 0) std::memset(b->data(), 0, s.ByteSize());
      outs.push_back(std::move(b));
    }
  } else {
    ASSIGN_OR_RETURN(BufferPtr b, st.Allocate(out_shape));
    outs.push_back(std::move(b));
  }
  auto result = [&]() -> absl::StatusOr<BufferPtr> {
    if (!out_shape.IsTuple()) return outs[0];
    return Buffer::MakeTuple(std::move(outs));
  };
  // Empty matrices have nothing to factor: every result is zero (an empty
  // a, its info 0).
  if (c.m == 0 || c.n == 0) return result();
  const std::string name = absl::StrCat("LAPACK's ", c.routine);
  auto room = [&](bool ok) {
    return ok ? absl::OkStatus()
              : absl::ResourceExhaustedError(absl::StrCat(name, ": no memory for its scratch"));
  };
  auto done = [&](int info) {
    return info >= 0 ? absl::OkStatus()
                     : absl::InternalError(absl::StrCat(name, " refused argument ", -info));
  };
  auto work_size = [&](T query) -> absl::StatusOr<int> {
    const int size = WorkSize(query);
    if (size == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(name, ": its workspace does not fit"));
    }
    return size;
  };
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), mn = std::min(m, n);
  Scratch<T> a, work, u, vt, tau, w;
  Scratch<int> iwork;
  for (int64_t mat = 0; mat < c.matrices; ++mat) {
    if (mat > 0 && Cancelled()) return absl::CancelledError("the execution was cancelled");
    RETURN_IF_ERROR(room(a.resize(c.m * c.n)));
    ToColumnMajor(ops[0]->as<T>() + mat * c.m * c.n, a.data(), c.m, c.n);
    int info = 0;
    if (c.routine == "getrf") {
      RETURN_IF_ERROR(room(iwork.resize(mn)));
      Getrf(m, n, a.data(), iwork.data(), &info);
      RETURN_IF_ERROR(done(info));
      std::memcpy(outs[1]->as<int32_t>() + mat * mn, iwork.data(), mn * sizeof(int));
      outs[2]->as<int32_t>()[mat] = info;
    } else if (c.routine == "geqrf" || c.routine == "orgqr") {
      T query = 0;
      const int k = static_cast<int>(c.k);
      RETURN_IF_ERROR(room(tau.resize(std::max<int64_t>(1, std::max<int64_t>(mn, c.k)))));
      if (c.routine == "orgqr") {
        std::memcpy(tau.data(), ops[1]->as<T>() + mat * c.k, c.k * sizeof(T));
        Orgqr(m, n, k, a.data(), tau.data(), &query, -1, &info);
      } else {
        Geqrf(m, n, a.data(), tau.data(), &query, -1, &info);
      }
      RETURN_IF_ERROR(done(info));
      ASSIGN_OR_RETURN(const int lwork, work_size(query));
      RETURN_IF_ERROR(room(work.resize(lwork)));
      if (c.routine == "geqrf") {
        Geqrf(m, n, a.data(), tau.data(), work.data(), lwork, &info);
        RETURN_IF_ERROR(done(info));
        std::memcpy(outs[1]->as<T>() + mat * mn, tau.data(), mn * sizeof(T));
      } else {
        Orgqr(m, n, k, a.data(), tau.data(), work.data(), lwork, &info);
        RETURN_IF_ERROR(done(info));
      }
    } else if (c.routine == "syevd") {
      T query = 0;
      int iquery = 0;
      RETURN_IF_ERROR(room(w.resize(n)));
      Syevd(c.mode, c.uplo, n, a.data(), w.data(), &query, -1, &iquery, -1, &info);
      RETURN_IF_ERROR(done(info));
      ASSIGN_OR_RETURN(const int lwork, work_size(query));
      const int liwork = std::max(1, iquery);
      RETURN_IF_ERROR(room(work.resize(lwork) && iwork.resize(liwork)));
      Syevd(c.mode, c.uplo, n, a.data(), w.data(), work.data(), lwork, iwork.data(), liwork,
            &info);
      RETURN_IF_ERROR(done(info));
      std::memcpy(outs[1]->as<T>() + mat * n, w.data(), n * sizeof(T));
      outs[2]->as<int32_t>()[mat] = info;
    } else {  // gesdd
      const int64_t u_size = c.m * c.u_cols, vt_size = c.vt_rows * c.n;
      RETURN_IF_ERROR(room(u.resize(std::max<int64_t>(1, u_size)) &&
                           vt.resize(std::max<int64_t>(1, vt_size)) && w.resize(mn) &&
                           iwork.resize(8 * static_cast<size_t>(mn))));
      const int ldu = m, ldvt = std::max(1, static_cast<int>(c.vt_rows));
      T query = 0;
      Gesdd(c.mode, m, n, a.data(), w.data(), u.data(), ldu, vt.data(), ldvt, &query, -1,
            iwork.data(), &info);
      RETURN_IF_ERROR(done(info));
      ASSIGN_OR_RETURN(const int lwork, work_size(query));
      RETURN_IF_ERROR(room(work.resize(lwork)));
      Gesdd(c.mode, m, n, a.data(), w.data(), u.data(), ldu, vt.data(), ldvt, work.data(), lwork,
            iwork.data(), &info);
      RETURN_IF_ERROR(done(info));
      std::memcpy(outs[1]->as<T>() + mat * mn, w.data(), mn * sizeof(T));
      if (c.mode != 'N') {
        FromColumnMajor(u.data(), outs[2]->as<T>() + mat * u_size, c.m, c.u_cols);
        FromColumnMajor(vt.data(), outs[3]->as<T>() + mat * vt_size, c.vt_rows, c.n);
      }
      outs[4]->as<int32_t>()[mat] = info;
    }
    FromColumnMajor(a.data(), outs[0]->as<T>() + mat * c.m * c.n, c.m, c.n);
  }
  return result();
}

}  // namespace

absl::StatusOr<Kernel> MakeLapackKernel(const ir::Instruction& instr) {
  ASSIGN_OR_RETURN(Call call, Check(instr));
  const Shape out_shape = instr.shape();
  return Kernel([call, out_shape](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    if (call.type == ElementType::kF32) return Run<float>(call, st, ops, out_shape);
    return Run<double>(call, st, ops, out_shape);
  });
}

}  // namespace kiln::host
