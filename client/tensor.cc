#include "client/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/lazy.h"
#include "compiler/ir/shape_inference.h"

namespace kiln::client {

Tensor ErrorTensor(const Tensor& like, absl::Status status) {
  auto node = std::make_shared<Node>();
  if (like.defined()) {
    node->shape = like.shape();
    node->device = like.device();
    node->context = like.node()->context;
  }
  node->status = std::move(status);
  return Tensor(std::move(node));
}

namespace {

using ir::ElementType;
using ir::Opcode;
using ir::Shape;


// First error among operands, or a device / precision mix-up.
absl::Status CheckOperands(Opcode op, const std::vector<Tensor>& operands) {
  for (const Tensor& t : operands) {
    if (!t.defined()) return absl::InvalidArgumentError("undefined tensor operand");
    if (!t.status().ok()) return t.status();
  }
  for (size_t i = 1; i < operands.size(); ++i) {
    if (operands[i].device() != operands[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          ir::OpcodeName(op), " mixes tensors on ", operands[0].device(), " and ",
          operands[i].device(), "; copy one explicitly with ToDevice()"));
    }
  }
  bool reduced = false, full = false;
  for (const Tensor& t : operands) {
    if (!ir::IsFloatType(t.storage_type())) continue;
    (t.storage_type() == ElementType::kBF16 ? reduced : full) = true;
  }
  if (reduced && full && op != Opcode::kConvert) {
    return absl::InvalidArgumentError(absl::StrCat(
        ir::OpcodeName(op),
        " mixes reduced precision (bf16) and full precision tensors; convert one with "
        "ToReducedPrecision() or ToFullPrecision()"));
  }
  return absl::OkStatus();
}

// `attrs` null: the op has none (most do), and no attribute set is made.
Tensor EmitNode(Opcode op, Shape shape, std::vector<Tensor> operands, ir::Attributes* attrs,
                Reducer reducer) {
  const Tensor& like = operands.empty() ? Tensor() : operands[0];
  if (absl::Status st = CheckOperands(op, operands); !st.ok()) return ErrorTensor(like, st);
  auto node = std::make_shared<Node>();
  node->op = op;
  node->shape = std::move(shape);
  node->device = operands[0].device();
  if (attrs != nullptr) node->attrs.Set(std::move(*attrs));
  node->reducer = reducer;
  node->operands.reserve(operands.size());
  for (Tensor& t : operands) {
    // A bf16 result of reduced-precision operands is reduced precision.
    if (t.IsReducedPrecision() && node->shape.type() == ElementType::kBF16) {
      node->reduced_precision = true;
    }
    node->operands.push_back(t.node());
  }
  node->context = operands[0].node()->context;
  LazyContext* ctx = operands[0].context();
  return ctx->Record(std::move(node));
}

Tensor Emit(Opcode op, Shape shape, std::vector<Tensor> operands) {
  return EmitNode(op, std::move(shape), std::move(operands), nullptr, Reducer::kNone);
}
Tensor Emit(Opcode op, Shape shape, std::vector<Tensor> operands, ir::Attributes attrs,
            Reducer reducer = Reducer::kNone) {
  return EmitNode(op, std::move(shape), std::move(operands), &attrs, reducer);
}

// Shape of `op` by the IR's own rules (for the ops with involved shapes).
absl::StatusOr<Shape> InferShape(Opcode op, const std::vector<Tensor>& operands,
                                 const ir::Attributes& attrs, const Shape& declared) {
  std::vector<std::unique_ptr<ir::Instruction>> dummies;
  ir::Instruction instr(op, declared, "");
  for (const Tensor& t : operands) {
    dummies.push_back(std::make_unique<ir::Instruction>(Opcode::kParameter, t.shape(), ""));
    instr.AddOperand(dummies.back().get());
  }
  instr.mutable_attrs() = attrs;
  return ir::InferShape(instr);
}

Tensor EmitInferred(Opcode op, std::vector<Tensor> operands, ir::Attributes attrs,
                    const Shape& declared = Shape()) {
  if (absl::Status st = CheckOperands(op, operands); !st.ok()) {
    return ErrorTensor(operands.empty() ? Tensor() : operands[0], st);
  }
  absl::StatusOr<Shape> shape = InferShape(op, operands, attrs, declared);
  if (!shape.ok()) {
    return ErrorTensor(operands[0], absl::InvalidArgumentError(absl::StrCat(
                                        ir::OpcodeName(op), ": ", shape.status().message())));
  }
  return Emit(op, *shape, std::move(operands), std::move(attrs));
}

Tensor ScalarLike(const Tensor& like, double value, ElementType type) {
  LazyContext* ctx = like.context();
  ir::Literal lit(Shape::Scalar(type));
  lit.SetFromDouble(0, value);
  return ctx->Constant(lit, like.device());
}

std::vector<int64_t> BroadcastDims(const Shape& a, const Shape& b, absl::Status* st) {
  const int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(r);
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    const int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    if (da != db && da != 1 && db != 1) {
      *st = absl::InvalidArgumentError(absl::StrCat("shapes ", a.ToString(), " and ",
                                                    b.ToString(), " do not broadcast"));
      return {};
    }
    dims[i] = da == 1 ? db : da;
  }
  return dims;
}

std::vector<int64_t> NormalizeDims(std::vector<int64_t> dims, int rank) {
  if (dims.empty()) {
    dims.resize(rank);
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int64_t& d : dims) {
    if (d < 0) d += rank;
  }
  std::sort(dims.begin(), dims.end());
  return dims;
}

