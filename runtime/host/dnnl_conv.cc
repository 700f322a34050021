#include "runtime/host/dnnl_conv.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dnnl.hpp"
#include "runtime/host/cancel.h"
#include "runtime/host/threads.h"

namespace kiln::host {
namespace {

using dnnl::memory;
using ir::ElementType;
using ir::Shape;

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// oneDNN's logical dimensions, read from `shape`'s row-major buffer:
// logical dimension k is the buffer's dimension order[k].
memory::desc Strided(const Shape& shape, const std::vector<int64_t>& order) {
  const std::vector<int64_t> row_major = ir::RowMajorStrides(shape.dims());
  memory::dims dims, strides;
  for (int64_t p : order) {
    dims.push_back(shape.dim(p));
    strides.push_back(row_major[p]);
  }
  return memory::desc(dims, memory::data_type::f32, strides);
}

memory::desc Any(const memory::desc& md) {
  return memory::desc(md.dims(), memory::data_type::f32, memory::format_tag::any);
}

// Reorders below this many bytes (a layer's weights) run on the calling
// thread alone: waking the team's other threads costs more than they save,
// and where another process holds their cores (a client on the same
// machine) one of them can take a millisecond to come.
constexpr size_t kSmallReorderBytes = size_t{64} << 10;

// An operand or the result of a Plan. (Outside Plan: Plan holds an
// optional one, which clang cannot instantiate before the nested type's
// member initializers are complete.)
struct PlanOperand {
  memory::desc lies;    // the Kiln buffer's layout (of one piece, see Split)
  memory::desc wanted;  // the primitive's layout
  int arg = 0;
  std::optional<dnnl::reorder> reorder;
  // Elements between neighbouring pieces along the split dimension; 0:
  // every piece reads the whole operand.
  int64_t piece_stride = 0;

  // The layout the primitive chose for this operand and its argument.
  void Want(const memory::desc& md, int argument) {
    wanted = md;
    arg = argument;
  }
};

// One way to run the convolution, built at compile time. The HLO operands
// (input, kernel) and result each have their own descriptor as they lie,
// the oneDNN argument they are bound to, and a reorder into or out of the
// layout the primitive chose when that differs.
struct Plan {
  using Operand = PlanOperand;
  Operand in, ker, out;
  // The bias (a vector of the output features), for a plan that adds one.
  std::optional<Operand> bias;
  // Set when the HLO kernel must first be copied into a dense array of
  // these logical dimensions with its spatial ones (from the third on)
  // reversed, reading the Kiln buffer through `flip_strides`; `ker.lies`
  // then describes that copy.
  std::vector<int64_t> flip_dims, flip_strides;
  memory::desc scratchpad;
  dnnl::primitive primitive;
  std::string name;
  // oneDNN's reference implementation (plain loops: never competitive, and
  // one run of it can take a second) was all it had for this plan.
  bool reference = false;

  // Makes `op` (its `lies` the whole operand) one piece of `piece`
  // positions along its logical dimension `dim`: the plan then runs on
  // each piece in turn, at an offset of piece_stride per position.
  static void Split(Operand& op, int dim, int64_t piece) {
    const dnnl_memory_desc_t& whole = op.lies.data;
    memory::dims dims = op.lies.dims();
    memory::dims strides(whole.format_desc.blocking.strides,
                         whole.format_desc.blocking.strides + whole.ndims);
    op.piece_stride = strides[dim];
    dims[dim] = piece;
    op.lies = memory::desc(dims, memory::data_type::f32, strides);
  }

