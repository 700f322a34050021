// A function of lazy tensors traced once and then run again on new values
// without tracing: the first call records the body's ops, realizes what it
// returns and what it leaves in its bound state, and keeps that program;
// later calls whose values match the traced ones run the program on the
// new values directly (no ops recorded, no gradients taken, no trace keyed
// or lowered). A training step is the use: its trace and autodiff cost the
// client a share of every step that grows with the model.
#ifndef KILN_CLIENT_COMPILED_FUNCTION_H_
#define KILN_CLIENT_COMPILED_FUNCTION_H_

#include <deque>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/lazy.h"
#include "client/tensor.h"

namespace kiln::client {

// The contract, as jax.jit's:
// - The body computes its results from its arguments, the bound state and
//   values that stay as they are. Any other tensor it reads (one it
//   captures) is read as it was when the body was traced; so are constants
//   and values uploaded inside the body.
// - Whatever else the body does on the host (counting, printing, creating
//   an optimizer's state, setting a member) happens only when it traces.
// - The bound state is read before each call and, after it, holds what the
//   body assigned to it (parameters and an optimizer's state); state the
//   body leaves alone stays as it was.
//
// A call traces the body again when its arguments or state differ from a
// traced call's in count, shape, element type, precision, device or in
// which of them are one tensor; when a state tensor is undefined (an
// optimizer whose learning rate changed: see Optimizer::set_learning_rate);
// when a captured value is gone; and every time in eager mode, inside a
// device loop's body, for replicated values, and for a body that runs a
// program itself (a read of a value inside it, a barrier). A body traced
// again keys to the program it had (no compile).
//
// Each call runs its program as a barrier does: sent without waiting when
// the context is pipelined (LazyContext::set_pipelined), else at once. The
// values a call returns and leaves in the state are computed by then, or
// in flight. A replayed call that fails keeps its error on them (they have
// no graph to compute them again from); a failed call that ran at once
// leaves the state as it was when the values it held are intact.
//
// Arguments and state must be realized or in flight, or lazy values that
// a call computes first in a program of their own. Not thread-safe.
class CompiledFunction {
 public:
  using Body = std::function<absl::StatusOr<std::vector<Tensor>>(const std::vector<Tensor>& args)>;

  // `state` (borrowed: each pointer must outlive this) is what the body
  // may read and assign through (a model's parameters, an optimizer's
  // state); the body reads its other inputs from `args`.
  CompiledFunction(LazyContext* context, std::vector<Tensor*> state, Body body);

  // What the body returns for `args`. Arguments passed in by value (moved)
  // that nothing else holds, and state the body replaced, may be donated:
  // the device reuses their memory for the results.
  absl::StatusOr<std::vector<Tensor>> operator()(
      std::vector<Tensor> args, std::source_location where = std::source_location::current());

  int64_t traces() const { return traces_; }
  int64_t replays() const { return replays_; }
  // Why the latest trace happened: "first call", "argument 1 u8[128,784]
  // -> u8[96,784]", "state 12 undefined", ...
  const std::string& trace_reason() const { return trace_reason_; }

  // Programs kept for different argument shapes, most recent first.
  static constexpr size_t kMaxPlans = 8;

 private:
  // An argument or state tensor as a traced call saw it (or a program
  // output as traced).
  struct InputSpec {
    ir::Shape shape;
    std::string device;
    bool reduced_precision = false;
    // The index of the first input that is the same tensor, or -1.
    int same_as = -1;
    bool stops_gradients = false;  // outputs only
  };
  // Where a returned or state value comes from on a replay.
  struct Source {
    enum Kind { kOutput, kInput, kFixed } kind = kFixed;
    int index = 0;                 // the program's output, or the input
    std::shared_ptr<Node> fixed;  // a value that does not change
  };
  struct Plan {
    std::vector<InputSpec> inputs;  // arguments, then state
    std::shared_ptr<Executable> executable;  // null: nothing to run
    // Per program parameter: the input it reads, or -1: captured[i].
    std::vector<int> param_input;
    std::vector<std::shared_ptr<Node>> captured;
    // The program's outputs as traced (not the nodes: those would keep
    // their buffers).
    std::vector<InputSpec> outputs;
    std::vector<Source> returned;
    std::vector<Source> state;
    // Per state tensor: whether the program reads the value it replaces.
    std::vector<bool> state_read;
  };

  // Whether `specs` (of this call's inputs) match `plan`; if not, why
  // (for trace_reason).
  static bool Matches(const Plan& plan, const std::vector<InputSpec>& specs, std::string* why);
  // Whether the values `plan` captured can still be read.
  static bool CapturedReadable(const Plan& plan);
  // A leaf of its own holding `node`'s value, which the body reads in its
  // place while it traces: a tensor it captures that is the same node as
  // an input is then a parameter apart from that input.
  static absl::StatusOr<std::shared_ptr<Node>> LeafOf(const std::shared_ptr<Node>& node);
  // With `replayable` (no input undefined or replicated, lazy mode, not
  // in a device loop), keeps a plan unless the body reads or runs a program.
  absl::StatusOr<std::vector<Tensor>> Trace(std::vector<Tensor> args,
                                            std::vector<std::shared_ptr<Node>> inputs,
                                            std::vector<InputSpec> specs, bool replayable,
                                            std::source_location where);
  absl::StatusOr<std::vector<Tensor>> Replay(const Plan& plan, std::vector<Tensor> args,
                                             std::vector<std::shared_ptr<Node>> inputs);

  LazyContext* context_;
  std::vector<Tensor*> state_;
  Body body_;
  std::deque<Plan> plans_;
  int64_t traces_ = 0;
  int64_t replays_ = 0;
  std::string trace_reason_;
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_COMPILED_FUNCTION_H_
