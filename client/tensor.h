// Lazy tensors: every op records a node; nothing runs until a barrier (or a
// read of a value) cuts the trace into a module, which is compiled once per
// distinct graph and executed on the device that holds the tensors.
//
// Errors found while tracing (tensors on two devices, mixed precision, bad
// shapes) are carried by the resulting tensor: `status()` reports them, and
// every later op, barrier or read of a tensor built from it returns them.
#ifndef KILN_CLIENT_TENSOR_H_
#define KILN_CLIENT_TENSOR_H_

#include <atomic>
#include <memory>
#include <optional>
#include <ostream>
#include <source_location>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "compiler/ir/instruction.h"
#include "compiler/ir/literal.h"

namespace kiln::client {

class LazyContext;

// The scalar combiner of reduce, reduce-window, scatter and all-reduce
// nodes; kReplace (a scatter's) keeps the new value.
enum class Reducer : uint8_t { kNone, kAdd, kMax, kMin, kMultiply, kReplace };

struct Node;

// A device loop as traced (client/loop.h builds it): the body's graph, from
// placeholders standing for the carried state to the next state.
struct LoopSpec {
  int64_t trip_count = 0;
  // Body-side stand-ins for the carried state (unrealized parameter nodes).
  std::vector<std::shared_ptr<Node>> placeholders;
  // The next state, one per placeholder.
  std::vector<std::shared_ptr<Node>> results;
  // Values from outside the body that it reads; carried unchanged.
  std::vector<std::shared_ptr<Node>> captures;
  // The last token of the body's infeeds and outfeeds (null if none).
  std::shared_ptr<Node> effects;
  // The loop's results as the tracing program holds them (tuple elements
  // of the while node): realizing one realizes those still alive with it,
  // so that reading the state tensor by tensor runs the loop once.
  std::vector<std::weak_ptr<Node>> outputs;
  // The nodes traced in the body, kept alive with it (a gradient traces
  // new loops over the same body).
  absl::flat_hash_set<const Node*> nodes;
  std::vector<std::shared_ptr<Node>> alive;
};

// A conditional as traced (client/loop.h builds it, Switch and Cond): per
// branch, the graph from stand-ins for the operands to its results. The
// conditional node's operands are the selector, the operands, then the
// captures; every branch reads one tuple of (operands..., captures...).
struct CondBranch {
  // Stand-ins for the operands (unrealized parameter nodes).
  std::vector<std::shared_ptr<Node>> placeholders;
  std::vector<std::shared_ptr<Node>> results;
  // The nodes traced in the branch, kept alive with it.
  absl::flat_hash_set<const Node*> nodes;
  std::vector<std::shared_ptr<Node>> alive;
};
struct CondSpec {
  std::vector<CondBranch> branches;
  // Values from outside the branches that some branch reads.
  std::vector<std::shared_ptr<Node>> captures;
  size_t operand_count = 0;
  // The results as the tracing program holds them (realized together, as
  // a loop's are).
  std::vector<std::weak_ptr<Node>> outputs;
};

// A node's attributes, held only by the ops that have some (an elementwise
// op has none): a node stays small (an IR attribute set is most of a
// kilobyte), and cheap to allocate.
class NodeAttributes {
 public:
  const ir::Attributes& operator*() const { return value_ != nullptr ? *value_ : Empty(); }
  // Whether these are the default attributes (what an elementwise op has).
  bool empty() const { return value_ == nullptr; }
  const ir::Attributes* operator->() const { return &**this; }
  ir::Attributes& Mutable() {
    if (value_ == nullptr) value_ = std::make_unique<ir::Attributes>();
    return *value_;
  }
  void Set(ir::Attributes attrs) {
    if (attrs == Empty()) {
      value_.reset();
    } else {
      value_ = std::make_unique<ir::Attributes>(std::move(attrs));
    }
  }

