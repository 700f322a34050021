#include "client/autodiff.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/lazy.h"
#include "client/loop.h"

namespace kiln::client {
namespace {

using ir::Opcode;

std::vector<int64_t> InversePermutation(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int64_t>(i);
  return inv;
}

// Gradient of `x` broadcast into `g`'s shape along `mapping`: sum over the
// added dims, then restore the operand's dim order.
Tensor UnBroadcast(const Tensor& g, const Tensor& x, const std::vector<int64_t>& mapping) {
  std::vector<int64_t> added;
  for (int d = 0; d < g.rank(); ++d) {
    if (std::find(mapping.begin(), mapping.end(), d) == mapping.end()) added.push_back(d);
  }
  Tensor summed = added.empty() ? g : Sum(g, added);
  std::vector<int64_t> sorted = mapping;
  std::sort(sorted.begin(), sorted.end());
  if (sorted == mapping) return Reshape(summed, x.shape().dims());
  // summed dim k holds result dim sorted[k]; operand dim i is mapping[i].
  std::vector<int64_t> perm;
  for (int64_t m : mapping) {
    perm.push_back(std::find(sorted.begin(), sorted.end(), m) - sorted.begin());
  }
  return Transpose(summed, perm);
}

absl::StatusOr<std::vector<Tensor>> ConvolutionGrad(const Node& node, const Tensor& x,
                                                    const Tensor& w, const Tensor& g) {
  const int64_t groups = node.attrs->feature_group_count;
  if (node.attrs->conv != Nhwc() || node.attrs->batch_group_count != 1) {
    return absl::UnimplementedError(
        "gradients of convolution need NHWC/HWIO layout and no batch groups");
  }
  std::vector<ir::WindowDim> in_window(2), k_window(2);
  for (int i = 0; i < 2; ++i) {
    const ir::WindowDim f = node.attrs->window.empty() ? ir::WindowDim() : node.attrs->window[i];
    if (f.base_dilation != 1) {
      return absl::UnimplementedError("gradients of convolution with input dilation");
    }
    const int64_t in = x.dim(1 + i), k = w.dim(i), out = g.dim(1 + i);
    const int64_t s = f.stride, d = f.window_dilation, pl = f.pad_lo;
    // d(input): the stride-dilated output gradient convolved with the
    // spatially flipped kernel.
    ir::WindowDim& a = in_window[i];
    a.size = k;
    a.base_dilation = s;
    a.window_dilation = d;
    a.pad_lo = (k - 1) * d - pl;
    a.pad_hi = in + (k - 1) * d - (out - 1) * s - 1 - a.pad_lo;
    // d(kernel): the input correlated with the output gradient, batch
    // contracted.
    ir::WindowDim& b = k_window[i];
    b.size = out;
    b.stride = d;
    b.window_dilation = s;
    b.pad_lo = pl;
    b.pad_hi = (k - 1) * d + (out - 1) * s + 1 - in - pl;
  }
  Tensor dx;
  if (groups == 1) {
    ir::ConvDims in_dims = node.attrs->conv;  // b01f_01oi->b01f
    in_dims.kernel_input_feature = 3;
    in_dims.kernel_output_feature = 2;
    dx = Convolution(g, Reverse(w, {0, 1}), in_window, in_dims);
  } else {
    // Group k of the output gradient's features feeds group k of the
    // input's: the kernel [KH, KW, C/G, O] regrouped as [KH, KW, O/G, C]
    // (output feature c = k * C/G + c' reads w[., ., c', k * O/G + o']).
    const int64_t kh = w.dim(0), kw = w.dim(1), cg = w.dim(2), o = w.dim(3);
    Tensor split = Reshape(Reverse(w, {0, 1}), {kh, kw, cg, groups, o / groups});
    Tensor regrouped =
        Reshape(Transpose(split, {0, 1, 4, 3, 2}), {kh, kw, o / groups, groups * cg});
    dx = Convolution(g, regrouped, in_window, Nhwc(), groups);
  }
  ir::ConvDims k_dims;  // f01b_i01o->01bf
  k_dims.input_batch = 3;
  k_dims.input_feature = 0;
  k_dims.input_spatial = {1, 2};
  k_dims.kernel_input_feature = 0;
  k_dims.kernel_output_feature = 3;
  k_dims.kernel_spatial = {1, 2};
  k_dims.output_batch = 2;
  k_dims.output_feature = 3;
  k_dims.output_spatial = {0, 1};
  // With feature groups the input's features (this convolution's batch)
  // split into the same groups, each meeting its block of the output
  // gradient's features: batch groups.
  Tensor dw = Convolution(x, g, k_window, k_dims, 1, groups);
  return std::vector<Tensor>{dx, dw};
}

absl::StatusOr<std::vector<Tensor>> DotGrad(const Node& node, const Tensor& a, const Tensor& b,
                                            const Tensor& g) {
  const ir::DotDims& d = node.attrs->dot;
  if (a.rank() == 2 && b.rank() == 2 && d.lhs_batch.empty() &&
      d.lhs_contracting == std::vector<int64_t>{1} && d.rhs_contracting == std::vector<int64_t>{0}) {
    return std::vector<Tensor>{Dot(g, b, ir::DotDims{{}, {}, {1}, {1}}),
                               Dot(a, g, ir::DotDims{{}, {}, {0}, {0}})};
  }
  if (a.rank() == 3 && b.rank() == 3 && d.lhs_batch == std::vector<int64_t>{0} &&
      d.rhs_batch == std::vector<int64_t>{0} && d.lhs_contracting == std::vector<int64_t>{2} &&
      d.rhs_contracting == std::vector<int64_t>{1}) {
    return std::vector<Tensor>{Dot(g, b, ir::DotDims{{0}, {0}, {2}, {2}}),
                               Dot(a, g, ir::DotDims{{0}, {0}, {1}, {1}})};
  }
  return absl::UnimplementedError(
      "gradients of dot cover matrix products ([m,k]x[k,n] and batched [b,m,k]x[b,k,n])");
}

absl::StatusOr<std::vector<Tensor>> ReduceWindowGrad(const Node& node, const Tensor& x,
                                                     const Tensor& g) {
  for (const ir::WindowDim& w : node.attrs->window) {
    if (w.base_dilation != 1 || w.window_dilation != 1) {
      return absl::UnimplementedError("gradients of dilated reduce-window");
    }
  }
  if (node.reducer == Reducer::kMax) {
    // Select-and-scatter looks only at the operand's own elements in each
    // padded window, as the forward maximum takes only those.
    return std::vector<Tensor>{SelectAndScatterMax(x, g, node.attrs->window), Tensor()};
  }
  if (node.reducer == Reducer::kAdd) {
    // Every input element receives the gradients of the windows that hold
    // it: pad the stride-dilated gradient and sum windows of the same size.
    std::vector<ir::PadDim> pad;
    std::vector<ir::WindowDim> window;
    for (int i = 0; i < x.rank(); ++i) {
      const ir::WindowDim& w = node.attrs->window[i];
      ir::PadDim p;
      p.lo = w.size - 1 - w.pad_lo;
      p.interior = w.stride - 1;
      p.hi = x.dim(i) + w.size - 2 - p.lo - (g.dim(i) - 1) * w.stride;
      pad.push_back(p);
      ir::WindowDim unit;
      unit.size = w.size;
      window.push_back(unit);
    }
    return std::vector<Tensor>{ReduceWindow(Pad(g, 0, pad), Reducer::kAdd, window), Tensor()};
  }
  return absl::UnimplementedError("gradients of reduce-window cover max and add");
}

// The gradients of `node`'s operands given the gradient `g` of its value.
// An undefined tensor means no gradient flows to that operand.
absl::StatusOr<std::vector<Tensor>> Rule(const std::shared_ptr<Node>& node_ptr, const Tensor& g) {
  const Node& node = *node_ptr;
  const Tensor y(node_ptr);
  std::vector<Tensor> x;
  for (const auto& o : node.operands) x.push_back(Tensor(o));
  // Made only by the rules that select against zeros.
  auto zeros = [&g] { return ZerosLike(g); };
  switch (node.op) {
    case Opcode::kAdd: return std::vector<Tensor>{g, g};
    case Opcode::kSubtract: return std::vector<Tensor>{g, -g};
    case Opcode::kMultiply: return std::vector<Tensor>{g * x[1], g * x[0]};
    case Opcode::kDivide:
      return std::vector<Tensor>{g / x[1], -(g * x[0]) / (x[1] * x[1])};
    case Opcode::kNegate: return std::vector<Tensor>{-g};
    case Opcode::kCopy: return std::vector<Tensor>{g};
    case Opcode::kExp: return std::vector<Tensor>{g * y};
    case Opcode::kExpm1: return std::vector<Tensor>{g * (y + 1.0)};
    case Opcode::kLog: return std::vector<Tensor>{g / x[0]};
    case Opcode::kLog1p: return std::vector<Tensor>{g / (x[0] + 1.0)};
    // d/dx erf(x) = 2/sqrt(pi) exp(-x^2).
    case Opcode::kErf:
      return std::vector<Tensor>{g * 1.1283791670955126 * Exp(-(x[0] * x[0]))};
    case Opcode::kTanh: return std::vector<Tensor>{g * (1.0 - y * y)};
    case Opcode::kLogistic: return std::vector<Tensor>{g * y * (1.0 - y)};
    case Opcode::kSqrt: return std::vector<Tensor>{g * 0.5 / y};
    case Opcode::kRsqrt: return std::vector<Tensor>{g * -0.5 * y / x[0]};
    case Opcode::kAbs: return std::vector<Tensor>{g * Sign(x[0])};
    case Opcode::kSin: return std::vector<Tensor>{g * Cos(x[0])};
    case Opcode::kCos: return std::vector<Tensor>{-(g * Sin(x[0]))};
    case Opcode::kPower:
      return std::vector<Tensor>{g * x[1] * Pow(x[0], x[1] - 1.0), g * Log(x[0]) * y};
    case Opcode::kMaximum: {
      if (node.relu) {
        return std::vector<Tensor>{Select(Greater(y, x[1]), g, zeros()), Tensor()};
      }
      Tensor take_a = GreaterEqual(x[0], x[1]);
      const Tensor zero_g = zeros();
      return std::vector<Tensor>{Select(take_a, g, zero_g), Select(take_a, zero_g, g)};
    }
    case Opcode::kMinimum: {
      Tensor take_a = LessEqual(x[0], x[1]);
      const Tensor zero_g = zeros();
      return std::vector<Tensor>{Select(take_a, g, zero_g), Select(take_a, zero_g, g)};
    }
    case Opcode::kSelect: {
      const Tensor zero_g = zeros();
      return std::vector<Tensor>{Tensor(), Select(x[0], g, zero_g), Select(x[0], zero_g, g)};
    }
    case Opcode::kClamp: {
      Tensor inside = Select(LessEqual(x[0], x[1]), OnesLike(x[1]), ZerosLike(x[1])) *
                      Select(LessEqual(x[1], x[2]), OnesLike(x[1]), ZerosLike(x[1]));
      return std::vector<Tensor>{Tensor(), g * inside, Tensor()};
    }
    case Opcode::kConvert: return std::vector<Tensor>{Cast(g, x[0].storage_type())};
    case Opcode::kBroadcast:
      return std::vector<Tensor>{UnBroadcast(g, x[0], node.attrs->dimensions)};
    case Opcode::kReshape: return std::vector<Tensor>{Reshape(g, x[0].shape().dims())};
    case Opcode::kTranspose:
      return std::vector<Tensor>{Transpose(g, InversePermutation(node.attrs->dimensions))};
    case Opcode::kReverse: return std::vector<Tensor>{Reverse(g, node.attrs->dimensions)};
    case Opcode::kSlice: {
      std::vector<ir::PadDim> pad;
      for (int i = 0; i < x[0].rank(); ++i) {
        const ir::SliceDim& s = node.attrs->slice[i];
        const int64_t n = node.shape.dim(i);
        const int64_t last = n == 0 ? s.start : s.start + (n - 1) * s.stride + 1;
        pad.push_back({s.start, x[0].dim(i) - last, n == 0 ? 0 : s.stride - 1});
      }
      return std::vector<Tensor>{Pad(g, 0, pad)};
    }
    case Opcode::kPad: {
      std::vector<int64_t> start, limit, stride;
      for (int i = 0; i < x[0].rank(); ++i) {
        const ir::PadDim& p = node.attrs->padding[i];
        if (p.lo < 0 || p.hi < 0) {
          return absl::UnimplementedError("gradients of negative padding");
        }
        start.push_back(p.lo);
        limit.push_back(p.lo + (x[0].dim(i) - 1) * (p.interior + 1) + 1);
        stride.push_back(p.interior + 1);
      }
      Tensor inner = Slice(g, start, limit, stride);
      return std::vector<Tensor>{inner, Sum(g) - Sum(inner)};
    }
    case Opcode::kConcatenate: {
      std::vector<Tensor> grads;
      const int64_t dim = node.attrs->dimensions[0];
      int64_t offset = 0;
      for (const Tensor& o : x) {
        std::vector<int64_t> start(g.rank(), 0), limit = g.shape().dims();
        start[dim] = offset;
        limit[dim] = offset + o.dim(dim);
        grads.push_back(Slice(g, start, limit));
        offset += o.dim(dim);
      }
      return grads;
    }
    case Opcode::kReduce: {
      std::vector<int64_t> kept;
      for (int i = 0; i < x[0].rank(); ++i) {
        if (std::find(node.attrs->dimensions.begin(), node.attrs->dimensions.end(), i) ==
            node.attrs->dimensions.end()) {
          kept.push_back(i);
        }
      }
      Tensor spread = BroadcastInDim(g, x[0].shape().dims(), kept);
      if (node.reducer == Reducer::kAdd) return std::vector<Tensor>{spread, Tensor()};
      if (node.reducer == Reducer::kMax || node.reducer == Reducer::kMin) {
        Tensor at_extreme = Equal(x[0], BroadcastInDim(y, x[0].shape().dims(), kept));
        return std::vector<Tensor>{Select(at_extreme, spread, ZerosLike(spread)), Tensor()};
      }
      return absl::UnimplementedError("gradients of product reductions");
    }
    case Opcode::kDot: return DotGrad(node, x[0], x[1], g);
    case Opcode::kConvolution: return ConvolutionGrad(node, x[0], x[1], g);
    case Opcode::kDynamicSlice: {
      // The gradient goes back into the window the slice read (the same
      // clamped starts), zeros elsewhere.
      std::vector<Tensor> starts(x.begin() + 1, x.end());
      std::vector<Tensor> out(x.size());
      out[0] = DynamicUpdateSlice(ZerosLike(x[0]), g, starts);
      return out;
    }
    case Opcode::kDynamicUpdateSlice: {
      // What the update overwrote gets no gradient; the update gets the
      // window's.
      std::vector<Tensor> starts(x.begin() + 2, x.end());
      std::vector<Tensor> out(x.size());
      out[0] = DynamicUpdateSlice(g, ZerosLike(x[1]), starts);
      out[1] = DynamicSlice(g, starts, x[1].shape().dims());
      return out;
    }
    case Opcode::kGather: {
      // Each gathered element goes back where it came from, adding up where
      // slices overlap: a scatter-add with the mirrored dimension numbers.
      const ir::GatherDims& d = node.attrs->gather;
      ir::ScatterDims s;
      s.update_window_dims = d.offset_dims;
      s.inserted_window_dims = d.collapsed_slice_dims;
      s.scatter_dims_to_operand_dims = d.start_index_map;
      s.index_vector_dim = d.index_vector_dim;
      return std::vector<Tensor>{ScatterAdd(ZerosLike(x[0]), x[1], g, std::move(s)), Tensor()};
    }
    case Opcode::kScatter: {
      if (node.reducer != Reducer::kAdd && node.reducer != Reducer::kReplace) {
        return absl::UnimplementedError("gradients of scatter cover adding and replacing");
      }
      // Adding: the operand's gradient passes through. Replacing: except
      // where the updates overwrote it. Each update's gradient is the part
      // of the result it went to: a gather with the mirrored dimension
      // numbers, as large as an update's window.
      const ir::ScatterDims& d = node.attrs->scatter;
      ir::GatherDims gather;
      gather.offset_dims = d.update_window_dims;
      gather.collapsed_slice_dims = d.inserted_window_dims;
      gather.start_index_map = d.scatter_dims_to_operand_dims;
      gather.index_vector_dim = d.index_vector_dim;
      std::vector<int64_t> sizes(x[0].rank(), 1);
      size_t window = 0;
      for (int64_t dim = 0; dim < x[0].rank(); ++dim) {
        const auto& inserted = d.inserted_window_dims;
        if (std::find(inserted.begin(), inserted.end(), dim) != inserted.end()) continue;
        if (window >= d.update_window_dims.size()) {
          return absl::InvalidArgumentError("scatter: fewer update window dimensions than the operand has");
        }
        sizes[dim] = x[2].dim(static_cast<int>(d.update_window_dims[window++]));
      }
      Tensor operand_grad =
          node.reducer == Reducer::kAdd ? g : Scatter(g, x[1], ZerosLike(x[2]), d);
      return std::vector<Tensor>{operand_grad, Tensor(),
                                 Gather(g, x[1], std::move(gather), std::move(sizes))};
    }
    case Opcode::kReduceWindow: return ReduceWindowGrad(node, x[0], g);
    case Opcode::kGetTupleElement:
      return absl::UnimplementedError(absl::StrCat(
          "no gradient rule for an element of ", ir::OpcodeName(node.operands[0]->op)));
    default:
      return absl::UnimplementedError(
          absl::StrCat("no gradient rule for ", ir::OpcodeName(node.op)));
  }
}

Tensor S32Scalar(const Node& like, int64_t value) {
  ir::Literal lit(ir::Shape::Scalar(ir::ElementType::kS32));
  lit.SetFromDouble(0, static_cast<double>(value));
  return like.context->Constant(lit, like.device);
}

// [lead, dims...].
std::vector<int64_t> Prepended(int64_t lead, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out{lead};
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

// [index, 0, 0, ...]: the start of row `index` of a stack of `rank`-dim values.
std::vector<Tensor> RowStart(const Node& like, const Tensor& index, int rank) {
  std::vector<Tensor> starts{index};
  for (int d = 0; d < rank; ++d) starts.push_back(S32Scalar(like, 0));
  return starts;
}

// Row `index` of `stack` (a [rows, shape...] stack of values of `shape`).
Tensor StackRow(const Node& like, const Tensor& stack, const Tensor& index,
                const ir::Shape& shape) {
  return Reshape(DynamicSlice(stack, RowStart(like, index, shape.rank()), Prepended(1, shape.dims())),
                 shape.dims());
}

// `body` (a loop spec or a branch traced for a gradient) keeps the nodes
// just traced for it and those of the forward body it reads.
template <typename Body, typename Forward>
void KeepNodes(Body& body, LazyContext::LoopBodyNodes traced, const Forward& forward) {
  body.nodes = std::move(traced.nodes);
  body.nodes.insert(forward.nodes.begin(), forward.nodes.end());
  body.alive = std::move(traced.alive);
  body.alive.insert(body.alive.end(), forward.alive.begin(), forward.alive.end());
}

// The gradients of a conditional's operands (selector, operands, captures)
// given those of its results (`cotangents`, one per result, undefined where
// none flows): a conditional on the same selector whose branch k
// differentiates branch k's graph, reading the forward operands and the
// cotangents. Integer and pred values take no gradient.
absl::StatusOr<std::vector<Tensor>> CondGrad(const std::shared_ptr<Node>& node,
                                             const std::vector<Tensor>& cotangents) {
  const CondSpec& spec = *node->cond;
  LazyContext* ctx = node->context.get();
  std::vector<Tensor> out(node->operands.size());
  std::vector<size_t> flowing;  // results with a floating-point cotangent
  for (size_t i = 0; i < cotangents.size(); ++i) {
    if (cotangents[i].defined() && ir::IsFloatType(node->shape.tuple_shape(i).type())) {
      flowing.push_back(i);
    }
  }
  std::vector<size_t> wanted;  // operands (after the selector) that take one
  for (size_t j = 1; j < node->operands.size(); ++j) {
    if (ir::IsFloatType(node->operands[j]->shape.type())) wanted.push_back(j);
  }
  if (flowing.empty() || wanted.empty()) return out;
  std::vector<Tensor> operands;
  for (size_t i = 0; i < spec.operand_count; ++i) operands.push_back(Tensor(node->operands[1 + i]));
  for (size_t i : flowing) operands.push_back(cotangents[i]);
  std::vector<CondBranch> branches;
  for (const CondBranch& forward : spec.branches) {
    CondBranch branch;
    branch.placeholders = forward.placeholders;
    std::vector<Tensor> params;
    for (size_t j : wanted) {
      params.push_back(Tensor(j - 1 < spec.operand_count
                                  ? forward.placeholders[j - 1]
                                  : spec.captures[j - 1 - spec.operand_count]));
    }
    ctx->BeginLoopBody();
    Tensor loss;
    for (size_t i : flowing) {
      std::shared_ptr<Node> cotangent =
          StandIn(*node, node->shape.tuple_shape(i), forward.results[i]->reduced_precision);
      branch.placeholders.push_back(cotangent);
      Tensor term = Cast(Sum(Tensor(forward.results[i]) * Tensor(cotangent)), ir::ElementType::kF32);
      loss = loss.defined() ? loss + term : term;
    }
    absl::StatusOr<std::vector<Tensor>> grads = Grad(loss, params);
    KeepNodes(branch, ctx->EndLoopBody(), forward);
    RETURN_IF_ERROR(WithContext(grads.status(), "gradient of a conditional branch"));
    for (const Tensor& g : *grads) branch.results.push_back(g.node());
    branches.push_back(std::move(branch));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> grads,
                   ConditionalOfTracedBranches(Tensor(node->operands[0]), operands,
                                               std::move(branches)));
  for (size_t k = 0; k < wanted.size(); ++k) out[wanted[k]] = grads[k];
  return out;
}

// The gradients of a device loop's operands (its state, then its captures)
// given those of its tuple's elements (`cotangents`: the counter, the
// state, the captures; undefined where none flows). Two loops over the
// forward body: one runs it again and keeps the state each iteration
// enters with in stacks [trip_count, ...]; the other walks back through
// them, each iteration the reverse-mode gradient of the body at the state
// it read, adding up the captures' gradients. A loop with feeds is refused:
// running it again would read other values.
absl::StatusOr<std::vector<Tensor>> WhileGrad(const std::shared_ptr<Node>& node,
                                              const std::vector<Tensor>& cotangents) {
  const LoopSpec& loop = *node->loop;
  const size_t m = loop.placeholders.size();
  std::vector<Tensor> out(node->operands.size());
  std::vector<size_t> float_state, float_captures;
  std::vector<Tensor> seed;  // the cotangent of each floating-point state element
  bool flows = false;
  for (size_t i = 0; i < m; ++i) {
    if (!ir::IsFloatType(node->operands[i]->shape.type())) continue;
    float_state.push_back(i);
    const bool given = 1 + i < cotangents.size() && cotangents[1 + i].defined();
    flows = flows || given;
    seed.push_back(given ? cotangents[1 + i] : ZerosLike(Tensor(node->operands[i])));
  }
  for (size_t j = m; j < node->operands.size(); ++j) {
    if (ir::IsFloatType(node->operands[j]->shape.type())) float_captures.push_back(j);
  }
  if (!flows) return out;
  if (loop.effects != nullptr) {
    return absl::UnimplementedError(
        "gradients through a device loop that reads or writes feeds (it would run twice)");
  }
  const int64_t n = loop.trip_count;
  if (n == 0) {
    for (size_t k = 0; k < float_state.size(); ++k) out[float_state[k]] = seed[k];
    return out;
  }
  LazyContext* ctx = node->context.get();
  const Node& like = *node;

  // The forward body again, stacking the state each iteration enters with.
  auto forward = std::make_shared<LoopSpec>();
  forward->placeholders = loop.placeholders;
  forward->results = loop.results;
  std::vector<Tensor> init;
  for (size_t i = 0; i < m; ++i) init.push_back(Tensor(node->operands[i]));
  ctx->BeginLoopBody();
  std::shared_ptr<Node> counter = StandIn(like, ir::Shape::Scalar(ir::ElementType::kS32), false);
  for (size_t i = 0; i < m; ++i) {
    const Node& s = *loop.placeholders[i];
    const ir::Shape stack_shape(s.shape.type(), Prepended(n, s.shape.dims()));
    std::shared_ptr<Node> stack = StandIn(like, stack_shape, s.reduced_precision);
    forward->placeholders.push_back(stack);
    forward->results.push_back(
        DynamicUpdateSlice(Tensor(stack),
                           Reshape(Tensor(loop.placeholders[i]), Prepended(1, s.shape.dims())),
                           RowStart(like, Tensor(counter), s.shape.rank()))
            .node());
    init.push_back(FullLike(init[i], stack_shape, 0));
  }
  forward->placeholders.push_back(counter);
  forward->results.push_back((Tensor(counter) + 1.0).node());
  init.push_back(S32Scalar(like, 0));
  KeepNodes(*forward, ctx->EndLoopBody(), loop);
  ASSIGN_OR_RETURN(std::vector<Tensor> stacked, WhileOfTracedBody(n, init, forward));
  const std::vector<Tensor> stacks(stacked.begin() + m, stacked.begin() + 2 * m);

  // Back through the iterations: state (cotangents of the floating-point
  // state, the captures' gradients so far, the state iteration k entered
  // with, k), from k = n - 1 down.
  auto backward = std::make_shared<LoopSpec>();
  init.clear();
  ctx->BeginLoopBody();
  std::vector<std::shared_ptr<Node>> cotangent_in, sums_in;
  for (size_t k = 0; k < float_state.size(); ++k) {
    const Node& s = *loop.placeholders[float_state[k]];
    cotangent_in.push_back(StandIn(like, s.shape, s.reduced_precision));
    init.push_back(seed[k]);
  }
  for (size_t j : float_captures) {
    const Node& c = *node->operands[j];
    sums_in.push_back(StandIn(like, c.shape, c.reduced_precision));
    init.push_back(ZerosLike(Tensor(node->operands[j])));
  }
  std::shared_ptr<Node> index = StandIn(like, ir::Shape::Scalar(ir::ElementType::kS32), false);
  Tensor loss;
  for (size_t k = 0; k < float_state.size(); ++k) {
    Tensor term = Cast(Sum(Tensor(loop.results[float_state[k]]) * Tensor(cotangent_in[k])),
                       ir::ElementType::kF32);
    loss = loss.defined() ? loss + term : term;
  }
  std::vector<Tensor> params;
  for (size_t i : float_state) params.push_back(Tensor(loop.placeholders[i]));
  for (size_t j : float_captures) params.push_back(Tensor(node->operands[j]));
  absl::StatusOr<std::vector<Tensor>> grads = Grad(loss, params);
  std::vector<std::shared_ptr<Node>> results;
  if (grads.ok()) {
    for (size_t k = 0; k < float_state.size(); ++k) results.push_back((*grads)[k].node());
    for (size_t j = 0; j < float_captures.size(); ++j) {
      results.push_back((Tensor(sums_in[j]) + (*grads)[float_state.size() + j]).node());
    }
    const Tensor previous = Tensor(index) - 1.0;
    for (size_t i = 0; i < m; ++i) {
      results.push_back(StackRow(like, stacks[i], previous, loop.placeholders[i]->shape).node());
    }
    results.push_back(previous.node());
  }
  KeepNodes(*backward, ctx->EndLoopBody(), loop);
  RETURN_IF_ERROR(WithContext(grads.status(), "gradient of a device loop body"));
  backward->placeholders = cotangent_in;
  backward->placeholders.insert(backward->placeholders.end(), sums_in.begin(), sums_in.end());
  backward->placeholders.insert(backward->placeholders.end(), loop.placeholders.begin(),
                                loop.placeholders.end());
  backward->placeholders.push_back(index);
  backward->results = std::move(results);
  for (size_t i = 0; i < m; ++i) {
    init.push_back(StackRow(like, stacks[i], S32Scalar(like, n - 1), loop.placeholders[i]->shape));
  }
  init.push_back(S32Scalar(like, n - 1));
  ASSIGN_OR_RETURN(std::vector<Tensor> back, WhileOfTracedBody(n, init, backward));
  for (size_t k = 0; k < float_state.size(); ++k) out[float_state[k]] = back[k];
  for (size_t j = 0; j < float_captures.size(); ++j) {
    out[float_captures[j]] = back[float_state.size() + j];
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> Grad(const Tensor& loss, const std::vector<Tensor>& params) {
  RETURN_IF_ERROR(loss.status());
  if (loss.shape().ElementCount() != 1 || !ir::IsFloatType(loss.storage_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Grad needs a floating-point scalar loss, not ", loss.shape().ToString()));
  }
  absl::flat_hash_map<const Node*, int> param_index;
  for (size_t i = 0; i < params.size(); ++i) {
    RETURN_IF_ERROR(params[i].status());
    param_index[params[i].node().get()] = static_cast<int>(i);
  }
  // Post-order over the trace; `depends` marks nodes that reach a parameter.
  std::vector<std::shared_ptr<Node>> order;
  absl::flat_hash_map<const Node*, bool> depends;
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{loss.node(), 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (depends.contains(node.get())) {
      stack.pop_back();
      continue;
    }
    const bool is_param = param_index.contains(node.get());
    // A value computed earlier is a constant here, unless eager mode kept
    // the graph that made it; so is one recorded without gradients.
    const bool walked = !is_param && !node->stops_gradients &&
                        (!node->realized() || node->keeps_graph);
    if (walked && next < node->operands.size()) {
      std::shared_ptr<Node> child = node->operands[next++];
      if (!depends.contains(child.get())) stack.push_back({std::move(child), 0});
      continue;
    }
    bool d = is_param;
    if (walked) {
      for (const auto& o : node->operands) d = d || depends[o.get()];
    }
    depends[node.get()] = d;
    order.push_back(node);
    stack.pop_back();
  }
  absl::flat_hash_map<const Node*, Tensor> adjoint;
  // A conditional's results' gradients, gathered from its tuple elements.
  absl::flat_hash_map<const Node*, std::vector<Tensor>> result_adjoints;
  adjoint[loss.node().get()] = OnesLike(loss);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const std::shared_ptr<Node>& node = *it;
    if (!depends[node.get()] || param_index.contains(node.get())) continue;
    absl::StatusOr<std::vector<Tensor>> grads;
    if (node->cond != nullptr || node->loop != nullptr) {
      auto r = result_adjoints.find(node.get());
      if (r == result_adjoints.end()) continue;
      grads = node->cond != nullptr ? CondGrad(node, r->second) : WhileGrad(node, r->second);
    } else {
      auto a = adjoint.find(node.get());
      if (a == adjoint.end()) continue;
      if (node->op == Opcode::kGetTupleElement && node->operands.size() == 1 &&
          (node->operands[0]->cond != nullptr || node->operands[0]->loop != nullptr)) {
        std::vector<Tensor>& results = result_adjoints[node->operands[0].get()];
        results.resize(node->operands[0]->shape.tuple_shapes().size());
        Tensor& slot = results[node->attrs->tuple_index];
        slot = slot.defined() ? slot + a->second : a->second;
        continue;
      }
      grads = Rule(node, a->second);
    }
    if (!grads.ok()) return grads.status();
    for (size_t i = 0; i < node->operands.size() && i < grads->size(); ++i) {
      const Node* operand = node->operands[i].get();
      const Tensor& gi = (*grads)[i];
      if (!gi.defined() || !depends[operand]) continue;
      RETURN_IF_ERROR(gi.status());
      auto existing = adjoint.find(operand);
      if (existing == adjoint.end()) {
        adjoint[operand] = gi;
      } else {
        existing->second = existing->second + gi;
      }
    }
  }
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    auto a = adjoint.find(p.node().get());
    out.push_back(a == adjoint.end() ? ZerosLike(p) : a->second);
    // The gradient of a reduced-precision parameter is one too.
    if (p.IsReducedPrecision() && out.back().storage_type() == p.storage_type()) {
      out.back().node()->reduced_precision = true;
    }
  }
  return out;
}

}  // namespace kiln::client
