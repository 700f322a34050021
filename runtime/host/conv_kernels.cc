// convolution: through oneDNN where it covers the op (dnnl_conv.h), else
// with general dim_labels, strides, padding, dilations and
// feature groups: operands are brought to [N, C, spatial...] and
// [O, I, spatial...], each (batch, group) becomes im2col + one GEMM, and the
// result is laid out as the output dim_labels say.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "compiler/passes/convolution_fusion.h"
#include "runtime/host/cancel.h"
#include "runtime/host/conv_kernels.h"
#include "runtime/host/dnnl_conv.h"
#include "runtime/host/elementwise.h"
#include "runtime/host/epilogue.h"
#include "runtime/host/gemm.h"
#include "runtime/host/kernel.h"
#include "runtime/host/strided_copy.h"
#include "runtime/host/threads.h"
#include "runtime/host/tuning.h"

namespace kiln::host {
namespace {

using ir::ElementType;
using ir::Shape;

struct ConvPlan {
  // `batch` is the result's: the input has batch * batch_groups. With
  // batch_groups > 1 (feature groups are then 1), batch group g of the
  // input (a block of `batch`) feeds output feature group g.
  int64_t batch, in_c, out_c, groups, batch_groups = 1;
  std::vector<int64_t> in_sp, k_sp, out_sp;  // spatial sizes
  std::vector<ir::WindowDim> window;
  // Permutations from the operands' layouts to canonical ones.
  std::vector<int64_t> in_perm, k_perm, out_perm;
  // The source table as runs: for each kernel position, stretches of
  // output positions that read consecutive inputs (or padding), so im2col
  // copies a run at a time.
  struct Run {
    int64_t out = 0, src = -1, length = 0;  // src -1: padding
  };
  std::shared_ptr<const std::vector<std::vector<Run>>> runs;
};

template <typename C>
std::vector<C> LoadPermuted(const Buffer& b, const std::vector<int64_t>& perm) {
  const Shape& s = b.shape();
  const std::vector<int64_t> strides = ir::RowMajorStrides(s.dims());
  std::vector<int64_t> dims, src_strides;
  for (int64_t p : perm) {
    dims.push_back(s.dim(p));
    src_strides.push_back(strides[p]);
  }
  const int64_t count = s.ElementCount();
  std::vector<C> out(count);
  ir::DispatchType(s.type(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, C>) {  // no conversion: permute in place
      StridedCopy(dims, b.data(), 0, src_strides, reinterpret_cast<uint8_t*>(out.data()), 0,
                  ir::RowMajorStrides(dims), sizeof(T));
    } else {
      std::unique_ptr<T[]> tmp(new T[count]);
      StridedCopy(dims, b.data(), 0, src_strides, reinterpret_cast<uint8_t*>(tmp.get()), 0,
                  ir::RowMajorStrides(dims), sizeof(T));
      for (int64_t i = 0; i < count; ++i) out[i] = ir::ConvertValue<C>(tmp[i]);
    }
  });
  return out;
}

// For each (kernel position, output position): the input spatial offset or
// -1 for padding. Shared by every batch, group and channel, and by every
// execution.
std::vector<int64_t> SourceTable(const ConvPlan& p) {
  const int rank = static_cast<int>(p.in_sp.size());
  int64_t k_size = 1, out_size = 1;
  for (int d = 0; d < rank; ++d) {
    k_size *= p.k_sp[d];
    out_size *= p.out_sp[d];
  }
  std::vector<int64_t> kidx(rank), oidx(rank);
  std::vector<int64_t> src(k_size * out_size);
  for (int64_t kp = 0; kp < k_size; ++kp) {
    int64_t rem = kp;
    for (int d = rank - 1; d >= 0; --d) {
      kidx[d] = rem % p.k_sp[d];
      rem /= p.k_sp[d];
    }
    for (int64_t op = 0; op < out_size; ++op) {
      int64_t r2 = op;
      for (int d = rank - 1; d >= 0; --d) {
        oidx[d] = r2 % p.out_sp[d];
        r2 /= p.out_sp[d];
      }
      int64_t off = 0;
      bool valid = true;
      for (int d = 0; d < rank && valid; ++d) {
        const ir::WindowDim& w = p.window[d];
        int64_t pos = oidx[d] * w.stride - w.pad_lo + kidx[d] * w.window_dilation;
        if (pos < 0 || pos % w.base_dilation != 0) {
          valid = false;
          break;
        }
        pos /= w.base_dilation;
        if (pos >= p.in_sp[d]) valid = false;
        off = off * p.in_sp[d] + pos;
      }
      src[kp * out_size + op] = valid ? off : -1;
    }
  }
  return src;
}

std::vector<std::vector<ConvPlan::Run>> SourceRuns(const std::vector<int64_t>& src,
                                                   int64_t k_size, int64_t out_size) {
  std::vector<std::vector<ConvPlan::Run>> runs(k_size);
  for (int64_t kp = 0; kp < k_size; ++kp) {
    const int64_t* s = src.data() + kp * out_size;
    for (int64_t op = 0; op < out_size; ++op) {
      std::vector<ConvPlan::Run>& r = runs[kp];
      if (!r.empty()) {
        ConvPlan::Run& last = r.back();
        const bool padding = s[op] < 0 && last.src < 0;
        const bool next = s[op] >= 0 && last.src >= 0 && s[op] == last.src + last.length;
        if (padding || next) {
          ++last.length;
          continue;
        }
      }
      r.push_back({op, s[op] < 0 ? -1 : s[op], 1});
    }
  }
  return runs;
}

template <typename C>
void RunConv(const ConvPlan& p, const std::vector<C>& in, const std::vector<C>& k,
             std::vector<C>& out) {
  const int rank = static_cast<int>(p.in_sp.size());
  int64_t in_size = 1, k_size = 1, out_size = 1;
  for (int d = 0; d < rank; ++d) {
    in_size *= p.in_sp[d];
    k_size *= p.k_sp[d];
    out_size *= p.out_sp[d];
  }
  const int64_t ig = p.in_c / p.groups;   // input channels per feature group
  // Output channels per group, feature or batch (at most one kind has more
  // than one).
  const int64_t groups = p.groups * p.batch_groups;
  const int64_t og = p.out_c / groups;
  const int64_t rows = ig * k_size;
  std::vector<C> col(rows * out_size);
  const std::vector<std::vector<ConvPlan::Run>>& runs = *p.runs;
  for (int64_t b = 0; b < p.batch; ++b) {
    if (b > 0 && Cancelled()) return;  // the program stops at the next step
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t in_b = p.batch_groups > 1 ? g * p.batch + b : b;
      const int64_t feature_group = p.batch_groups > 1 ? 0 : g;
      for (int64_t c = 0; c < ig; ++c) {
        const C* plane = in.data() + (in_b * p.in_c + feature_group * ig + c) * in_size;
        for (int64_t kp = 0; kp < k_size; ++kp) {
          C* row = col.data() + (c * k_size + kp) * out_size;
          for (const ConvPlan::Run& r : runs[kp]) {
            if (r.src < 0) {
              std::fill_n(row + r.out, r.length, C(0));
            } else {
              std::copy_n(plane + r.src, r.length, row + r.out);
            }
          }
        }
      }
      // out[b, g*og : (g+1)*og, :] = K_g [og, rows] x col [rows, out_size]
      Gemm(false, false, og, out_size, rows, k.data() + g * og * rows, col.data(),
           out.data() + (b * p.out_c + g * og) * out_size);
    }
  }
}

}  // namespace