 private:
  static const ir::Attributes& Empty() {
    static const ir::Attributes* empty = new ir::Attributes();
    return *empty;
  }
  std::unique_ptr<ir::Attributes> value_;
};

// One recorded op (or a realized value). Not thread-safe: a trace belongs to
// one thread at a time.
struct Node {
  ir::Opcode op = ir::Opcode::kParameter;
  ir::Shape shape;
  // Two inline: most ops read one or two values, and a node is made per op.
  absl::InlinedVector<std::shared_ptr<Node>, 2> operands;
  NodeAttributes attrs;
  Reducer reducer = Reducer::kNone;
  std::string device;
  // Set once the value exists on the device; the node then drops its operands.
  std::shared_ptr<DeviceBuffer> data;
  // A replicated value: one buffer per replica device, replica 0 is `data`
  // (on `device`). Programs reading it run once per replica.
  std::vector<std::shared_ptr<DeviceBuffer>> replicas;
  // The value on the host, when it came back inline with an execution; or,
  // without `data`, a value not yet on the device (LazyContext::FromLiteral):
  // the next execution that reads it sends it along.
  std::optional<ir::Literal> host_value;
  // An error found while tracing this node.
  absl::Status status;
  std::shared_ptr<LazyContext> context;
  // Set on a while node: the loop it runs.
  std::shared_ptr<const LoopSpec> loop;
  // Set on a conditional node: its branches.
  std::shared_ptr<const CondSpec> cond;
  // An f32 value stored in bf16 (Tensor::ToReducedPrecision): `shape`
  // is the storage's, the tensor's element type is f32.
  bool reduced_precision = false;
  // How many Tensor handles refer to this node. A barrier realizes the
  // nodes a program can still read through a handle; a node that only other
  // nodes refer to (an intermediate of a step) is computed inside the
  // program and never becomes an output.
  std::atomic<int32_t> handles{0};

  Node() = default;
  // Releases long operand chains iteratively (a recursive release of a
  // trace of many thousands of ops would overflow the stack).
  ~Node();

  // Set when an execution that computes this node was sent: the node is a
  // leaf of later traces from then on, in flight until the execution's
  // result settles it (data, or the error in status; an error worth
  // retrying clears it again).
  bool dispatched = false;
  // `data` is the buffer the server named for this output before its
  // execution ended (protocol 6): usable as an argument, its value and
  // any error not known until the execution settles.
  bool named_in_advance = false;
  // Computed in eager mode, it keeps `operands` until the next barrier on
  // its device, so that gradients reach back through it (Grad walks the
  // operands of such a value; those of other realized values are gone or
  // belong to an execution still in flight).
  bool keeps_graph = false;
  // Recorded while gradients were not (LazyContext::set_record_gradients):
  // Grad takes it for a constant, computed or not.
  bool stops_gradients = false;
  // A maximum that Relu recorded: its gradient passes where the result is
  // positive, and is zero at zero, as PyTorch's and JAX's relu. Reading
  // the result, not the operand, lets the operand be fused away
  // (compiler/passes/convolution_fusion.h).
  bool relu = false;