double InitValue(Reducer r, ElementType type) {
  switch (r) {
    case Reducer::kAdd: return 0;
    case Reducer::kMultiply: return 1;
    case Reducer::kMax:
      return ir::IsFloatType(type) ? -std::numeric_limits<double>::infinity()
                                   : ir::Literal::Scalar(type, -1e300).GetAsDouble(0);
    case Reducer::kMin:
      return ir::IsFloatType(type) ? std::numeric_limits<double>::infinity()
                                   : ir::Literal::Scalar(type, 1e300).GetAsDouble(0);
    default: return 0;
  }
}

}  // namespace

Node::~Node() {
  // Operands held by this node alone would die inside this destructor, a
  // chain of them as deep recursion: they die here one by one instead.
  if (std::none_of(operands.begin(), operands.end(),
                   [](const std::shared_ptr<Node>& o) { return o.use_count() == 1; })) {
    return;
  }
  std::vector<std::shared_ptr<Node>> stack(std::make_move_iterator(operands.begin()),
                                           std::make_move_iterator(operands.end()));
  operands.clear();
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      // Last owner: take its operands before it goes, so it dies childless.
      for (auto& o : n->operands) stack.push_back(std::move(o));
      n->operands.clear();
    }
  }
}

Tensor Tensor::ToReducedPrecision() const {
  if (!status().ok() || IsReducedPrecision() || storage_type() != ElementType::kF32) return *this;
  Tensor reduced = Cast(*this, ElementType::kBF16);
  if (reduced.status().ok()) reduced.node()->reduced_precision = true;
  return reduced;
}
Tensor Tensor::ToFullPrecision() const {
  return IsReducedPrecision() ? Cast(*this, ElementType::kF32) : *this;
}

Tensor BroadcastInDim(const Tensor& x, std::vector<int64_t> dims, std::vector<int64_t> mapping) {
  if (!x.status().ok()) return x;
  if (x.shape().dims() == dims) return x;
  ir::Attributes a;
  a.dimensions = std::move(mapping);
  return EmitInferred(Opcode::kBroadcast, {x}, std::move(a), Shape(x.storage_type(), dims));
}

Tensor BroadcastTo(const Tensor& x, std::vector<int64_t> dims) {
  if (!x.status().ok() || x.shape().dims() == dims) return x;
  const int r = static_cast<int>(dims.size());
  if (x.rank() > r) {
    return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                              "cannot broadcast ", x.shape().ToString(), " to rank ", r)));
  }
  std::vector<int64_t> kept_dims, mapping;
  for (int i = 0; i < x.rank(); ++i) {
    const int j = i + (r - x.rank());
    if (x.dim(i) == dims[j]) {
      kept_dims.push_back(x.dim(i));
      mapping.push_back(j);
    } else if (x.dim(i) != 1) {
      return ErrorTensor(x, absl::InvalidArgumentError(
                                absl::StrCat("cannot broadcast ", x.shape().ToString(), " to [",
                                             absl::StrJoin(dims, ","), "]")));
    }
  }
  Tensor squeezed = kept_dims.size() == size_t(x.rank()) ? x : Reshape(x, kept_dims);
  return BroadcastInDim(squeezed, std::move(dims), std::move(mapping));
}

namespace {

// A binary op with `attrs`, or with none when null.
Tensor BinaryOp(Opcode op, const Tensor& a, const Tensor& b, ir::Attributes* attrs) {
  // The common case first: two healthy operands of one shape on one device
  // and one precision need no broadcast and no checks beyond these.
  if (a.defined() && b.defined() && a.node()->status.ok() && b.node()->status.ok() &&
      a.shape() == b.shape() && a.device() == b.device() && a.context() != nullptr) {
    auto node = std::make_shared<Node>();
    node->op = op;
    node->shape = a.shape();  // one copy: a conditional would make a second
    if (op == Opcode::kCompare) node->shape.set_type(ElementType::kPred);
    node->device = a.device();
    if (attrs != nullptr) node->attrs.Set(std::move(*attrs));
    node->operands = {a.node(), b.node()};
    node->context = a.node()->context;
    node->reduced_precision = op != Opcode::kCompare && (a.node()->reduced_precision ||
                                                         b.node()->reduced_precision);
    return a.context()->Record(std::move(node));
  }
  if (absl::Status st = CheckOperands(op, {a, b}); !st.ok()) return ErrorTensor(a, st);
  absl::Status st;
  std::vector<int64_t> dims = BroadcastDims(a.shape(), b.shape(), &st);
  if (!st.ok()) return ErrorTensor(a, st);
  if (a.storage_type() != b.storage_type()) {
    return ErrorTensor(a, absl::InvalidArgumentError(absl::StrCat(
                              ir::OpcodeName(op), " of ", a.shape().ToString(), " and ",
                              b.shape().ToString(), ": element types differ; use Cast()")));
  }
  Tensor x = BroadcastTo(a, dims), y = BroadcastTo(b, dims);
  const ElementType out = op == Opcode::kCompare ? ElementType::kPred : a.storage_type();
  return EmitNode(op, Shape(out, dims), {x, y}, attrs, Reducer::kNone);
}

}  // namespace

Tensor BinaryWith(Opcode op, const Tensor& a, const Tensor& b, ir::Attributes attrs) {
  return BinaryOp(op, a, b, &attrs);
}

Tensor Binary(Opcode op, const Tensor& a, const Tensor& b) { return BinaryOp(op, a, b, nullptr); }