absl::StatusOr<Kernel> MakeIm2colConvolutionKernel(const ir::Instruction& instr) {
  const Shape in = instr.operand(0)->shape();
  const Shape ker = instr.operand(1)->shape();
  const Shape out_shape = instr.shape();
  const ir::ConvDims& c = instr.attrs().conv;
  ConvPlan p;
  p.batch_groups = instr.attrs().batch_group_count;
  p.batch = in.dim(c.input_batch) / p.batch_groups;
  p.in_c = in.dim(c.input_feature);
  p.out_c = ker.dim(c.kernel_output_feature);
  p.groups = instr.attrs().feature_group_count;
  p.window = instr.attrs().window;
  const int rank = static_cast<int>(c.input_spatial.size());
  if (p.window.empty()) p.window.resize(rank);
  p.in_perm = {c.input_batch, c.input_feature};
  p.k_perm = {c.kernel_output_feature, c.kernel_input_feature};
  std::vector<int64_t> canon_out = {p.batch, p.out_c};
  for (int d = 0; d < rank; ++d) {
    p.in_sp.push_back(in.dim(c.input_spatial[d]));
    p.k_sp.push_back(ker.dim(c.kernel_spatial[d]));
    p.out_sp.push_back(out_shape.dim(c.output_spatial[d]));
    p.in_perm.push_back(c.input_spatial[d]);
    p.k_perm.push_back(c.kernel_spatial[d]);
    canon_out.push_back(out_shape.dim(c.output_spatial[d]));
  }
  // Strides for reading the canonical [N, O, spatial...] result in output
  // layout order.
  {
    const std::vector<int64_t> source = SourceTable(p);
    int64_t k_size = 1, out_size = 1;
    for (int d = 0; d < rank; ++d) {
      k_size *= p.k_sp[d];
      out_size *= p.out_sp[d];
    }
    p.runs = std::make_shared<const std::vector<std::vector<ConvPlan::Run>>>(
        SourceRuns(source, k_size, out_size));
  }
  const std::vector<int64_t> canon_strides = ir::RowMajorStrides(canon_out);
  std::vector<int64_t> read_strides(out_shape.rank());
  read_strides[c.output_batch] = canon_strides[0];
  read_strides[c.output_feature] = canon_strides[1];
  for (int d = 0; d < rank; ++d) read_strides[c.output_spatial[d]] = canon_strides[2 + d];
  const std::vector<int64_t> out_strides = ir::RowMajorStrides(out_shape.dims());
  // Integer convolutions accumulate in int64 and wrap into the element type,
  // as XLA's integer arithmetic does (through double they would saturate).
  const bool use_int = ir::IsIntegralType(in.type());
  const bool use_double = in.type() == ElementType::kF64;
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    auto compute = [&](auto zero) {
      using C = decltype(zero);
      std::vector<C> a = LoadPermuted<C>(*ops[0], p.in_perm);
      std::vector<C> b = LoadPermuted<C>(*ops[1], p.k_perm);
      std::vector<C> canon(out_shape.ElementCount());
      RunConv<C>(p, a, b, canon);
      ir::DispatchType(out_shape.type(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, C>) {  // lay the result out in place
          StridedCopy(out_shape.dims(), reinterpret_cast<const uint8_t*>(canon.data()), 0,
                      read_strides, out->data(), 0, out_strides, sizeof(C));
        } else {
          std::vector<C> laid(canon.size());
          StridedCopy(out_shape.dims(), reinterpret_cast<const uint8_t*>(canon.data()), 0,
                      read_strides, reinterpret_cast<uint8_t*>(laid.data()), 0, out_strides,
                      sizeof(C));
          T* o = out->as<T>();
          for (size_t i = 0; i < laid.size(); ++i) o[i] = ir::ConvertValue<T>(laid[i]);
        }
      });
    };
    if (use_int)
      compute(int64_t{0});
    else if (use_double)
      compute(0.0);
    else compute(0.0f);
    return out;
  });
}

