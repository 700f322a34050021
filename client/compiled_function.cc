#include "client/compiled_function.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

std::string Describe(const ir::Shape& shape, bool reduced_precision) {
  return reduced_precision ? absl::StrCat(shape.ToString(), " (bf16 storage)") : shape.ToString();
}

// Whether a value a program can read as an argument: computed (and not
// given to a program) or in flight.
bool Readable(const Node& node) {
  if (!node.status.ok()) return false;
  if (node.host_only()) return true;
  if (node.data != nullptr) return !node.data->donated();
  return node.dispatched;
}

// Whether a value the state may take back: readable, or still to be
// computed from its graph (a pipelined execution that failed in a way
// worth retrying leaves it so).
bool Recoverable(const Node& node) {
  return Readable(node) || (node.status.ok() && !node.realized() && !node.operands.empty());
}

}  // namespace

CompiledFunction::CompiledFunction(LazyContext* context, std::vector<Tensor*> state, Body body)
    : context_(context), state_(std::move(state)), body_(std::move(body)) {}

bool CompiledFunction::Matches(const Plan& plan, const std::vector<InputSpec>& specs,
                               std::string* why) {
  if (plan.inputs.size() != specs.size()) {
    *why = absl::StrCat(specs.size(), " inputs, traced with ", plan.inputs.size());
    return false;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const InputSpec& traced = plan.inputs[i];
    const InputSpec& now = specs[i];
    if (traced.shape == now.shape && traced.device == now.device &&
        traced.reduced_precision == now.reduced_precision && traced.same_as == now.same_as) {
      continue;
    }
    if (traced.same_as != now.same_as) {
      *why = absl::StrCat("input ", i, " is ",
                          now.same_as < 0 ? "its own tensor" : absl::StrCat("input ", now.same_as),
                          ", traced as ",
                          traced.same_as < 0 ? "its own tensor"
                                             : absl::StrCat("input ", traced.same_as));
    } else if (traced.device != now.device) {
      *why = absl::StrCat("input ", i, " on ", now.device, ", traced on ", traced.device);
    } else {
      *why = absl::StrCat("input ", i, " ", Describe(traced.shape, traced.reduced_precision),
                          " -> ", Describe(now.shape, now.reduced_precision));
    }
    return false;
  }
  return true;
}

bool CompiledFunction::CapturedReadable(const Plan& plan) {
  return std::all_of(plan.captured.begin(), plan.captured.end(),
                     [](const std::shared_ptr<Node>& c) { return c == nullptr || Readable(*c); });
}

absl::StatusOr<std::shared_ptr<Node>> CompiledFunction::LeafOf(const std::shared_ptr<Node>& node) {
  // A leaf must not read a value whose execution's outcome only the
  // original would learn (a trace waits for it: one step not pipelined).
  if (node->in_flight()) node->context->SyncFor(node.get()).IgnoreError();
  RETURN_IF_ERROR(node->status);
  if (!node->realized()) RETURN_IF_ERROR(node->context->Realize({Tensor(node)}));
  auto leaf = std::make_shared<Node>();
  leaf->shape = node->shape;
  leaf->device = node->device;
  leaf->context = node->context;
  leaf->reduced_precision = node->reduced_precision;
  leaf->stops_gradients = node->stops_gradients;
  leaf->data = node->data;
  leaf->replicas = node->replicas;
  if (node->data == nullptr) leaf->host_value = node->host_value;
  return leaf;
}