Tensor Compare(const Tensor& a, const Tensor& b, ir::ComparisonDirection direction) {
  ir::Attributes attrs;
  attrs.direction = direction;
  return BinaryWith(Opcode::kCompare, a, b, std::move(attrs));
}

Tensor operator+(const Tensor& a, const Tensor& b) { return Binary(Opcode::kAdd, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return Binary(Opcode::kSubtract, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return Binary(Opcode::kMultiply, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return Binary(Opcode::kDivide, a, b); }
Tensor operator+(const Tensor& a, double b) { return a + ScalarLike(a, b, a.storage_type()); }
Tensor operator-(const Tensor& a, double b) { return a - ScalarLike(a, b, a.storage_type()); }
Tensor operator*(const Tensor& a, double b) { return a * ScalarLike(a, b, a.storage_type()); }
Tensor operator/(const Tensor& a, double b) { return a / ScalarLike(a, b, a.storage_type()); }
Tensor operator*(double a, const Tensor& b) { return ScalarLike(b, a, b.storage_type()) * b; }
Tensor operator-(double a, const Tensor& b) { return ScalarLike(b, a, b.storage_type()) - b; }
Tensor operator-(const Tensor& a) { return Unary(Opcode::kNegate, a); }
Tensor Maximum(const Tensor& a, const Tensor& b) { return Binary(Opcode::kMaximum, a, b); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return Binary(Opcode::kMinimum, a, b); }
Tensor Pow(const Tensor& a, const Tensor& b) { return Binary(Opcode::kPower, a, b); }
Tensor Equal(const Tensor& a, const Tensor& b) { return Compare(a, b, ir::ComparisonDirection::kEq); }
Tensor Greater(const Tensor& a, const Tensor& b) { return Compare(a, b, ir::ComparisonDirection::kGt); }
Tensor Less(const Tensor& a, const Tensor& b) { return Compare(a, b, ir::ComparisonDirection::kLt); }
Tensor GreaterEqual(const Tensor& a, const Tensor& b) {
  return Compare(a, b, ir::ComparisonDirection::kGe);
}
Tensor LessEqual(const Tensor& a, const Tensor& b) {
  return Compare(a, b, ir::ComparisonDirection::kLe);
}

Tensor Select(const Tensor& pred, const Tensor& on_true, const Tensor& on_false) {
  if (absl::Status st = CheckOperands(Opcode::kSelect, {pred, on_true, on_false}); !st.ok()) {
    return ErrorTensor(on_true, st);
  }
  absl::Status st;
  std::vector<int64_t> dims = BroadcastDims(on_true.shape(), on_false.shape(), &st);
  if (st.ok()) dims = BroadcastDims(pred.shape(), Shape(on_true.storage_type(), dims), &st);
  if (!st.ok()) return ErrorTensor(on_true, st);
  if (pred.storage_type() != ElementType::kPred || on_true.storage_type() != on_false.storage_type()) {
    return ErrorTensor(on_true, absl::InvalidArgumentError(
                                    "Select needs a pred tensor and two branches of one type"));
  }
  return Emit(Opcode::kSelect, Shape(on_true.storage_type(), dims),
              {BroadcastTo(pred, dims), BroadcastTo(on_true, dims), BroadcastTo(on_false, dims)});
}

Tensor Clamp(const Tensor& x, double lo, double hi) {
  if (!x.status().ok()) return x;
  return Emit(Opcode::kClamp, x.shape(),
              {ScalarLike(x, lo, x.storage_type()), x, ScalarLike(x, hi, x.storage_type())});
}

namespace {

// Whether the IR's shape rules let unary elementwise `op` take `type`,
// asked once per (op, type): the answer depends on nothing else, and
// asking builds instructions, which costs more than recording the op.
bool UnaryTakes(Opcode op, ElementType type) {
  constexpr int kOps = 256, kTypes = 256;
  // 0: not asked yet, 1: takes it, 2: does not.
  static std::atomic<uint8_t> known[kOps * kTypes];
  std::atomic<uint8_t>& slot = known[static_cast<int>(op) * kTypes + static_cast<int>(type)];
  uint8_t answer = slot.load(std::memory_order_relaxed);
  if (answer == 0) {
    ir::Instruction operand(Opcode::kParameter, Shape(type, {}), "");
    ir::Instruction instr(op, Shape(type, {}), "");
    instr.AddOperand(&operand);
    answer = ir::InferShape(instr).ok() ? 1 : 2;
    slot.store(answer, std::memory_order_relaxed);
  }
  return answer == 1;
}

}  // namespace

Tensor Unary(Opcode op, const Tensor& x) {
  if (!x.status().ok()) return x;
  if (!UnaryTakes(op, x.storage_type())) {
    // The IR's own message, for the tensor at hand.
    absl::StatusOr<Shape> s = InferShape(op, {x}, {}, x.shape());
    return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                              ir::OpcodeName(op), ": ",
                              s.ok() ? "does not take this element type" : s.status().message())));
  }
  return Emit(op, x.shape(), {x});
}
Tensor Exp(const Tensor& x) { return Unary(Opcode::kExp, x); }
Tensor Log(const Tensor& x) { return Unary(Opcode::kLog, x); }
Tensor Sqrt(const Tensor& x) { return Unary(Opcode::kSqrt, x); }
Tensor Rsqrt(const Tensor& x) { return Unary(Opcode::kRsqrt, x); }
Tensor Abs(const Tensor& x) { return Unary(Opcode::kAbs, x); }
Tensor Sign(const Tensor& x) { return Unary(Opcode::kSign, x); }
Tensor Tanh(const Tensor& x) { return Unary(Opcode::kTanh, x); }
Tensor Erf(const Tensor& x) { return Unary(Opcode::kErf, x); }
Tensor Sigmoid(const Tensor& x) { return Unary(Opcode::kLogistic, x); }
Tensor Sin(const Tensor& x) { return Unary(Opcode::kSin, x); }
Tensor Cos(const Tensor& x) { return Unary(Opcode::kCos, x); }
Tensor Relu(const Tensor& x) {
  Tensor y = Maximum(x, ZerosLike(x));
  if (y.status().ok()) y.node()->relu = true;
  return y;
}
Tensor IsFinite(const Tensor& x) { return EmitInferred(Opcode::kIsFinite, {x}, {}); }

