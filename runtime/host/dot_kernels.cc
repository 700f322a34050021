// dot with general dimension numbers: operands are brought to
// [batch, m, k] x [batch, k, n] (or used transposed in place) and multiplied
// with oneDNN's or OpenBLAS's GEMM, whichever was faster for the shape.
#include <cstring>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "compiler/passes/dot_bias_fusion.h"
#include "compiler/passes/dot_fusion.h"
#include "runtime/compute_threads.h"
#include "runtime/host/epilogue.h"
#include "runtime/host/gemm.h"
#include "runtime/host/kernel.h"
#include "runtime/host/strided_copy.h"
#include "runtime/host/tuning.h"

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

// Everything a dot kernel needs, worked out at compile time.
struct DotPlan {
  Shape out_shape;
  ElementType type;
  int64_t batch, m, k, n;
  OperandPlan lp, rp;
  bool direct_f32;  // f32 operands and result, neither needs a copy
};

// f32 products run on the library asked for; f64 and integer ones have one.
void GemmOn(GemmLibrary library, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
            const float* a, const float* b, float* c) {
  Gemm(library, ta, tb, m, n, k, a, b, c);
}
template <typename T>
void GemmOn(GemmLibrary, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
            const T* b, T* c) {
  Gemm(ta, tb, m, n, k, a, b, c);
}

Kernel MakeKernel(const DotPlan& p, GemmLibrary library) {
  return Kernel([p, library](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(p.out_shape));
    auto run = [&](const auto* a, const auto* b, auto* c) {
      const int64_t m = p.m, n = p.n, k = p.k;
      for (int64_t i = 0; i < p.batch; ++i) {
        GemmOn(library, p.lp.transposed, p.rp.transposed, m, n, k, a + i * m * k,
               b + i * k * n, c + i * m * n);
      }
    };
    if (p.direct_f32) {
      run(ops[0]->as<float>(), ops[1]->as<float>(), out->as<float>());
      return out;
    }
    if (p.type == ElementType::kF64) {
      std::vector<double> a = Load<double>(*ops[0], p.lp), b = Load<double>(*ops[1], p.rp);
      std::vector<double> c(p.batch * p.m * p.n);
      run(a.data(), b.data(), c.data());
      Store(c, *out);
    } else if (ir::IsFloatType(p.type)) {
      std::vector<float> a = Load<float>(*ops[0], p.lp), b = Load<float>(*ops[1], p.rp);
      std::vector<float> c(p.batch * p.m * p.n);
      run(a.data(), b.data(), c.data());
      Store(c, *out);
    } else {
      std::vector<int64_t> a = Load<int64_t>(*ops[0], p.lp), b = Load<int64_t>(*ops[1], p.rp);
      std::vector<int64_t> c(p.batch * p.m * p.n);
      run(a.data(), b.data(), c.data());
      Store(c, *out);
    }
    return out;
  });
}

// f32 dots of this many multiply-adds are timed on both libraries at
// compile time: from about ten microseconds of work (below it, the
// difference is smaller than timing it costs) to about a millisecond at
// one thread (above it, the timing costs more than a compile should); and
// with operands and result of at most this many bytes, which timing
// allocates again.
constexpr int64_t kMinTunedDotMacs = int64_t{1} << 20;
constexpr int64_t kMaxTunedDotMacs = int64_t{1} << 27;
constexpr int64_t kMaxTunedDotBytes = int64_t{64} << 20;

// The library measured faster for a GEMM shape at a thread count, kept for
// the process so that programs with the same products (each session's,
// each batch size's recompile) are not timed again. Thread-safe.
class DotChoices {
 public:
  static DotChoices& Get() {
    static DotChoices* choices = new DotChoices();
    return *choices;
  }
  std::optional<std::string> Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }
  void Set(const std::string& key, const std::string& choice) {
    absl::MutexLock lock(&mu_);
    choices_[key] = choice;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> choices_ ABSL_GUARDED_BY(mu_);
};

DotPlan PlanDot(const ir::Instruction& instr) {
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
  return DotPlan{out_shape, type, batch, m, k, n, lp, rp,
                 type == ElementType::kF32 && out_shape.type() == ElementType::kF32 &&
                     !lp.copy && !rp.copy};
}