  bool realized() const { return data != nullptr || host_value.has_value() || dispatched; }
  // Sent to the device, result not yet known (LazyContext::set_pipelined).
  bool in_flight() const {
    return dispatched && (data == nullptr || named_in_advance) && !host_value && status.ok();
  }
  // A value only on the host so far (see host_value).
  bool host_only() const { return data == nullptr && host_value.has_value(); }
};

// Nodes read in order (a trace's outputs or parameters), and a short list
// of them that keeps its first few without allocating.
using NodeSpan = absl::Span<const std::shared_ptr<Node>>;
using NodeList = absl::InlinedVector<std::shared_ptr<Node>, 4>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<Node> node) : node_(std::move(node)) { Acquire(); }
  Tensor(const Tensor& other) : node_(other.node_) { Acquire(); }
  Tensor(Tensor&& other) noexcept : node_(std::move(other.node_)) {}
  Tensor& operator=(const Tensor& other) {
    if (this != &other) {
      Drop();
      node_ = other.node_;
      Acquire();
    }
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      Drop();
      node_ = std::move(other.node_);
    }
    return *this;
  }
  ~Tensor() { Drop(); }

  bool defined() const { return node_ != nullptr; }
  // The shape as stored: for a reduced-precision tensor, bf16 (see below).
  const ir::Shape& shape() const { return node_->shape; }
  // The element type the tensor stands for: f32 for a reduced-precision
  // tensor, otherwise its storage type.
  ir::ElementType dtype() const {
    return node_->reduced_precision ? ir::ElementType::kF32 : node_->shape.type();
  }
  ir::ElementType storage_type() const { return node_->shape.type(); }
  int rank() const { return node_->shape.rank(); }
  int64_t dim(int i) const { return node_->shape.dim(i); }
  const std::string& device() const { return node_->device; }
  // Replicas holding this value (1 unless replicated, see DataParallel).
  int replica_count() const {
    return node_->replicas.empty() ? 1 : static_cast<int>(node_->replicas.size());
  }
  absl::Status status() const {
    return node_ == nullptr ? absl::FailedPreconditionError("undefined tensor") : node_->status;
  }
  const std::shared_ptr<Node>& node() const { return node_; }
  LazyContext* context() const { return node_ ? node_->context.get() : nullptr; }

  // Reduced precision is a property of the storage (as X10's): an f32
  // tensor converted with ToReducedPrecision() stays an f32 tensor (dtype()
  // is f32, ToHost() gives f32 values) whose values are stored, computed on
  // and rounded to in bf16. Ops on reduced-precision tensors give
  // reduced-precision results; an op that mixes them with full-precision
  // tensors is an error. ToReducedPrecision() of anything but a
  // full-precision f32 tensor returns it unchanged, as ToFullPrecision()
  // does for anything but a reduced-precision tensor.
  bool IsReducedPrecision() const { return node_ != nullptr && node_->reduced_precision; }
  Tensor ToReducedPrecision() const;
  Tensor ToFullPrecision() const;

  // Force execution of what this tensor needs and read it.
  absl::StatusOr<ir::Literal> ToHost(
      std::source_location where = std::source_location::current()) const;
  // The value as stored: bf16 for a reduced-precision tensor.
  absl::StatusOr<ir::Literal> ReadStorage(
      std::source_location where = std::source_location::current()) const;
  // The value of a one-element tensor as a double.
  absl::StatusOr<double> Item(std::source_location where = std::source_location::current()) const;
  // An explicit copy to another device (the only way data changes device).
  absl::StatusOr<Tensor> ToDevice(const std::string& device,
                                  std::source_location where = std::source_location::current()) const;

  // Shape, element type, device and values, as NumPy prints arrays: nested
  // brackets, and the middle of each dimension elided ("...") when the
  // tensor has more than 1000 elements. Reading forces execution, as Item()
  // does; an error is printed in place of the values.
  std::string ToString() const;

 private:
  void Acquire() {
    if (node_ != nullptr) node_->handles.fetch_add(1, std::memory_order_relaxed);
  }
  void Drop() {
    if (node_ != nullptr) node_->handles.fetch_sub(1, std::memory_order_relaxed);
  }

  std::shared_ptr<Node> node_;
};

// Prints ToString().
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Elementwise arithmetic with NumPy-style broadcasting; a C++ scalar takes
// the other operand's type and device.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);
Tensor Pow(const Tensor& a, const Tensor& b);
Tensor Binary(ir::Opcode op, const Tensor& a, const Tensor& b);
Tensor BinaryWith(ir::Opcode op, const Tensor& a, const Tensor& b, ir::Attributes attrs);

// Comparisons give pred tensors.
Tensor Compare(const Tensor& a, const Tensor& b, ir::ComparisonDirection direction);
Tensor GreaterEqual(const Tensor& a, const Tensor& b);
Tensor LessEqual(const Tensor& a, const Tensor& b);
Tensor Equal(const Tensor& a, const Tensor& b);
Tensor Greater(const Tensor& a, const Tensor& b);
Tensor Less(const Tensor& a, const Tensor& b);
Tensor Select(const Tensor& pred, const Tensor& on_true, const Tensor& on_false);
// min(max(x, lo), hi) with scalar bounds.
Tensor Clamp(const Tensor& x, double lo, double hi);