Tensor Cast(const Tensor& x, ElementType type) {
  if (!x.status().ok()) return x;
  if (x.IsReducedPrecision() && type == ElementType::kBF16) {
    // A reduced-precision tensor cast to bf16: the same values as a bf16
    // tensor.
    Tensor genuine = Emit(Opcode::kCopy, x.shape(), {x});
    if (genuine.status().ok()) genuine.node()->reduced_precision = false;
    return genuine;
  }
  if (x.storage_type() == type) return x;
  return Emit(Opcode::kConvert, Shape(type, x.shape().dims()), {x});
}

Tensor Reshape(const Tensor& x, std::vector<int64_t> dims) {
  if (!x.status().ok() || x.shape().dims() == dims) return x;
  return EmitInferred(Opcode::kReshape, {x}, {}, Shape(x.storage_type(), std::move(dims)));
}

Tensor Transpose(const Tensor& x, std::vector<int64_t> permutation) {
  ir::Attributes a;
  a.dimensions = std::move(permutation);
  return EmitInferred(Opcode::kTranspose, {x}, std::move(a));
}

Tensor Slice(const Tensor& x, std::vector<int64_t> start, std::vector<int64_t> limit,
             std::vector<int64_t> stride) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  if (start.size() != size_t(x.rank()) || limit.size() != size_t(x.rank()) ||
      (!stride.empty() && stride.size() != size_t(x.rank()))) {
    return ErrorTensor(x, absl::InvalidArgumentError("Slice needs one bound per dimension"));
  }
  for (int i = 0; i < x.rank(); ++i) {
    a.slice.push_back({start[i], limit[i], stride.empty() ? 1 : stride[i]});
  }
  return EmitInferred(Opcode::kSlice, {x}, std::move(a));
}

Tensor Concat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) return Tensor();
  ir::Attributes a;
  a.dimensions = {dim < 0 ? dim + xs[0].rank() : dim};
  return EmitInferred(Opcode::kConcatenate, xs, std::move(a));
}

Tensor Reverse(const Tensor& x, std::vector<int64_t> dims) {
  ir::Attributes a;
  a.dimensions = std::move(dims);
  return EmitInferred(Opcode::kReverse, {x}, std::move(a));
}

Tensor Pad(const Tensor& x, double value, std::vector<ir::PadDim> padding) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  a.padding = std::move(padding);
  return EmitInferred(Opcode::kPad, {x, ScalarLike(x, value, x.storage_type())}, std::move(a));
}

Tensor Reduce(const Tensor& x, Reducer reducer, std::vector<int64_t> dims, bool keep_dims) {
  if (!x.status().ok()) return x;
  dims = NormalizeDims(std::move(dims), x.rank());
  std::vector<int64_t> out_dims, kept_shape;
  for (int i = 0; i < x.rank(); ++i) {
    const bool reduced = std::binary_search(dims.begin(), dims.end(), i);
    if (!reduced) out_dims.push_back(x.dim(i));
    kept_shape.push_back(reduced ? 1 : x.dim(i));
  }
  for (int64_t d : dims) {
    if (d < 0 || d >= x.rank()) {
      return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                                "reduce dimension ", d, " out of range for ", x.shape().ToString())));
    }
  }
  ir::Attributes a;
  a.dimensions = dims;
  Tensor init = ScalarLike(x, InitValue(reducer, x.storage_type()), x.storage_type());
  Tensor r = Emit(Opcode::kReduce, Shape(x.storage_type(), out_dims), {x, init}, std::move(a), reducer);
  return keep_dims ? Reshape(r, kept_shape) : r;
}

Tensor Sum(const Tensor& x, std::vector<int64_t> dims, bool keep_dims) {
  return Reduce(x, Reducer::kAdd, std::move(dims), keep_dims);
}
Tensor ReduceMax(const Tensor& x, std::vector<int64_t> dims, bool keep_dims) {
  return Reduce(x, Reducer::kMax, std::move(dims), keep_dims);
}
Tensor Mean(const Tensor& x, std::vector<int64_t> dims, bool keep_dims) {
  if (!x.status().ok()) return x;
  std::vector<int64_t> norm = NormalizeDims(dims, x.rank());
  int64_t count = 1;
  for (int64_t d : norm) count *= (d >= 0 && d < x.rank()) ? x.dim(d) : 1;
  return Sum(x, std::move(dims), keep_dims) / static_cast<double>(count);
}