  // Adds the reorders where the primitive wants another layout.
  void Connect() {
    auto reorder = [](const memory::desc& from, const memory::desc& to) {
      // oneDNN sizes a primitive's team when it is created: a small
      // reorder gets the calling thread alone (see kSmallReorderBytes).
      // The team is set back even when oneDNN throws.
      struct Restore {
        bool small;
        ~Restore() {
          if (small) UseComputeThreads();
        }
      } restore{from.get_size() < kSmallReorderBytes};
      if (restore.small) omp_set_num_threads(1);
      return dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), from, Engine(), to));
    };
    if (in.wanted != in.lies) in.reorder = reorder(in.lies, in.wanted);
    if (ker.wanted != ker.lies) ker.reorder = reorder(ker.lies, ker.wanted);
    if (out.wanted != out.lies) out.reorder = reorder(out.wanted, out.lies);
    if (bias.has_value() && bias->wanted != bias->lies) {
      bias->reorder = reorder(bias->lies, bias->wanted);
    }
  }
};

struct Geometry {
  int rank = 0;
  memory::dims strides, dilates, pad_l, pad_r;
  // The input's dilation (XLA's lhs_dilate): only a data gradient, where it
  // is the forward convolution's stride, has one.
  memory::dims base_dilates;
  bool base_dilated = false;
};

// The checks every plan shares; nullopt when oneDNN does not cover `instr`.
std::optional<Geometry> Covered(const ir::Instruction& instr) {
  const Shape& in = instr.operand(0)->shape();
  const Shape& ker = instr.operand(1)->shape();
  const Shape& out = instr.shape();
  Geometry g;
  g.rank = static_cast<int>(instr.attrs().conv.input_spatial.size());
  if (in.type() != ElementType::kF32 || ker.type() != ElementType::kF32 ||
      out.type() != ElementType::kF32 || g.rank < 1 || g.rank > 3 ||
      instr.attrs().batch_group_count != 1 || in.ElementCount() == 0 ||
      ker.ElementCount() == 0 || out.ElementCount() == 0) {
    return std::nullopt;
  }
  std::vector<ir::WindowDim> window = instr.attrs().window;
  if (window.empty()) window.resize(g.rank);
  for (const ir::WindowDim& w : window) {
    if (w.base_dilation < 1 || w.pad_lo < 0 || w.pad_hi < 0) return std::nullopt;
    g.base_dilates.push_back(w.base_dilation);
    g.base_dilated = g.base_dilated || w.base_dilation != 1;
    g.strides.push_back(w.stride);
    g.dilates.push_back(w.window_dilation - 1);
    g.pad_l.push_back(w.pad_lo);
    g.pad_r.push_back(w.pad_hi);
  }
  return g;
}

