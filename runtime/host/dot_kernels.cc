// dot with general dimension numbers: operands are brought to
// [batch, m, k] x [batch, k, n] (or used transposed in place) and multiplied
// with OpenBLAS.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/host/gemm.h"
#include "runtime/host/kernel.h"
#include "runtime/host/strided_copy.h"

namespace kiln::host {
namespace {

using ir::ElementType;
using ir::Shape;

// How to read one operand as a batch of matrices.
struct OperandPlan {
  std::vector<int64_t> perm_dims, perm_strides;  // read order [B, rows, cols]
  bool transposed = false;  // stored as [B, cols, rows] already
  bool copy = false;        // needs a permuting copy
};

bool IsIdentity(const std::vector<int64_t>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Plans operand `s` as [batch..., outer..., inner...] where for lhs
// outer = free (m) and inner = contracting (k); for rhs outer = contracting
// and inner = free, i.e. [B, k, n].
OperandPlan Plan(const Shape& s, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& first,
                 const std::vector<int64_t>& second) {
  OperandPlan p;
  std::vector<int64_t> order = batch;
  order.insert(order.end(), first.begin(), first.end());
  order.insert(order.end(), second.begin(), second.end());
  std::vector<int64_t> swapped = batch;
  swapped.insert(swapped.end(), second.begin(), second.end());
  swapped.insert(swapped.end(), first.begin(), first.end());
  if (IsIdentity(order)) return p;
  if (IsIdentity(swapped)) {
    p.transposed = true;
    return p;
  }
  p.copy = true;
  const std::vector<int64_t> strides = ir::RowMajorStrides(s.dims());
  for (int64_t d : order) {
    p.perm_dims.push_back(s.dim(d));
    p.perm_strides.push_back(strides[d]);
  }
  return p;
}

std::vector<int64_t> FreeDims(int rank, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<int64_t> out;
  for (int i = 0; i < rank; ++i) {
    if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
        std::find(contracting.begin(), contracting.end(), i) == contracting.end()) {
      out.push_back(i);
    }
  }
  return out;
}

int64_t Product(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= s.dim(d);
  return p;
}

// Converts `n` elements of `type` at `src` (after an optional permuting copy)
// into compute type C.
template <typename C>
std::vector<C> Load(const Buffer& b, const OperandPlan& plan) {
  const Shape& s = b.shape();
  const int64_t n = s.ElementCount();
  const int esize = ir::ElementTypeSize(s.type());
  const uint8_t* src = b.data();
  std::vector<uint8_t> permuted;
  if (plan.copy) {
    permuted.resize(n * esize);
    StridedCopy(plan.perm_dims, src, 0, plan.perm_strides, permuted.data(), 0,
                ir::RowMajorStrides(plan.perm_dims), esize);
    src = permuted.data();
  }
  std::vector<C> out(n);
  ir::DispatchType(s.type(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = reinterpret_cast<const T*>(src);
    for (int64_t i = 0; i < n; ++i) out[i] = ir::ConvertValue<C>(p[i]);
  });
  return out;
}

template <typename C>
void Store(const std::vector<C>& values, Buffer& out) {
  ir::DispatchType(out.shape().type(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.as<T>();
    for (size_t i = 0; i < values.size(); ++i) o[i] = ir::ConvertValue<T>(values[i]);
  });
}

}  // namespace

absl::StatusOr<Kernel> MakeDotKernel(const ir::Instruction& instr) {
  const Shape lhs = instr.operand(0)->shape();
  const Shape rhs = instr.operand(1)->shape();
  const Shape out_shape = instr.shape();
  const ir::DotDims& d = instr.attrs().dot;
  const std::vector<int64_t> lhs_free = FreeDims(lhs.rank(), d.lhs_batch, d.lhs_contracting);
  const std::vector<int64_t> rhs_free = FreeDims(rhs.rank(), d.rhs_batch, d.rhs_contracting);
  const int64_t batch = Product(lhs, d.lhs_batch);
  const int64_t m = Product(lhs, lhs_free);
  const int64_t k = Product(lhs, d.lhs_contracting);
  const int64_t n = Product(rhs, rhs_free);
  const OperandPlan lp = Plan(lhs, d.lhs_batch, lhs_free, d.lhs_contracting);
  const OperandPlan rp = Plan(rhs, d.rhs_batch, d.rhs_contracting, rhs_free);
  const ElementType type = lhs.type();
  const bool direct_f32 = type == ElementType::kF32 && out_shape.type() == ElementType::kF32;
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    auto run = [&](auto tag, const auto* a, const auto* b, auto* c) {
      for (int64_t i = 0; i < batch; ++i) {
        Gemm(lp.transposed, rp.transposed, m, n, k, a + i * m * k, b + i * k * n,
             c + i * m * n);
      }
      (void)tag;
    };
    if (direct_f32 && !lp.copy && !rp.copy) {
      run(0, ops[0]->as<float>(), ops[1]->as<float>(), out->as<float>());
      return out;
    }
    if (type == ElementType::kF64) {
      std::vector<double> a = Load<double>(*ops[0], lp), b = Load<double>(*ops[1], rp);
      std::vector<double> c(batch * m * n);
      run(0, a.data(), b.data(), c.data());
      Store(c, *out);
    } else if (ir::IsFloatType(type)) {
      std::vector<float> a = Load<float>(*ops[0], lp), b = Load<float>(*ops[1], rp);
      std::vector<float> c(batch * m * n);
      run(0, a.data(), b.data(), c.data());
      Store(c, *out);
    } else {
      std::vector<int64_t> a = Load<int64_t>(*ops[0], lp), b = Load<int64_t>(*ops[1], rp);
      std::vector<int64_t> c(batch * m * n);
      run(0, a.data(), b.data(), c.data());
      Store(c, *out);
    }
    return out;
  });
}

}  // namespace kiln::host