// The kernel `make` builds on the library faster for `plan`'s product
// (direct f32) when `instr` runs it. Which one depends on the shape, the
// transposes and the threads (on an AMD EPYC at two threads, OpenBLAS's
// sgemm with B transposed takes two thirds of oneDNN's time; oneDNN wins
// most others): measured, oneDNN's being the choice when not measuring.
// `kind` keeps apart, in the process's memo, kernels of one product that
// differ in what else they do ("dot", "accumulate").
Kernel ChooseLibrary(const ir::Instruction& instr, const DotPlan& plan, absl::string_view kind,
                     const std::function<Kernel(GemmLibrary)>& make) {
  std::vector<NamedKernel> candidates = {{"onednn", make(GemmLibrary::kOneDnn)},
                                         {"openblas", make(GemmLibrary::kOpenBlas)}};
  const int64_t macs = plan.batch * plan.m * plan.n * plan.k;
  int64_t bytes = plan.out_shape.ByteSize();
  for (const ir::Instruction* o : instr.operands()) bytes += o->shape().ByteSize();
  const bool measure =
      macs >= kMinTunedDotMacs && macs <= kMaxTunedDotMacs && bytes <= kMaxTunedDotBytes;
  TuningRecord* record = TuningRecord::Current();
  const bool recorded = record != nullptr && record->Find(instr).has_value();
  const std::string key = absl::StrCat(kind, " ", plan.lp.transposed, plan.rp.transposed, " ",
                                       plan.batch, "x", plan.m, "x", plan.n, "x", plan.k,
                                       " threads ", runtime::ComputeThreads());
  if (measure && !recorded && KernelTuningEnabled()) {
    if (std::optional<std::string> known = DotChoices::Get().Find(key)) {
      for (NamedKernel& c : candidates) {
        if (c.name != *known) continue;
        if (record != nullptr) record->Set(instr, c.name);
        return std::move(c.kernel);
      }
    }
  }
  bool timed = false;
  NamedKernel chosen = ChooseKernel(instr, std::move(candidates), measure, &timed);
  if (timed) DotChoices::Get().Set(key, chosen.name);
  return std::move(chosen.kernel);
}

// A dot fusion's kernel: operands a, b, c; the result is a b + beta c,
// accumulated into c's buffer when nothing else holds it (a donated
// velocity is updated in place), else into a copy of c.
Kernel MakeAccumulateKernel(const DotPlan& p, GemmLibrary library, float beta) {
  return Kernel([p, library, beta](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    BufferPtr out;
    if (Unshared(ops[2]) && ops[2]->shape() == p.out_shape) {
      out = ops[2];
    } else {
      ASSIGN_OR_RETURN(out, st.Allocate(p.out_shape));
      if (out->size_bytes() > 0) std::memcpy(out->data(), ops[2]->data(), out->size_bytes());
    }
    Gemm(library, p.lp.transposed, p.rp.transposed, p.m, p.n, p.k, ops[0]->as<float>(),
         ops[1]->as<float>(), out->as<float>(), beta);
    return out;
  });
}

// A dot bias fusion's kernel: operands a, b, bias; the product, then each
// of its rows plus the bias (and, with `relu`, its relu) in place, while
// the rows are in cache. The product's kernel reads a and b alone.
Kernel MakeBiasKernel(const DotPlan& p, GemmLibrary library, bool relu) {
  return Kernel([product = MakeKernel(p, library), m = p.m, n = p.n, relu](
                    ExecState& st, const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, product(st, ops));
    float* row = out->as<float>();
    const float* bias = ops[2]->as<float>();
    for (int64_t i = 0; i < m; ++i, row += n) {
      if (relu) {
        ReluRow(row, bias, n);
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
      }
    }
    return out;
  });
}

}  // namespace

absl::StatusOr<Kernel> MakeDotKernel(const ir::Instruction& instr) {
  const DotPlan plan = PlanDot(instr);
  if (!plan.direct_f32) return MakeKernel(plan, GemmLibrary::kOneDnn);
  return ChooseLibrary(instr, plan, "dot",
                       [&](GemmLibrary library) { return MakeKernel(plan, library); });
}

absl::StatusOr<Kernel> MakeDotFusionKernel(const ir::Instruction& call) {
  std::optional<passes::DotFusionForm> form;
  if (call.opcode() == ir::Opcode::kCall && call.called().size() == 1) {
    form = passes::MatchDotFusion(*call.called(0));
  }
  if (!form.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.name(), " does not call a dot fusion (passes::MatchDotFusion)"));
  }
  const DotPlan plan = PlanDot(*form->dot);
  if (!plan.direct_f32 || plan.batch != 1) {
    return absl::InternalError(absl::StrCat(call.name(), ": a dot fusion's product needs a copy"));
  }
  const float beta = static_cast<float>(form->beta);
  return ChooseLibrary(call, plan, "accumulate", [&](GemmLibrary library) {
    return MakeAccumulateKernel(plan, library, beta);
  });
}

absl::StatusOr<Kernel> MakeDotBiasFusionKernel(const ir::Instruction& call) {
  std::optional<passes::DotBiasFusionForm> form;
  if (call.opcode() == ir::Opcode::kCall && call.called().size() == 1) {
    form = passes::MatchDotBiasFusion(*call.called(0));
  }
  if (!form.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call.name(), " does not call a dot bias fusion (passes::MatchDotBiasFusion)"));
  }
  const DotPlan plan = PlanDot(*form->dot);
  if (!plan.direct_f32 || plan.batch != 1) {
    return absl::InternalError(
        absl::StrCat(call.name(), ": a dot bias fusion's product needs a copy"));
  }
  const bool relu = form->relu;
  return ChooseLibrary(call, plan, relu ? "bias relu" : "bias", [&](GemmLibrary library) {
    return MakeBiasKernel(plan, library, relu);
  });
}

}  // namespace kiln::host