Tensor Argmax(const Tensor& x, int64_t dim) {
  if (!x.status().ok()) return x;
  if (dim < 0) dim += x.rank();
  Tensor m = ReduceMax(x, {dim}, true);
  Tensor is_max = Equal(x, m);
  Tensor index = Iota(x, Shape(ElementType::kS32, x.shape().dims()), dim);
  Tensor big = ScalarLike(x, std::numeric_limits<int32_t>::max(), ElementType::kS32);
  Tensor candidates = Select(is_max, index, BroadcastTo(big, x.shape().dims()));
  return Reduce(candidates, Reducer::kMin, {dim}, false);
}

Tensor Dot(const Tensor& a, const Tensor& b, ir::DotDims dims) {
  ir::Attributes attrs;
  attrs.dot = std::move(dims);
  return EmitInferred(Opcode::kDot, {a, b}, std::move(attrs), Shape(a.storage_type(), {}));
}

Tensor Matmul(const Tensor& a, const Tensor& b) {
  if (!a.status().ok()) return a;
  if (!b.status().ok()) return b;
  if (a.rank() == 3 && b.rank() == 3) return Dot(a, b, ir::DotDims{{0}, {0}, {2}, {1}});
  return Dot(a, b, ir::DotDims{{}, {}, {a.rank() - 1}, {0}});
}

Tensor Convolution(const Tensor& x, const Tensor& w, std::vector<ir::WindowDim> window,
                   ir::ConvDims dims, int64_t feature_groups, int64_t batch_groups) {
  ir::Attributes a;
  a.window = std::move(window);
  a.conv = std::move(dims);
  a.feature_group_count = feature_groups;
  a.batch_group_count = batch_groups;
  return EmitInferred(Opcode::kConvolution, {x, w}, std::move(a), Shape(x.storage_type(), {}));
}

ir::ConvDims Nhwc() {
  ir::ConvDims d;
  d.input_batch = 0;
  d.input_feature = 3;
  d.input_spatial = {1, 2};
  d.kernel_spatial = {0, 1};
  d.kernel_input_feature = 2;
  d.kernel_output_feature = 3;
  d.output_batch = 0;
  d.output_feature = 3;
  d.output_spatial = {1, 2};
  return d;
}

Tensor Conv2D(const Tensor& x, const Tensor& w, int stride, const std::string& padding) {
  if (!x.status().ok()) return x;
  if (!w.status().ok()) return w;
  if (x.rank() != 4 || w.rank() != 4) {
    return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                              "Conv2D takes [N,H,W,C] and [KH,KW,C,O], got ", x.shape().ToString(),
                              " and ", w.shape().ToString())));
  }
  std::vector<ir::WindowDim> window(2);
  for (int i = 0; i < 2; ++i) {
    window[i].size = w.dim(i);
    window[i].stride = stride;
    if (padding == "SAME") {
      const int64_t in = x.dim(1 + i);
      const int64_t out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((out - 1) * stride + w.dim(i) - in, 0);
      window[i].pad_lo = total / 2;
      window[i].pad_hi = total - total / 2;
    } else if (padding != "VALID") {
      return ErrorTensor(x, absl::InvalidArgumentError(
                                absl::StrCat("padding must be SAME or VALID, not ", padding)));
    }
  }
  return Convolution(x, w, std::move(window), Nhwc());
}

Tensor ReduceWindow(const Tensor& x, Reducer reducer, std::vector<ir::WindowDim> window) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  a.window = std::move(window);
  Tensor init = ScalarLike(x, InitValue(reducer, x.storage_type()), x.storage_type());
  std::vector<Tensor> operands = {x, init};
  if (absl::Status st = CheckOperands(Opcode::kReduceWindow, operands); !st.ok()) {
    return ErrorTensor(x, st);
  }
  // Shape: the IR rule needs a reducer; compute the windowed size directly.
  std::vector<int64_t> dims;
  for (int i = 0; i < x.rank(); ++i) {
    const ir::WindowDim& w = a.window.size() == size_t(x.rank()) ? a.window[i] : ir::WindowDim();
    const int64_t padded = (x.dim(i) - 1) * w.base_dilation + 1 + w.pad_lo + w.pad_hi;
    const int64_t span = (w.size - 1) * w.window_dilation + 1;
    dims.push_back(padded < span ? 0 : (padded - span) / w.stride + 1);
  }
  if (a.window.size() != size_t(x.rank())) {
    return ErrorTensor(x, absl::InvalidArgumentError("window rank does not match the tensor"));
  }
  return Emit(Opcode::kReduceWindow, Shape(x.storage_type(), dims), std::move(operands), std::move(a),
              reducer);
}

std::vector<ir::WindowDim> Pool2DWindow(int window, int stride) {
  std::vector<ir::WindowDim> w(4);
  for (int i : {1, 2}) {
    w[i].size = window;
    w[i].stride = stride;
  }
  return w;
}

// The window of a 2-D pool over NHWC, padded as TensorFlow's SAME does
// (the output has ceil(in / stride) positions, the extra padding after) or
// not at all (VALID); an error naming the padding otherwise.
absl::StatusOr<std::vector<ir::WindowDim>> Pool2DWindow(const Tensor& x, int window, int stride,
                                                        const std::string& padding) {
  std::vector<ir::WindowDim> w = Pool2DWindow(window, stride);
  if (padding == "VALID") return w;
  if (padding != "SAME") {
    return absl::InvalidArgumentError(
        absl::StrCat("pooling padding must be SAME or VALID, not '", padding, "'"));
  }
  if (x.rank() != 4 || stride < 1) {
    return absl::InvalidArgumentError("SAME pooling needs an NHWC tensor and a positive stride");
  }
  for (int i : {1, 2}) {
    const int64_t in = x.dim(i);
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((out - 1) * stride + window - in, 0);
    w[i].pad_lo = total / 2;
    w[i].pad_hi = total - total / 2;
  }
  return w;
}