// Moves `pd` to the first implementation of oneDNN's `impl`-th name (it
// lists variants of one kernel under one name); false when it has fewer.
// The descriptor `pd` was made from must outlive this call: the iterator
// over implementations reads it.
template <typename PrimitiveDesc>
bool PickImplementation(PrimitiveDesc& pd, int impl) {
  std::vector<std::string> names = {pd.impl_info_str()};
  while (static_cast<int>(names.size()) <= impl) {
    if (!pd.next_impl()) return false;
    if (std::find(names.begin(), names.end(), pd.impl_info_str()) == names.end()) {
      names.push_back(pd.impl_info_str());
    }
  }
  return true;
}

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// out = conv(in, ker) (+ bias, with `bias`) as oneDNN's forward
// convolution, by the first implementation of oneDNN's `impl`-th name (null
// when it has fewer), the operands in the layouts it chooses or, with
// `as_laid_out`, as they lie (which is faster depends on the
// implementation: timed).
std::shared_ptr<Plan> ForwardPlanOf(const ir::Instruction& instr, const Geometry& g,
                                    int64_t piece, bool as_laid_out, int impl, bool bias) {
  if (g.base_dilated) return nullptr;
  const Shape& ker = instr.operand(1)->shape();
  const ir::ConvDims& c = instr.attrs().conv;
  auto plan = std::make_shared<Plan>();
  std::vector<int64_t> src_order = {c.input_batch, c.input_feature};
  std::vector<int64_t> dst_order = {c.output_batch, c.output_feature};
  for (int d = 0; d < g.rank; ++d) {
    src_order.push_back(c.input_spatial[d]);
    dst_order.push_back(c.output_spatial[d]);
  }
  plan->in.lies = Strided(instr.operand(0)->shape(), src_order);
  plan->out.lies = Strided(instr.shape(), dst_order);
  // Pieces of the batch.
  Plan::Split(plan->in, 0, piece);
  Plan::Split(plan->out, 0, piece);
  // Weights: [O, I, spatial...], or [G, O/G, I/G, spatial...] with groups
  // (the output features are group-major).
  const int64_t groups = instr.attrs().feature_group_count;
  const std::vector<int64_t> row_major = ir::RowMajorStrides(ker.dims());
  const int64_t o = ker.dim(c.kernel_output_feature);
  const int64_t o_stride = row_major[c.kernel_output_feature];
  memory::dims dims = {o}, strides = {o_stride};
  if (groups > 1) {
    dims = {groups, o / groups};
    strides = {o / groups * o_stride, o_stride};
  }
  dims.push_back(ker.dim(c.kernel_input_feature));
  strides.push_back(row_major[c.kernel_input_feature]);
  for (int d = 0; d < g.rank; ++d) {
    dims.push_back(ker.dim(c.kernel_spatial[d]));
    strides.push_back(row_major[c.kernel_spatial[d]]);
  }
  plan->ker.lies = memory::desc(dims, memory::data_type::f32, strides);
  const memory::desc src = as_laid_out ? plan->in.lies : Any(plan->in.lies),
                     dst = as_laid_out ? plan->out.lies : Any(plan->out.lies);
  const auto make_desc = [&]() {
    if (!bias) {
      return dnnl::convolution_forward::desc(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
          Any(plan->ker.lies), dst, g.strides, g.dilates, g.pad_l, g.pad_r);
    }
    plan->bias.emplace();
    plan->bias->lies = memory::desc({o}, memory::data_type::f32, memory::format_tag::x);
    return dnnl::convolution_forward::desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
        Any(plan->ker.lies), plan->bias->lies, dst, g.strides, g.dilates, g.pad_l, g.pad_r);
  };
  // (The iterator over implementations reads the descriptor: it must
  // outlive `pd`'s next_impl calls.)
  const dnnl::convolution_forward::desc desc = make_desc();
  dnnl::convolution_forward::primitive_desc pd(desc, UserScratchpad(), Engine());
  if (!PickImplementation(pd, impl)) return nullptr;
  plan->in.Want(pd.src_desc(), DNNL_ARG_SRC);
  plan->ker.Want(pd.weights_desc(), DNNL_ARG_WEIGHTS);
  plan->out.Want(pd.dst_desc(), DNNL_ARG_DST);
  if (bias) plan->bias->Want(pd.bias_desc(), DNNL_ARG_BIAS);
  plan->scratchpad = pd.scratchpad_desc();
  plan->primitive = dnnl::convolution_forward(pd);
  plan->name = absl::StrCat("onednn forward ", bias ? "with bias " : "",
                            as_laid_out ? "as laid out " : "", pd.impl_info_str());
  plan->reference = absl::StartsWith(pd.impl_info_str(), "ref");
  plan->Connect();
  return plan;
}

std::shared_ptr<Plan> ForwardPlan(const ir::Instruction& instr, const Geometry& g,
                                  int64_t piece, bool as_laid_out, int impl) {
  return ForwardPlanOf(instr, g, piece, as_laid_out, impl, /*bias=*/false);
}

std::shared_ptr<Plan> ForwardBiasPlan(const ir::Instruction& instr, const Geometry& g,
                                      int64_t piece, bool as_laid_out, int impl) {
  return ForwardPlanOf(instr, g, piece, as_laid_out, impl, /*bias=*/true);
}