Tensor Unary(ir::Opcode op, const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Rsqrt(const Tensor& x);
Tensor Abs(const Tensor& x);
Tensor Sign(const Tensor& x);
Tensor Tanh(const Tensor& x);
// The error function (as in an exact GELU).
Tensor Erf(const Tensor& x);
Tensor Sigmoid(const Tensor& x);
Tensor Sin(const Tensor& x);
Tensor Cos(const Tensor& x);
// max(x, 0); its gradient is zero where x is not above zero (at zero
// too, as PyTorch's and JAX's relu), found from the result.
Tensor Relu(const Tensor& x);
// pred per element: neither infinite nor NaN (floating-point types only).
Tensor IsFinite(const Tensor& x);
Tensor Cast(const Tensor& x, ir::ElementType type);

// Shapes.
Tensor Reshape(const Tensor& x, std::vector<int64_t> dims);
Tensor Transpose(const Tensor& x, std::vector<int64_t> permutation);
Tensor Slice(const Tensor& x, std::vector<int64_t> start, std::vector<int64_t> limit,
             std::vector<int64_t> stride = {});
Tensor Concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor Reverse(const Tensor& x, std::vector<int64_t> dims);
Tensor Pad(const Tensor& x, double value, std::vector<ir::PadDim> padding);
// Broadcasts to `dims` following NumPy rules (trailing alignment, size 1).
Tensor BroadcastTo(const Tensor& x, std::vector<int64_t> dims);
// The IR broadcast: operand dim i becomes result dim `mapping[i]`.
Tensor BroadcastInDim(const Tensor& x, std::vector<int64_t> dims, std::vector<int64_t> mapping);

// Reductions over `dims` (all dims when empty).
Tensor Sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keep_dims = false);
Tensor Mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keep_dims = false);
Tensor ReduceMax(const Tensor& x, std::vector<int64_t> dims = {}, bool keep_dims = false);
Tensor Reduce(const Tensor& x, Reducer reducer, std::vector<int64_t> dims, bool keep_dims);
// Index of the largest element along `dim` (first on ties), as s32.
Tensor Argmax(const Tensor& x, int64_t dim);

// Linear algebra and neural-network ops.
// [.., m, k] x [k, n] (or batched [b, m, k] x [b, k, n]).
Tensor Matmul(const Tensor& a, const Tensor& b);
Tensor Dot(const Tensor& a, const Tensor& b, ir::DotDims dims);
// x: [N, H, W, C], w: [KH, KW, C, O]; padding "SAME" or "VALID".
Tensor Conv2D(const Tensor& x, const Tensor& w, int stride = 1,
              const std::string& padding = "VALID");
// The dimension numbers Conv2D uses: NHWC input, HWIO kernel, NHWC output.
ir::ConvDims Nhwc();
// XLA's convolution. With `feature_groups` G the input's features split
// into G blocks, each convolved with its own block of output features (the
// kernel's input feature dimension is C/G; G = C is a depthwise
// convolution); with `batch_groups` G the input's batch splits into G
// blocks the same way (what a grouped convolution's filter gradient is).
Tensor Convolution(const Tensor& x, const Tensor& w, std::vector<ir::WindowDim> window,
                   ir::ConvDims dims, int64_t feature_groups = 1, int64_t batch_groups = 1);
// x: [N, H, W, C]; window and stride over H and W; padding "VALID" (none)
// or "SAME" (as TensorFlow's: ceil(in / stride) outputs, padding that no
// maximum takes and no mean counts).
Tensor MaxPool2D(const Tensor& x, int window, int stride, const std::string& padding = "VALID");
Tensor AvgPool2D(const Tensor& x, int window, int stride, const std::string& padding = "VALID");
Tensor ReduceWindow(const Tensor& x, Reducer reducer, std::vector<ir::WindowDim> window);
Tensor SelectAndScatterMax(const Tensor& operand, const Tensor& source,
                           std::vector<ir::WindowDim> window);
Tensor Softmax(const Tensor& x, int64_t dim = -1);
Tensor LogSoftmax(const Tensor& x, int64_t dim = -1);
// Mean over the batch of -sum(labels * log_softmax(logits)).
Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& one_hot_labels);
// The mean over every element of (predictions - targets)^2.
Tensor MeanSquaredError(const Tensor& predictions, const Tensor& targets);
// How many rows of `logits` [batch, classes] have their largest entry at
// their label (`labels` [batch], integers), as an f32 scalar: the count
// behind an accuracy.
Tensor CorrectCount(const Tensor& logits, const Tensor& labels);
// labels: s32[N] -> [N, classes] of `type`.
Tensor OneHot(const Tensor& labels, int64_t classes, ir::ElementType type = ir::ElementType::kF32);