namespace {

// The kernels that can run the convolution `instr`, and whether it is small
// enough to time them at compile time.
struct ConvolutionCandidates {
  std::vector<NamedKernel> kernels;
  absl::Status refused;  // why none can, when `kernels` is empty
  bool measure = false;
};

// Whether the convolution `instr` is small enough to time its kernels at
// compile time.
bool Measured(const ir::Instruction& instr) {
  // Which is fastest depends on the shape (oneDNN's kernels are poor at one
  // input channel, its weight-gradient primitive wins on weight gradients):
  // measure, unless the convolution is too large to run at compile time.
  int64_t macs = instr.shape().ElementCount();
  const ir::Shape& ker = instr.operand(1)->shape();
  macs *= ker.ElementCount() / std::max<int64_t>(1, ker.dim(instr.attrs().conv.kernel_output_feature));
  int64_t bytes = instr.shape().ByteSize();
  for (const ir::Instruction* operand : instr.operands()) bytes += operand->shape().ByteSize();
  // im2col's scratch: a column per output position of each input feature
  // of a group and kernel position.
  bytes += macs / std::max<int64_t>(1, instr.shape().dim(instr.attrs().conv.output_batch)) /
           std::max<int64_t>(1, ker.dim(instr.attrs().conv.kernel_output_feature)) * 4;
  return macs <= kMaxTunedMacs && bytes <= kMaxTunedBytes;
}

ConvolutionCandidates CandidatesFor(const ir::Instruction& instr) {
  ConvolutionCandidates c;
  c.measure = Measured(instr);
  // Untimed, the first of oneDNN's kernels is the one that runs.
  c.kernels = DnnlConvolutionKernels(instr, kDnnlPieceMacs, /*bias=*/false,
                                     /*first_only=*/!c.measure);
  absl::StatusOr<Kernel> im2col = MakeIm2colConvolutionKernel(instr);
  if (im2col.ok()) c.kernels.push_back({"im2col", *std::move(im2col)});
  if (absl::StatusOr<Kernel> scatter = MakeScatterConvolutionKernel(instr); scatter.ok()) {
    c.kernels.push_back({"scatter", *std::move(scatter)});
  }
  if (c.kernels.empty()) c.refused = im2col.status();
  return c;
}

// Adds `bias` (a vector along dimension `feature` of `shape`; none when
// null) to `out` in place and then, with `relu`, takes the maximum with +0,
// as one vectorizable pass split over the compute threads when large: with
// the features innermost (channels last), whole copies of the bias in a
// row of at least kBiasRow elements are added along the output.
constexpr int64_t kBiasRow = 512;
void AddBias(const Shape& shape, int64_t feature, const float* bias, bool relu, float* out) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (d < feature) outer *= shape.dim(d);
    if (d > feature) inner *= shape.dim(d);
  }
  const int64_t features = shape.dim(feature);
  const int64_t count = outer * features * inner;
  if (count == 0 || (bias == nullptr && !relu)) return;
  std::vector<float> row;
  int64_t span = inner;  // elements that one bias value (or one row) covers
  if (inner == 1 && bias != nullptr) {
    const int64_t copies = std::clamp<int64_t>(kBiasRow / features, 1, outer);
    for (int64_t c = 0; c < copies; ++c) row.insert(row.end(), bias, bias + features);
    span = static_cast<int64_t>(row.size());
  }
  if (bias == nullptr) span = count;
  // Elements [first, last): the spans they cross, the first and last
  // perhaps in part (the threads split elements, so that few spans still
  // go to every thread).
  auto add = [&](int64_t first, int64_t last) {
    while (first < last) {
      const int64_t u = first / span, from = first % span;
      const int64_t n = std::min(span - from, last - first);
      float* at = out + first;
      if (bias == nullptr) {
        ReluRow(at, nullptr, n);
      } else if (inner == 1) {
        const float* r = row.data() + from;
        if (relu) {
          ReluRow(at, r, n);
        } else {
          for (int64_t j = 0; j < n; ++j) at[j] += r[j];
        }
      } else {
        const float b = bias[u % features];
        if (relu) {
          ReluRow(at, b, n);
        } else {
          for (int64_t j = 0; j < n; ++j) at[j] += b;
        }
      }
      first += n;
    }
  };
  int threads = 1;
  if (count >= kParallelElements) {
    UseComputeThreads();
    threads = omp_get_max_threads();
  }
  if (threads <= 1) {
    add(0, count);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    add(count * t / n, count * (t + 1) / n);
  }
}

}  // namespace