// A weight gradient written as a convolution: out[b, o, y...] =
// sum over f and k... of in[b, f, y*s + k*d - p] * ker[f, o, k...]. That is
// oneDNN's weight gradient with the input's feature dimension as the
// minibatch, the input's batch as the channels, the HLO kernel as the
// gradient of the result, the window dilation as the stride and the window
// stride as the dilation.
//
// `as_laid_out`: the source and the result's gradient as they lie
// (channels last), not in the layouts oneDNN would choose for them, so no
// reorders before the primitive (which can cost more than it does: a
// LeNet-5 weight gradient with one input feature runs in about half the
// time). Timed against the other plans like any candidate.
std::shared_ptr<Plan> WeightsPlan(const ir::Instruction& instr, const Geometry& g,
                                    int64_t piece, bool as_laid_out, int impl) {
  if (instr.attrs().feature_group_count != 1 || g.base_dilated) return nullptr;
  const ir::ConvDims& c = instr.attrs().conv;
  std::vector<int64_t> src_order = {c.input_feature, c.input_batch};
  std::vector<int64_t> diff_dst_order = {c.kernel_input_feature, c.kernel_output_feature};
  std::vector<int64_t> diff_w_order = {c.output_feature, c.output_batch};
  memory::dims strides, dilates;
  for (int d = 0; d < g.rank; ++d) {
    src_order.push_back(c.input_spatial[d]);
    diff_dst_order.push_back(c.kernel_spatial[d]);
    diff_w_order.push_back(c.output_spatial[d]);
    strides.push_back(g.dilates[d] + 1);
    dilates.push_back(g.strides[d] - 1);
  }
  auto plan = std::make_shared<Plan>();
  plan->in.lies = Strided(instr.operand(0)->shape(), src_order);
  plan->ker.lies = Strided(instr.operand(1)->shape(), diff_dst_order);
  plan->out.lies = Strided(instr.shape(), diff_w_order);
  // Pieces of the output features (oneDNN's output channels): the batch
  // is contracted here, the output features are not.
  Plan::Split(plan->ker, 1, piece);
  Plan::Split(plan->out, 0, piece);
  const memory::desc src = as_laid_out ? plan->in.lies : Any(plan->in.lies),
                     diff_dst = as_laid_out ? plan->ker.lies : Any(plan->ker.lies),
                     diff_w = Any(plan->out.lies);
  dnnl::convolution_forward::desc hint_desc(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, src, diff_w,
                                            diff_dst, strides, dilates, g.pad_l, g.pad_r);
  dnnl::convolution_forward::primitive_desc hint(hint_desc, Engine());
  dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, src, diff_w,
                                                diff_dst, strides, dilates, g.pad_l, g.pad_r);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, UserScratchpad(), Engine(), hint);
  if (!PickImplementation(pd, impl)) return nullptr;
  plan->in.Want(pd.src_desc(), DNNL_ARG_SRC);
  plan->ker.Want(pd.diff_dst_desc(), DNNL_ARG_DIFF_DST);
  plan->out.Want(pd.diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS);
  plan->scratchpad = pd.scratchpad_desc();
  plan->primitive = dnnl::convolution_backward_weights(pd);
  plan->name = absl::StrCat("onednn weights ", as_laid_out ? "as laid out " : "",
                            pd.impl_info_str());
  plan->reference = absl::StartsWith(pd.impl_info_str(), "ref");
  plan->Connect();
  return plan;
}

