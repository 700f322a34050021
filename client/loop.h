// Control flow. Device loops: a step function traced once and run `trip_count` times on
// the device as one program (a while loop). Its inputs can come from the
// device's infeed and its results can go to the outfeed, so the host only
// streams data in and reads losses out while the loop trains.
//
//   auto final = client::While(steps, state, [&](client::DeviceLoop& loop,
//                                                const std::vector<Tensor>& s) {
//     Tensor x = loop.Infeed(Shape(kF32, {128, 784}));
//     ...
//     loop.Outfeed(loss);
//     return next_state;
//   });
#ifndef KILN_CLIENT_LOOP_H_
#define KILN_CLIENT_LOOP_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/tensor.h"

namespace kiln::client {

// What a loop body can do besides tensor math. Infeeds and outfeeds run in
// the order they were traced.
class DeviceLoop {
 public:
  DeviceLoop(LazyContext* ctx, std::string device) : ctx_(ctx), device_(std::move(device)) {}
  // The next value of the device's infeed; the program fails if the value
  // that arrives has another shape.
  Tensor Infeed(const ir::Shape& shape);
  // The next value of the device's infeed as one tuple of arrays of
  // `shapes` (written by a producer as one tuple value), element by element.
  std::vector<Tensor> InfeedTuple(const std::vector<ir::Shape>& shapes);
  // Pushes `value` to the device's outfeed.
  void Outfeed(const Tensor& value);
  const std::shared_ptr<Node>& last_token() const { return token_; }
  const absl::Status& status() const { return status_; }

 private:
  std::shared_ptr<Node> Token();

  LazyContext* ctx_;
  std::string device_;
  std::shared_ptr<Node> token_;
  absl::Status status_;
};

using LoopBody = std::function<absl::StatusOr<std::vector<Tensor>>(
    DeviceLoop& loop, const std::vector<Tensor>& state)>;

// Traces `body` once over stand-ins for `state` and returns lazy tensors for
// the state after `trip_count` iterations. `body` must return tensors of
// the same shapes as `state`. Nothing runs until a barrier or a read.
absl::StatusOr<std::vector<Tensor>> While(int64_t trip_count, const std::vector<Tensor>& state,
                                          const LoopBody& body);

// A device loop over state reached through pointers: the tensors that
// `carried` points at (a module's parameters and buffers, an optimizer's
// NamedState) enter the loop as its state, and `step` traces one iteration
// by reading and assigning them through the same pointers, as it would
// trace a step in step mode:
//
//   auto carried = nn::TrainingState(model, optimizer);  // weights, buffers, state
//   RETURN_IF_ERROR(WhileCarrying(steps, carried, [&](DeviceLoop& loop) {
//     Tensor x = loop.Infeed(...);
//     ... loss, Grad, optimizer.Step, model.SetParameters ...
//     loop.Outfeed(loss);
//     return absl::OkStatus();
//   }));
//
// Afterwards they hold the lazy values after `trip_count` iterations; on an
// error they hold what they held before. A step that changes a carried
// tensor's shape or type fails naming it. Every carried tensor must have a
// value (create an optimizer's state with InitState first).
absl::Status WhileCarrying(int64_t trip_count,
                           const std::vector<std::pair<std::string, Tensor*>>& carried,
                           const std::function<absl::Status(DeviceLoop& loop)>& step);

// Conditionals: a branch traced once over stand-ins for `operands`,
// returning tensors of the same shapes in every branch. The program runs
// only the branch the selector picks. A branch may read other tensors
// (they are captured, as by a loop body) and may contain conditionals and
// device loops; it cannot read or write feeds. Gradients flow through
// conditionals (Grad differentiates the branch that ran).
using Branch = std::function<absl::StatusOr<std::vector<Tensor>>(
    const std::vector<Tensor>& operands)>;

// `on_true` where `pred` (a pred scalar) is true, else `on_false`.
absl::StatusOr<std::vector<Tensor>> Cond(const Tensor& pred, const std::vector<Tensor>& operands,
                                         const Branch& on_true, const Branch& on_false);
// `branches[index]` for an s32 scalar `index`; an index outside
// [0, branches.size()) runs the last branch (as XLA's conditional does).
absl::StatusOr<std::vector<Tensor>> Switch(const Tensor& index, const std::vector<Tensor>& operands,
                                           const std::vector<Branch>& branches);

// A stand-in for a value inside a body or branch being traced (an
// unrealized parameter node) of `shape`, on `like`'s device and context.
std::shared_ptr<Node> StandIn(const Node& like, const ir::Shape& shape, bool reduced_precision);

// A device loop of a body already traced (`body`'s placeholders, results,
// effects, nodes and alive set; the rest is filled in), whose placeholders
// stand for `state` (for autodiff, which traces the loops of a gradient).
absl::StatusOr<std::vector<Tensor>> WhileOfTracedBody(int64_t trip_count,
                                                      const std::vector<Tensor>& state,
                                                      std::shared_ptr<LoopSpec> body);

// A conditional of branches already traced, whose placeholders stand for
// `operands` (for autodiff, which traces the branches of a gradient).
absl::StatusOr<std::vector<Tensor>> ConditionalOfTracedBranches(
    const Tensor& selector, const std::vector<Tensor>& operands, std::vector<CondBranch> branches);

}  // namespace kiln::client

#endif  // KILN_CLIENT_LOOP_H_