Tensor MaxPool2D(const Tensor& x, int window, int stride, const std::string& padding) {
  if (!x.status().ok()) return x;
  absl::StatusOr<std::vector<ir::WindowDim>> w = Pool2DWindow(x, window, stride, padding);
  if (!w.ok()) return ErrorTensor(x, w.status());
  // Padding takes the reducer's initial value (-inf), so it is never the
  // maximum.
  return ReduceWindow(x, Reducer::kMax, *std::move(w));
}

Tensor AvgPool2D(const Tensor& x, int window, int stride, const std::string& padding) {
  if (!x.status().ok()) return x;
  absl::StatusOr<std::vector<ir::WindowDim>> w = Pool2DWindow(x, window, stride, padding);
  if (!w.ok()) return ErrorTensor(x, w.status());
  Tensor sums = ReduceWindow(x, Reducer::kAdd, *w);
  if (padding == "VALID") return sums / static_cast<double>(window * window);
  // The mean over the elements a window covers, padding not counted.
  return sums / ReduceWindow(OnesLike(x), Reducer::kAdd, *std::move(w));
}

Tensor SelectAndScatterMax(const Tensor& operand, const Tensor& source,
                           std::vector<ir::WindowDim> window) {
  if (!operand.status().ok()) return operand;
  ir::Attributes a;
  a.window = std::move(window);
  Tensor zero = ScalarLike(operand, 0, operand.storage_type());
  return Emit(Opcode::kSelectAndScatter, operand.shape(), {operand, source, zero}, std::move(a));
}

Tensor DynamicSlice(const Tensor& x, const std::vector<Tensor>& starts,
                    std::vector<int64_t> sizes) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  a.slice_sizes = sizes;
  std::vector<Tensor> operands = {x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return EmitInferred(Opcode::kDynamicSlice, std::move(operands), std::move(a),
                      Shape(x.storage_type(), std::move(sizes)));
}

Tensor DynamicUpdateSlice(const Tensor& x, const Tensor& update,
                          const std::vector<Tensor>& starts) {
  if (!x.status().ok()) return x;
  std::vector<Tensor> operands = {x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return EmitInferred(Opcode::kDynamicUpdateSlice, std::move(operands), {}, x.shape());
}

Tensor Gather(const Tensor& x, const Tensor& indices, ir::GatherDims dims,
              std::vector<int64_t> slice_sizes) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  a.gather = std::move(dims);
  a.slice_sizes = std::move(slice_sizes);
  return EmitInferred(Opcode::kGather, {x, indices}, std::move(a), Shape(x.storage_type(), {}));
}

Tensor Take(const Tensor& table, const Tensor& indices) {
  if (!table.status().ok()) return table;
  if (!indices.status().ok()) return indices;
  if (table.rank() < 1 || !ir::IsIntegralType(indices.storage_type())) {
    return ErrorTensor(table, absl::InvalidArgumentError(absl::StrCat(
                                  "Take needs a table of rank 1 or more and integer indices, not ",
                                  table.shape().ToString(), " and ",
                                  indices.shape().ToString())));
  }
  ir::GatherDims dims;
  const int64_t m = indices.rank();
  for (int64_t d = 1; d < table.rank(); ++d) dims.offset_dims.push_back(m + d - 1);
  dims.collapsed_slice_dims = {0};
  dims.start_index_map = {0};
  dims.index_vector_dim = m;  // each index is one number
  std::vector<int64_t> sizes = table.shape().dims();
  sizes[0] = 1;
  return Gather(table, indices, std::move(dims), std::move(sizes));
}

Tensor ScatterAdd(const Tensor& x, const Tensor& indices, const Tensor& updates,
                  ir::ScatterDims dims) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  a.scatter = std::move(dims);
  // The shape is the operand's; the IR checks the rest when it verifies.
  return Emit(Opcode::kScatter, x.shape(), {x, indices, updates}, std::move(a), Reducer::kAdd);
}

Tensor Scatter(const Tensor& x, const Tensor& indices, const Tensor& updates,
               ir::ScatterDims dims) {
  if (!x.status().ok()) return x;
  ir::Attributes a;
  a.scatter = std::move(dims);
  return Emit(Opcode::kScatter, x.shape(), {x, indices, updates}, std::move(a),
              Reducer::kReplace);
}

Tensor Softmax(const Tensor& x, int64_t dim) {
  if (dim < 0) dim += x.rank();
  Tensor shifted = x - ReduceMax(x, {dim}, true);
  Tensor e = Exp(shifted);
  return e / Sum(e, {dim}, true);
}

Tensor LogSoftmax(const Tensor& x, int64_t dim) {
  if (dim < 0) dim += x.rank();
  Tensor shifted = x - ReduceMax(x, {dim}, true);
  return shifted - Log(Sum(Exp(shifted), {dim}, true));
}

Tensor MeanSquaredError(const Tensor& predictions, const Tensor& targets) {
  const Tensor diff = predictions - targets;
  return Mean(diff * diff);
}

Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& one_hot_labels) {
  if (!logits.status().ok()) return logits;
  const double batch = static_cast<double>(logits.dim(0));
  return -Sum(one_hot_labels * LogSoftmax(logits, -1)) / batch;
}