// A data gradient written as a convolution: with stride 1 and the kernel
// read reversed, out[b, o, y] = sum over f and k of
// in[b, f, y + k*d - p] * ker[f, o, k] is oneDNN's data gradient of a
// convolution whose weights are ker with its spatial dimensions reversed,
// whose result gradient is the HLO input and whose padding is (K-1)*d - p.
// An input dilated by s (zeros between its elements, as the data gradient
// of a convolution of stride s reads it) is that convolution's stride.
//
// `as_laid_out`: the result's gradient and the result as they lie, as for
// WeightsPlan.
std::shared_ptr<Plan> DataPlan(const ir::Instruction& instr, const Geometry& g,
                                 int64_t piece, bool as_laid_out, int impl) {
  if (instr.attrs().feature_group_count != 1) return nullptr;
  const Shape& ker = instr.operand(1)->shape();
  const ir::ConvDims& c = instr.attrs().conv;
  memory::dims pad_l, pad_r, strides;
  for (int d = 0; d < g.rank; ++d) {
    if (g.strides[d] != 1) return nullptr;
    const int64_t reach = (ker.dim(c.kernel_spatial[d]) - 1) * (g.dilates[d] + 1);
    pad_l.push_back(reach - g.pad_l[d]);
    pad_r.push_back(reach - g.pad_r[d]);
    if (pad_l.back() < 0 || pad_r.back() < 0) return nullptr;
    strides.push_back(g.base_dilates[d]);
  }
  std::vector<int64_t> diff_dst_order = {c.input_batch, c.input_feature};
  std::vector<int64_t> diff_src_order = {c.output_batch, c.output_feature};
  std::vector<int64_t> weights_order = {c.kernel_input_feature, c.kernel_output_feature};
  for (int d = 0; d < g.rank; ++d) {
    diff_dst_order.push_back(c.input_spatial[d]);
    diff_src_order.push_back(c.output_spatial[d]);
    weights_order.push_back(c.kernel_spatial[d]);
  }
  auto plan = std::make_shared<Plan>();
  plan->in.lies = Strided(instr.operand(0)->shape(), diff_dst_order);
  plan->out.lies = Strided(instr.shape(), diff_src_order);
  // Pieces of the batch.
  Plan::Split(plan->in, 0, piece);
  Plan::Split(plan->out, 0, piece);
  const std::vector<int64_t> row_major = ir::RowMajorStrides(ker.dims());
  for (int64_t p : weights_order) {
    plan->flip_dims.push_back(ker.dim(p));
    plan->flip_strides.push_back(row_major[p]);
  }
  plan->ker.lies = memory::desc(plan->flip_dims, memory::data_type::f32,
                                ir::RowMajorStrides(plan->flip_dims));
  const memory::desc diff_src = as_laid_out ? plan->out.lies : Any(plan->out.lies),
                     weights = Any(plan->ker.lies),
                     diff_dst = as_laid_out ? plan->in.lies : Any(plan->in.lies);
  dnnl::convolution_forward::desc hint_desc(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, diff_src, weights,
                                            diff_dst, strides, g.dilates, pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc hint(hint_desc, Engine());
  dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, diff_src,
                                             weights, diff_dst, strides, g.dilates, pad_l, pad_r);
  dnnl::convolution_backward_data::primitive_desc pd(desc, UserScratchpad(), Engine(), hint);
  if (!PickImplementation(pd, impl)) return nullptr;
  plan->in.Want(pd.diff_dst_desc(), DNNL_ARG_DIFF_DST);
  plan->ker.Want(pd.weights_desc(), DNNL_ARG_WEIGHTS);
  plan->out.Want(pd.diff_src_desc(), DNNL_ARG_DIFF_SRC);
  plan->scratchpad = pd.scratchpad_desc();
  plan->primitive = dnnl::convolution_backward_data(pd);
  plan->name = absl::StrCat("onednn data ", as_laid_out ? "as laid out " : "",
                            pd.impl_info_str());
  plan->reference = absl::StartsWith(pd.impl_info_str(), "ref");
  plan->Connect();
  return plan;
}

// Copies the kernel `from` into the dense `to` as plan.flip_dims says, with
// its spatial dimensions reversed.
void FlipKernel(const Plan& plan, const float* from, float* to) {
  const std::vector<int64_t>& dims = plan.flip_dims;
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> idx(rank, 0);
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  for (int64_t i = 0; i < count; ++i) {
    int64_t src = 0;
    for (int d = 0; d < rank; ++d) {
      src += (d >= 2 ? dims[d] - 1 - idx[d] : idx[d]) * plan.flip_strides[d];
    }
    to[i] = from[src];
    for (int d = rank - 1; d >= 0 && ++idx[d] == dims[d]; --d) idx[d] = 0;
  }
}

// A plan cut into pieces along the dimension its Split calls name: `piece`
// runs on each full piece, `rest` (null when the pieces divide `extent`)
// on the last, smaller one.
struct Pieces {
  std::shared_ptr<const Plan> piece, rest;
  int64_t extent = 0, piece_extent = 0;
};