// A slice of `sizes` of `x` starting at `starts`, one scalar integer
// tensor per dimension, computed on the device; a start is clamped so the
// slice stays inside `x` (XLA's dynamic-slice).
Tensor DynamicSlice(const Tensor& x, const std::vector<Tensor>& starts,
                    std::vector<int64_t> sizes);
// `x` with `update` written at `starts` (clamped the same way).
Tensor DynamicUpdateSlice(const Tensor& x, const Tensor& update,
                          const std::vector<Tensor>& starts);

// Rows of `table` [V, D...] chosen by the integer `indices` [N...]:
// [N..., D...] (numpy.take along axis 0, as an embedding lookup; a gather).
// An index outside [0, V) reads the row it is clamped to, as XLA's gather.
Tensor Take(const Tensor& table, const Tensor& indices);
// A gather of `x` by `indices` with XLA's dimension numbers (no batching
// dimensions) and slice sizes.
Tensor Gather(const Tensor& x, const Tensor& indices, ir::GatherDims dims,
              std::vector<int64_t> slice_sizes);
// `x` with `updates` added at `indices` (XLA's scatter with addition, no
// batching dimensions): repeated indices add up.
Tensor ScatterAdd(const Tensor& x, const Tensor& indices, const Tensor& updates,
                  ir::ScatterDims dims);
// `x` with `updates` written at `indices` (XLA's scatter whose combiner
// keeps the update; NumPy's x[indices] = updates, JAX's .at[].set). Where
// indices repeat, which update lands is unspecified (as in XLA), and the
// gradient assumes they do not.
Tensor Scatter(const Tensor& x, const Tensor& indices, const Tensor& updates,
               ir::ScatterDims dims);

// The indices (s32) that sort `x` along `dim` (negative counts from the
// end), smallest first, or largest first when `descending`: XLA's stable
// variadic sort of x with an iota, so equal elements keep their order
// (where NaNs go is unspecified).
Tensor Argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// x's elements at `indices` along `dim` (NumPy's take_along_axis): an s32
// tensor of x's rank whose other dimensions match x's. A gather, so it has
// a gradient.
Tensor TakeAlong(const Tensor& x, const Tensor& indices, int64_t dim);
// `x` sorted along `dim`; its gradient goes back to where each element
// came from.
Tensor Sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The `k` largest elements along the last dimension, largest first, and
// their indices (s32); values have a gradient.
struct TopKResult {
  Tensor values, indices;
};
TopKResult TopK(const Tensor& x, int64_t k);

// The sum of `x` over every replica of a replicated execution (an
// all-reduce); `x` itself when the program runs once.
Tensor CrossReplicaSum(const Tensor& x);

// A tensor of `shape` filled with `value`, on `like`'s device.
Tensor FullLike(const Tensor& like, const ir::Shape& shape, double value);
// A tensor that carries `status` (an error found while tracing), with
// `like`'s shape and device; ops on it pass the error on.
Tensor ErrorTensor(const Tensor& like, absl::Status status);
// Uniform random values in [low, high) of `like`'s floating-point type and
// device, drawn inside the program (the rng op: seeded by the compile's rng
// seed and advanced by every execution of the program).
Tensor RngUniform(const Tensor& like, std::vector<int64_t> dims, double low, double high);
// Uniform values in [0, 1) of `dims` and float type `type` from a
// counter-based generator: element i is a hash of (seed, counter, i), so
// the numbers depend on nothing but those three. `counter` is a u32 scalar
// on the device the values go to (a step count carried as state); a
// program that advances it draws anew each step, and a step traced in step
// mode or inside a device loop draws the same numbers for the same count.
Tensor CounterUniform(const Tensor& counter, uint64_t seed, std::vector<int64_t> dims,
                      ir::ElementType type = ir::ElementType::kF32);
// The index along `dimension` of every element of `shape` (an integer
// type), on `like`'s device.
Tensor Iota(const Tensor& like, const ir::Shape& shape, int64_t dimension);
Tensor ZerosLike(const Tensor& x);
Tensor OnesLike(const Tensor& x);

}  // namespace kiln::client

#endif  // KILN_CLIENT_TENSOR_H_