absl::StatusOr<std::vector<Tensor>> CompiledFunction::operator()(std::vector<Tensor> args,
                                                                 std::source_location where) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined()) {
      return absl::InvalidArgumentError(absl::StrCat("argument ", i, " is undefined"));
    }
    RETURN_IF_ERROR(args[i].status());
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i]->defined()) RETURN_IF_ERROR(state_[i]->status());
  }
  // Inputs are leaves of the trace: lazy ones are computed first.
  std::vector<Tensor> lazy;
  for (const Tensor& t : args) {
    if (!t.node()->realized()) lazy.push_back(t);
  }
  for (const Tensor* t : state_) {
    if (t->defined() && !t->node()->realized()) lazy.push_back(*t);
  }
  if (!lazy.empty()) {
    RETURN_IF_ERROR(context_->RealizeNodes(lazy, where, nullptr, context_->pipelined()));
    lazy.clear();
  }
  std::vector<std::shared_ptr<Node>> inputs;
  inputs.reserve(args.size() + state_.size());
  for (const Tensor& t : args) inputs.push_back(t.node());
  for (const Tensor* t : state_) inputs.push_back(t->node());
  std::vector<InputSpec> specs(inputs.size());
  bool replayable = !context_->eager() && !context_->in_loop_body();
  std::string why;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node* node = inputs[i].get();
    if (node == nullptr) {
      if (replayable) why = absl::StrCat("state ", i - args.size(), " undefined");
      replayable = false;
      continue;
    }
    if (!node->replicas.empty()) {
      if (replayable) why = absl::StrCat("input ", i, " is replicated");
      replayable = false;
    }
    InputSpec& spec = specs[i];
    spec.shape = node->shape;
    spec.device = node->device;
    spec.reduced_precision = node->reduced_precision;
    for (size_t j = 0; j < i; ++j) {
      if (inputs[j].get() == node) {
        spec.same_as = static_cast<int>(j);
        break;
      }
    }
  }
  if (!replayable) {
    trace_reason_ = why.empty() ? (context_->eager() ? "eager mode" : "inside a device loop") : why;
    return Trace(std::move(args), std::move(inputs), std::move(specs), false, where);
  }
  why = "first call";
  for (auto it = plans_.begin(); it != plans_.end();) {
    if (!Matches(*it, specs, &why)) {
      ++it;
      continue;
    }
    if (!CapturedReadable(*it)) {
      // Its program read a value that is gone (given to a program, or
      // failed): it cannot run again.
      why = "a captured value is gone (donated or failed)";
      it = plans_.erase(it);
      continue;
    }
    if (it != plans_.begin()) std::rotate(plans_.begin(), it, it + 1);
    return Replay(plans_.front(), std::move(args), std::move(inputs));
  }
  trace_reason_ = why;
  return Trace(std::move(args), std::move(inputs), std::move(specs), true, where);
}

absl::StatusOr<std::vector<Tensor>> CompiledFunction::Trace(
    std::vector<Tensor> args, std::vector<std::shared_ptr<Node>> inputs,
    std::vector<InputSpec> specs, bool replayable, std::source_location where) {
  ++traces_;
  // The body reads leaves of its own in place of the inputs (one per
  // distinct input); the plan names them by address. The originals stay
  // until the body returns: state it left alone gets its own tensor back.
  // Then only the trace holds the rest (so that the program may donate
  // them).
  std::vector<std::weak_ptr<Node>> traced_inputs(inputs.size());
  std::vector<Tensor> body_args;
  std::vector<std::shared_ptr<Node>> originals;
  if (replayable) {
    std::vector<std::shared_ptr<Node>> leaves(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (specs[i].same_as >= 0) {
        leaves[i] = leaves[specs[i].same_as];
      } else {
        ASSIGN_OR_RETURN(leaves[i], LeafOf(inputs[i]));
      }
      traced_inputs[i] = leaves[i];
    }
    for (size_t i = 0; i < args.size(); ++i) body_args.push_back(Tensor(leaves[i]));
    for (size_t i = 0; i < state_.size(); ++i) *state_[i] = Tensor(leaves[args.size() + i]);
    originals = std::move(inputs);
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) traced_inputs[i] = inputs[i];
    body_args = args;
  }
  const size_t arg_count = args.size();
  inputs.clear();
  args.clear();
  // State the body left as the leaf it was given: its own tensor again,
  // and on replays the input it was.
  std::vector<bool> left_alone(state_.size(), false);
  auto restore_left_alone = [&] {
    if (originals.empty()) return;
    for (size_t i = 0; i < state_.size(); ++i) {
      const size_t input = arg_count + i;
      std::shared_ptr<Node> leaf = traced_inputs[input].lock();
      if (leaf != nullptr && state_[i]->node() == leaf) {
        *state_[i] = Tensor(originals[input]);
        left_alone[i] = true;
      }
    }
    originals.clear();
  };
  const int64_t activity_before = LazyContext::ThreadActivity();
  absl::StatusOr<std::vector<Tensor>> body_returned = body_(body_args);
  restore_left_alone();
  body_args.clear();
  RETURN_IF_ERROR(body_returned.status());
  std::vector<Tensor> returned = *std::move(body_returned);
  // A body that ran a program or read a value itself: what it computed or
  // read is not part of the step's program, so the step cannot be replayed.
  if (replayable && LazyContext::ThreadActivity() != activity_before) {
    replayable = false;
    trace_reason_ = "the body runs a program or reads a value (traced every call)";
  }
  std::vector<Tensor> results;
  for (const Tensor& t : returned) {
    if (t.defined()) results.push_back(t);
  }
  for (const Tensor* t : state_) {
    if (t->defined()) results.push_back(*t);
  }
  LazyContext::RealizedProgram program;
  RETURN_IF_ERROR(
      context_->RealizeNodes(results, where, nullptr, context_->pipelined(), &program));
  results.clear();
  if (!replayable) return returned;
  for (const auto& p : program.params) {
    if (!p->replicas.empty()) return returned;
  }

  Plan plan;
  plan.inputs = std::move(specs);
  plan.executable = program.executable;
  absl::flat_hash_map<const Node*, int> input_index, output_index;
  for (size_t i = 0; i < traced_inputs.size(); ++i) {
    if (std::shared_ptr<Node> node = traced_inputs[i].lock()) {
      input_index.try_emplace(node.get(), static_cast<int>(i));
    }
  }
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const Node& out = *program.outputs[i];
    output_index.try_emplace(&out, static_cast<int>(i));
    plan.outputs.push_back(
        InputSpec{out.shape, out.device, out.reduced_precision, -1, out.stops_gradients});
  }
  for (const std::shared_ptr<Node>& p : program.params) {
    auto it = input_index.find(p.get());
    plan.param_input.push_back(it == input_index.end() ? -1 : it->second);
    plan.captured.push_back(it == input_index.end() ? p : nullptr);
  }
  auto source_of = [&](const Tensor& t) {
    Source source;
    if (!t.defined()) return source;
    if (auto out = output_index.find(t.node().get()); out != output_index.end()) {
      source.kind = Source::kOutput;
      source.index = out->second;
    } else if (auto in = input_index.find(t.node().get()); in != input_index.end()) {
      source.kind = Source::kInput;
      source.index = in->second;
    } else {
      source.fixed = t.node();
    }
    return source;
  };
  for (const Tensor& t : returned) plan.returned.push_back(source_of(t));
  for (size_t i = 0; i < state_.size(); ++i) {
    const int input = static_cast<int>(arg_count + i);
    plan.state.push_back(left_alone[i] ? Source{Source::kInput, input, nullptr}
                                       : source_of(*state_[i]));
    plan.state_read.push_back(std::find(plan.param_input.begin(), plan.param_input.end(),
                                        input) != plan.param_input.end());
  }
  // The newest plan for these inputs replaces an older one.
  std::string unused;
  std::erase_if(plans_, [&](const Plan& old) {
    return Matches(old, plan.inputs, &unused) || !CapturedReadable(old);
  });
  plans_.push_front(std::move(plan));
  if (plans_.size() > kMaxPlans) plans_.pop_back();
  return returned;
}