// Runs `plan` on the piece that starts at position `start`: binds the
// operands there (reordered into scratch where the primitive wants another
// layout) and waits for the result. `bias`: the bias, for a plan that adds
// one (every piece reads all of it).
absl::Status RunPiece(const Plan& plan, int64_t start, const uint8_t* in, const uint8_t* ker,
                      const uint8_t* bias, uint8_t* out, dnnl::stream& stream, ExecState& st) {
  // Scratch for reordered operands and the primitive, charged like any
  // other buffer of the execution and freed with the piece.
  std::vector<BufferPtr> scratch;
  auto temp = [&](const memory::desc& md) -> absl::StatusOr<memory> {
    const int64_t bytes = static_cast<int64_t>(md.get_size());
    ASSIGN_OR_RETURN(BufferPtr b, st.Allocate(Shape(ElementType::kU8, {bytes}), ExecState::kScratch));
    scratch.push_back(b);
    return memory(md, Engine(), b->data());
  };
  auto at = [start](const Plan::Operand& op, const uint8_t* data) {
    return const_cast<uint8_t*>(data) + start * op.piece_stride * int64_t{sizeof(float)};
  };
  std::unordered_map<int, memory> args;
  auto bind = [&](const Plan::Operand& op, uint8_t* data, bool input) -> absl::Status {
    memory lies(op.lies, Engine(), data);
    if (!op.reorder) {
      args.emplace(op.arg, lies);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(memory wanted, temp(op.wanted));
    if (input) op.reorder->execute(stream, lies, wanted);
    args.emplace(op.arg, wanted);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(bind(plan.in, at(plan.in, in), true));
  RETURN_IF_ERROR(bind(plan.ker, at(plan.ker, ker), true));
  if (plan.bias.has_value()) {
    RETURN_IF_ERROR(bind(*plan.bias, const_cast<uint8_t*>(bias), true));
  }
  RETURN_IF_ERROR(bind(plan.out, at(plan.out, out), false));
  ASSIGN_OR_RETURN(memory pad, temp(plan.scratchpad));
  args.emplace(DNNL_ARG_SCRATCHPAD, pad);
  plan.primitive.execute(stream, args);
  if (plan.out.reorder) {
    memory lies(plan.out.lies, Engine(), at(plan.out, out));
    plan.out.reorder->execute(stream, args.at(plan.out.arg), lies);
  }
  stream.wait();
  return absl::OkStatus();
}

absl::StatusOr<BufferPtr> Run(const Pieces& pieces, const Shape& out_shape, ExecState& st,
                              const std::vector<BufferPtr>& ops) {
  ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
  const Plan& first = *pieces.piece;
  UseComputeThreads();
  try {
    dnnl::stream stream(Engine());
    const uint8_t* ker = ops[1]->data();
    BufferPtr flipped;  // the kernel reversed, shared by every piece
    if (!first.flip_dims.empty()) {
      ASSIGN_OR_RETURN(flipped, st.Allocate(Shape(ElementType::kF32, first.flip_dims)));
      FlipKernel(first, ops[1]->as<float>(), flipped->as<float>());
      ker = flipped->data();
    }
    for (int64_t start = 0; start < pieces.extent; start += pieces.piece_extent) {
      // Between pieces: the program stops at its next step.
      if (start > 0 && Cancelled()) break;
      const bool last_short = pieces.extent - start < pieces.piece_extent;
      RETURN_IF_ERROR(RunPiece(last_short ? *pieces.rest : first, start, ops[0]->data(), ker,
                               first.bias.has_value() ? ops[2]->data() : nullptr, out->data(),
                               stream, st));
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN convolution failed: ", e.what()));
  }
  return out;
}

}  // namespace

// oneDNN's implementations offered for a forward convolution, in its
// order. (The gradient primitives' later implementations were timed on
// LeNet-5 too: one weight gradient ran 10% faster by the third, at the
// price of timing ten more kernels when compiling; not offered.)
constexpr int kImpls = 3;

std::vector<NamedKernel> DnnlConvolutionKernels(const ir::Instruction& instr,
                                                int64_t piece_macs, bool bias, bool first_only) {
  // oneDNN fixes a primitive's thread count when it is created, from the
  // creating thread's OpenMP setting: size that team first, or a program
  // compiled on a thread with the default team runs on every core whatever
  // --threads says.
  UseComputeThreads();
  std::vector<NamedKernel> kernels;
  const std::optional<Geometry> g = Covered(instr);
  if (!g.has_value()) return kernels;
  const Shape out_shape = instr.shape();
  const ir::ConvDims& c = instr.attrs().conv;
  const Shape& ker = instr.operand(1)->shape();
  // Multiply-adds of the whole convolution: every output element takes one
  // per kernel element of its output feature.
  const int64_t macs =
      out_shape.ElementCount() * (ker.ElementCount() / ker.dim(c.kernel_output_feature));
  struct Kind {
    std::shared_ptr<Plan> (*make)(const ir::Instruction&, const Geometry&, int64_t, bool, int);
    int64_t extent;  // of the dimension its pieces divide
    bool as_laid_out;
    // How many of oneDNN's implementations to offer, in its order (its
    // first for a forward convolution of one input channel, brgconv on
    // AVX-512, takes half again the time of the next, jit).
    int impls = 1;
  };
  const int64_t batch = out_shape.dim(c.output_batch);
  const int64_t features = out_shape.dim(c.output_feature);
  std::vector<Kind> kinds = {Kind{ForwardPlan, batch, false, kImpls},
                             Kind{ForwardPlan, batch, true, kImpls},
                             Kind{WeightsPlan, features, false}, Kind{WeightsPlan, features, true},
                             Kind{DataPlan, batch, false}, Kind{DataPlan, batch, true}};
  if (bias) {
    kinds = {Kind{ForwardBiasPlan, batch, false, kImpls},
             Kind{ForwardBiasPlan, batch, true, kImpls}};
  }
  for (const Kind& kind : kinds) {
  for (int impl = 0; impl < kind.impls; ++impl) {
    const int64_t per_position = macs / kind.extent;
    // A single position above the budget cannot be cut: left to im2col,
    // whose matrix products poll for cancellation between bands.
    if (per_position > 2 * piece_macs) continue;
    int64_t piece =
        std::clamp<int64_t>(piece_macs / std::max<int64_t>(1, per_position), 1, kind.extent);
    // oneDNN blocks channels by 16: pieces of whole blocks where they can be.
    if (piece < kind.extent && piece >= 16) piece -= piece % 16;
    auto pieces = std::make_shared<Pieces>();
    pieces->extent = kind.extent;
    pieces->piece_extent = piece;
    try {
      pieces->piece = kind.make(instr, *g, piece, kind.as_laid_out, impl);
      if (pieces->piece != nullptr && kind.extent % piece != 0) {
        pieces->rest = kind.make(instr, *g, kind.extent % piece, kind.as_laid_out, impl);
        // The last piece by the same implementation, or the kernel's name
        // would not say what runs.
        if (pieces->rest == nullptr || pieces->rest->name != pieces->piece->name) continue;
      }
    } catch (const dnnl::error&) {
      continue;  // a shape this primitive refuses
    }
    if (pieces->piece == nullptr || pieces->piece->reference ||
        (pieces->rest != nullptr && pieces->rest->reference)) {
      continue;
    }
    std::string name = pieces->piece->name;
    if (piece < kind.extent) absl::StrAppend(&name, " in pieces of ", piece);
    kernels.push_back({std::move(name),
                       Kernel([pieces, out_shape](ExecState& st, const std::vector<BufferPtr>& ops) {
                         return Run(*pieces, out_shape, st, ops);
                       })});
    if (first_only) return kernels;
  }
  }
  return kernels;
}

}  // namespace kiln::host