Tensor CorrectCount(const Tensor& logits, const Tensor& labels) {
  return Sum(Cast(Equal(Argmax(logits, 1), labels), ElementType::kF32));
}

Tensor OneHot(const Tensor& labels, int64_t classes, ElementType type) {
  if (!labels.status().ok()) return labels;
  std::vector<int64_t> dims = labels.shape().dims();
  dims.push_back(classes);
  Tensor index = Iota(labels, Shape(labels.storage_type(), dims), labels.rank());
  std::vector<int64_t> mapping(labels.rank());
  std::iota(mapping.begin(), mapping.end(), 0);
  Tensor expanded = BroadcastInDim(labels, dims, mapping);
  return Cast(Equal(expanded, index), type);
}

Tensor Argsort(const Tensor& x, int64_t dim, bool descending) {
  if (!x.status().ok()) return x;
  if (dim < 0) dim += x.rank();
  if (x.rank() == 0 || dim < 0 || dim >= x.rank() || x.storage_type() == ElementType::kPred) {
    return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                              "Argsort needs a numeric tensor of rank 1 or more and one of its "
                              "dimensions, not ", x.shape().ToString(), " and ", dim)));
  }
  Tensor iota = Iota(x, Shape(ElementType::kS32, x.shape().dims()), dim);
  ir::Attributes a;
  a.dimensions = {dim};
  a.is_stable = true;
  a.direction = descending ? ir::ComparisonDirection::kGt : ir::ComparisonDirection::kLt;
  Tensor sorted = Emit(Opcode::kSort, Shape::Tuple({x.shape(), iota.shape()}), {x, iota},
                       std::move(a));
  ir::Attributes element;
  element.tuple_index = 1;
  return Emit(Opcode::kGetTupleElement, iota.shape(), {sorted}, std::move(element));
}

Tensor TakeAlong(const Tensor& x, const Tensor& indices, int64_t dim) {
  if (!x.status().ok()) return x;
  if (!indices.status().ok()) return indices;
  if (dim < 0) dim += x.rank();
  bool fits = indices.storage_type() == ElementType::kS32 && indices.rank() == x.rank() && dim >= 0 &&
              dim < x.rank();
  for (int d = 0; fits && d < x.rank(); ++d) fits = d == dim || indices.dim(d) == x.dim(d);
  if (!fits) {
    return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                              "TakeAlong needs s32 indices of ", x.shape().ToString(),
                              "'s rank and other dimensions, not ", indices.shape().ToString())));
  }
  // Every element's full coordinates: its own, with `indices` along dim.
  const int64_t r = x.rank();
  std::vector<int64_t> point_dims = indices.shape().dims();
  point_dims.push_back(1);
  std::vector<Tensor> coords;
  for (int64_t d = 0; d < r; ++d) {
    Tensor c = d == dim ? indices : Iota(indices, indices.shape(), d);
    coords.push_back(Reshape(c, point_dims));
  }
  ir::GatherDims g;
  for (int64_t d = 0; d < r; ++d) {
    g.collapsed_slice_dims.push_back(d);
    g.start_index_map.push_back(d);
  }
  g.index_vector_dim = r;
  return Gather(x, Concat(coords, r), std::move(g), std::vector<int64_t>(r, 1));
}

Tensor Sort(const Tensor& x, int64_t dim, bool descending) {
  return TakeAlong(x, Argsort(x, dim, descending), dim);
}

TopKResult TopK(const Tensor& x, int64_t k) {
  if (!x.status().ok()) return {x, x};
  if (x.rank() == 0 || k < 0 || k > x.dim(x.rank() - 1)) {
    Tensor e = ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                                  "TopK of ", k, " along the last dimension of ",
                                  x.shape().ToString())));
    return {e, e};
  }
  Tensor order = Argsort(x, -1, /*descending=*/true);
  std::vector<int64_t> start(x.rank(), 0), limit = x.shape().dims();
  limit.back() = k;
  Tensor indices = Slice(order, start, limit);
  return {TakeAlong(x, indices, -1), indices};
}

Tensor CrossReplicaSum(const Tensor& x) {
  if (!x.status().ok()) return x;
  return Emit(Opcode::kAllReduce, x.shape(), {x}, {}, Reducer::kAdd);
}

Tensor FullLike(const Tensor& like, const Shape& shape, double value) {
  if (!like.status().ok()) return like;
  Tensor s = ScalarLike(like, value, shape.type());
  Tensor full = shape.rank() == 0 ? s : BroadcastInDim(s, shape.dims(), {});
  // Values of a reduced-precision tensor's storage type are reduced
  // precision too.
  if (like.IsReducedPrecision() && shape.type() == like.storage_type() && full.status().ok()) {
    full.node()->reduced_precision = true;
  }
  return full;
}
Tensor RngUniform(const Tensor& like, std::vector<int64_t> dims, double low, double high) {
  if (!like.status().ok()) return like;
  if (!ir::IsFloatType(like.storage_type())) {
    return ErrorTensor(like, absl::InvalidArgumentError(
                                 "RngUniform needs a floating-point tensor to take its type from"));
  }
  ir::Attributes a;
  a.distribution = ir::RngDistribution::kUniform;
  return EmitInferred(Opcode::kRng,
                      {ScalarLike(like, low, like.storage_type()), ScalarLike(like, high, like.storage_type())},
                      std::move(a), Shape(like.storage_type(), std::move(dims)));
}
Tensor Iota(const Tensor& like, const Shape& shape, int64_t dimension) {
  if (!like.status().ok()) return like;
  if (!ir::IsIntegralType(shape.type()) || shape.type() == ElementType::kPred ||
      dimension < 0 || dimension >= shape.rank()) {
    return ErrorTensor(like, absl::InvalidArgumentError(absl::StrCat(
                                 "Iota needs an integer shape and one of its dimensions, not ",
                                 shape.ToString(), " and dimension ", dimension)));
  }
  auto iota = std::make_shared<Node>();
  iota->op = Opcode::kIota;
  iota->shape = shape;
  iota->device = like.device();
  iota->attrs.Mutable().iota_dimension = dimension;
  iota->context = like.node()->context;
  return like.context()->Record(std::move(iota));
}