absl::StatusOr<std::vector<Tensor>> CompiledFunction::Replay(
    const Plan& plan, std::vector<Tensor> args, std::vector<std::shared_ptr<Node>> inputs) {
  ++replays_;
  NodeList params;
  params.reserve(plan.param_input.size());
  for (size_t i = 0; i < plan.param_input.size(); ++i) {
    params.push_back(plan.param_input[i] >= 0 ? inputs[plan.param_input[i]] : plan.captured[i]);
  }
  NodeList outputs;
  outputs.reserve(plan.outputs.size());
  std::shared_ptr<LazyContext> context = context_->shared_from_this();
  for (const InputSpec& spec : plan.outputs) {
    auto node = std::make_shared<Node>();
    node->shape = spec.shape;
    node->device = spec.device;
    node->reduced_precision = spec.reduced_precision;
    node->stops_gradients = spec.stops_gradients;
    node->context = context;
    outputs.push_back(std::move(node));
  }
  auto value_of = [&](const Source& source) {
    switch (source.kind) {
      case Source::kOutput:
        return Tensor(outputs[source.index]);
      case Source::kInput:
        return Tensor(inputs[source.index]);
      case Source::kFixed:
        break;
    }
    return source.fixed == nullptr ? Tensor() : Tensor(source.fixed);
  };
  std::vector<Tensor> returned;
  returned.reserve(plan.returned.size());
  for (const Source& source : plan.returned) returned.push_back(value_of(source));
  // The state takes its new values before the program runs, so that the
  // values they replace are held by the program alone (and may be
  // donated); the old ones come back if the call fails while they last.
  // Those the program does not read are kept here (nothing can donate
  // them).
  const size_t first_state = plan.inputs.size() - state_.size();
  std::vector<std::weak_ptr<Node>> old_state;
  std::vector<std::shared_ptr<Node>> unread_state;
  old_state.reserve(state_.size());
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::shared_ptr<Node>& old = inputs[first_state + i];
    old_state.push_back(old);
    if (!plan.state_read[i]) unread_state.push_back(old);
    *state_[i] = value_of(plan.state[i]);
  }
  inputs.clear();
  args.clear();
  if (plan.executable == nullptr) return returned;
  absl::Status run = context_->Replay(plan.executable, params, outputs);
  if (run.ok()) return returned;
  std::vector<std::shared_ptr<Node>> before;
  for (const std::weak_ptr<Node>& weak : old_state) {
    std::shared_ptr<Node> node = weak.lock();
    if (node == nullptr || !Recoverable(*node)) return run;
    before.push_back(std::move(node));
  }
  for (size_t i = 0; i < state_.size(); ++i) *state_[i] = Tensor(std::move(before[i]));
  return run;
}

}  // namespace kiln::client