absl::StatusOr<Kernel> MakeConvolutionKernel(const ir::Instruction& instr) {
  ConvolutionCandidates c = CandidatesFor(instr);
  if (c.kernels.empty()) return c.refused;
  return ChooseKernel(instr, std::move(c.kernels), c.measure).kernel;
}

absl::StatusOr<std::vector<NamedKernel>> ConvolutionFusionCandidates(const ir::Instruction& call,
                                                                     bool* measure) {
  std::optional<passes::ConvolutionFusionForm> form;
  if (call.opcode() == ir::Opcode::kCall && call.called().size() == 1) {
    form = passes::MatchConvolutionFusion(*call.called(0));
  }
  if (!form.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call.name(), " does not call a convolution fusion (passes::MatchConvolutionFusion)"));
  }
  const ir::Instruction& conv = *form->convolution;
  ConvolutionCandidates alone = CandidatesFor(conv);
  std::vector<NamedKernel> candidates =
      DnnlConvolutionKernels(conv, kDnnlPieceMacs, /*bias=*/true, /*first_only=*/!alone.measure);
  if (candidates.empty() && alone.kernels.empty()) return alone.refused;
  if (measure != nullptr) *measure = alone.measure;
  const Shape shape = conv.shape();
  const int64_t feature = conv.attrs().conv.output_feature;
  const bool relu = form->relu;
  // oneDNN's relu (a post-op) takes a NaN to 0 where the maximum keeps
  // it: its convolutions with a bias are followed by our relu's pass.
  if (relu) {
    for (NamedKernel& k : candidates) {
      k.name += ", then the relu";
      k.kernel = [kernel = std::move(k.kernel), shape, feature](
                     ExecState& st, const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, kernel(st, ops));
        AddBias(shape, feature, nullptr, /*relu=*/true, out->as<float>());
        return out;
      };
    }
  }
  const bool with_bias = !candidates.empty();
  for (NamedKernel& k : alone.kernels) {
    // A forward convolution then the bias's pass never beats the same
    // implementation adding the bias as it writes: not timed.
    if (with_bias && absl::StartsWith(k.name, "onednn forward ")) continue;
    candidates.push_back(
        {absl::StrCat(k.name, relu ? ", then the bias and relu" : ", then the bias"),
         Kernel([kernel = std::move(k.kernel), shape, feature, relu](
                    ExecState& st, const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
           ASSIGN_OR_RETURN(BufferPtr out, kernel(st, {ops[0], ops[1]}));
           AddBias(shape, feature, ops[2]->as<float>(), relu, out->as<float>());
           return out;
         })});
  }
  return candidates;
}

absl::StatusOr<Kernel> MakeConvolutionFusionKernel(const ir::Instruction& call) {
  bool measure = false;
  ASSIGN_OR_RETURN(std::vector<NamedKernel> candidates,
                   ConvolutionFusionCandidates(call, &measure));
  return ChooseKernel(call, std::move(candidates), measure).kernel;
}

}  // namespace kiln::host