Tensor CounterUniform(const Tensor& counter, uint64_t seed, std::vector<int64_t> dims,
                      ElementType type) {
  if (!counter.status().ok()) return counter;
  if (counter.storage_type() != ElementType::kU32 || counter.rank() != 0 || !ir::IsFloatType(type)) {
    return ErrorTensor(counter, absl::InvalidArgumentError(absl::StrCat(
                                    "CounterUniform needs a u32[] counter and a float type, not ",
                                    counter.shape().ToString(), " and ",
                                    ir::ElementTypeName(type))));
  }
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  auto u32 = [&](uint64_t v) { return ScalarLike(counter, static_cast<double>(v), ElementType::kU32); };
  auto mix = [&](const Tensor& h, int shift, uint64_t factor) {
    Tensor x = Binary(Opcode::kXor, h, Binary(Opcode::kShiftRightLogical, h, BroadcastTo(u32(shift), h.shape().dims())));
    return factor == 0 ? x : x * BroadcastTo(u32(factor), h.shape().dims());
  };
  const uint32_t key = static_cast<uint32_t>(seed ^ (seed >> 32));
  // murmur3's finalizer, which spreads every input bit over the word:
  // first over (seed, counter), then over the element's index combined
  // with that by exclusive or, so that two counters give two unrelated
  // sequences rather than one sequence shifted.
  auto fmix = [&](Tensor h) {
    h = mix(h, 16, 0x85EBCA6Bu);
    h = mix(h, 13, 0xC2B2AE35u);
    return mix(h, 16, 0);
  };
  Tensor stream = fmix(counter * u32(0x85EBCA77u) + u32(key));
  Tensor index = Iota(counter, Shape(ElementType::kU32, {count}), 0);
  Tensor h = fmix(Binary(Opcode::kXor, index * BroadcastTo(u32(0x9E3779B1u), {count}),
                         BroadcastTo(stream, {count})));
  // The top 24 bits, exact in f32: k / 2^24 for k in [0, 2^24).
  Tensor top = Binary(Opcode::kShiftRightLogical, h, BroadcastTo(u32(8), {count}));
  Tensor u = Cast(top, ElementType::kF32) * (1.0 / 16777216.0);
  if (type != ElementType::kF32) u = Cast(u, type);
  return Reshape(u, std::move(dims));
}

Tensor ZerosLike(const Tensor& x) { return FullLike(x, x.shape(), 0); }
Tensor OnesLike(const Tensor& x) { return FullLike(x, x.shape(), 1); }

namespace {

// Elements of a larger tensor than this print with their middles elided.
constexpr int64_t kElideAbove = 1000;
// Elements kept at each end of an elided dimension.
constexpr int64_t kEdgeItems = 3;

// Appends dimension `dim` of `value`, starting at element `offset`.
void FormatDim(const ir::Literal& value, int dim, int64_t offset, bool elide,
               std::string* out) {
  const ir::Shape& shape = value.shape();
  const int rank = shape.rank();
  int64_t stride = 1;
  for (int d = dim + 1; d < rank; ++d) stride *= shape.dim(d);
  const int64_t n = shape.dim(dim);
  // Rows of a matrix start on a new line under the first; a blank line
  // separates blocks of higher dimensions.
  const std::string sep = dim == rank - 1
                              ? ", "
                              : absl::StrCat(",", std::string(rank - dim - 1, '\n'),
                                             std::string(dim + 1, ' '));
  out->push_back('[');
  for (int64_t i = 0; i < n; ++i) {
    if (elide && n > 2 * kEdgeItems && i == kEdgeItems) {
      absl::StrAppend(out, "...", sep);
      i = n - kEdgeItems;
    }
    if (dim == rank - 1) {
      out->append(ir::FormatElement(value, offset + i));
    } else {
      FormatDim(value, dim + 1, offset + i * stride, elide, out);
    }
    if (i + 1 < n) out->append(sep);
  }
  out->push_back(']');
}

}  // namespace

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  std::string out =
      IsReducedPrecision()
          ? absl::StrCat("Tensor(", ir::Shape(dtype(), shape().dims()).ToString(),
                         " stored as bf16 on ", device())
          : absl::StrCat("Tensor(", shape().ToString(), " on ", device());
  if (replica_count() > 1) absl::StrAppend(&out, ", replica 0 of ", replica_count());
  // The stored values (a reduced-precision value prints as its bf16).
  absl::StatusOr<ir::Literal> value = ReadStorage(std::source_location::current());
  if (!value.ok()) return absl::StrCat(out, ": ", value.status().ToString(), ")");
  out.append(rank() > 1 ? "\n" : " ");
  if (rank() == 0) {
    out.append(ir::FormatElement(*value, 0));
  } else {
    FormatDim(*value, 0, 0, value->element_count() > kElideAbove, &out);
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.ToString(); }

}  // namespace kiln::client
