#include "client/loop.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/lazy.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

std::shared_ptr<Node> NewNode(ir::Opcode op, ir::Shape shape, std::string device,
                              std::vector<std::shared_ptr<Node>> operands) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->shape = std::move(shape);
  node->device = std::move(device);
  node->operands.assign(std::make_move_iterator(operands.begin()),
                        std::make_move_iterator(operands.end()));
  return node;
}

std::shared_ptr<Node> TupleElement(LazyContext* ctx, const std::shared_ptr<Node>& tuple,
                                   int64_t index) {
  auto node = NewNode(ir::Opcode::kGetTupleElement, tuple->shape.tuple_shape(index),
                      tuple->device, {tuple});
  node->attrs.Mutable().tuple_index = index;
  return ctx->Record(std::move(node)).node();
}

// The values from outside the body that its graph reads.
std::vector<std::shared_ptr<Node>> FindCaptures(const std::vector<std::shared_ptr<Node>>& roots,
                                                const absl::flat_hash_set<const Node*>& body,
                                                const absl::flat_hash_set<const Node*>& inputs) {
  std::vector<std::shared_ptr<Node>> captures;
  absl::flat_hash_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n == nullptr || !seen.insert(n.get()).second) continue;
    if (inputs.contains(n.get())) continue;
    const bool inline_constant =
        !n->realized() && n->op == ir::Opcode::kConstant && n->operands.empty();
    if (inline_constant) continue;
    if (!body.contains(n.get())) {
      captures.push_back(n);
      continue;
    }
    for (const auto& o : n->operands) stack.push_back(o);
  }
  return captures;
}

// A loop's state: some, each without an error, all on one device.
absl::Status CheckLoopState(const std::vector<Tensor>& state) {
  if (state.empty()) return absl::InvalidArgumentError("a device loop needs state");
  for (const Tensor& t : state) RETURN_IF_ERROR(t.status());
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].device() != state[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat("loop state ", i, " lives on ",
                                                     state[i].device(), ", state 0 on ",
                                                     state[0].device()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<Node> StandIn(const Node& like, const ir::Shape& shape, bool reduced_precision) {
  auto node = NewNode(ir::Opcode::kParameter, shape, like.device, {});
  node->context = like.context;
  node->reduced_precision = reduced_precision;
  return node;
}

std::shared_ptr<Node> DeviceLoop::Token() {
  if (token_ == nullptr) {
    token_ = ctx_->Record(NewNode(ir::Opcode::kAfterAll, ir::Shape::Token(), device_, {})).node();
  }
  return token_;
}

Tensor DeviceLoop::Infeed(const ir::Shape& shape) {
  if (!shape.IsArray()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("infeed values are arrays, not ", shape.ToString()));
  }
  auto feed = ctx_->Record(NewNode(ir::Opcode::kInfeed,
                                   ir::Shape::Tuple({shape, ir::Shape::Token()}), device_,
                                   {Token()}))
                  .node();
  token_ = TupleElement(ctx_, feed, 1);
  return Tensor(TupleElement(ctx_, feed, 0));
}

std::vector<Tensor> DeviceLoop::InfeedTuple(const std::vector<ir::Shape>& shapes) {
  for (const ir::Shape& shape : shapes) {
    if (!shape.IsArray()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "the elements of an infeed tuple are arrays, not ", shape.ToString()));
    }
  }
  const ir::Shape tuple = ir::Shape::Tuple(shapes);
  auto feed = ctx_->Record(NewNode(ir::Opcode::kInfeed,
                                   ir::Shape::Tuple({tuple, ir::Shape::Token()}), device_,
                                   {Token()}))
                  .node();
  token_ = TupleElement(ctx_, feed, 1);
  std::shared_ptr<Node> value = TupleElement(ctx_, feed, 0);
  std::vector<Tensor> elements;
  for (size_t i = 0; i < shapes.size(); ++i) {
    elements.push_back(Tensor(TupleElement(ctx_, value, static_cast<int64_t>(i))));
  }
  return elements;
}

void DeviceLoop::Outfeed(const Tensor& value) {
  if (!value.status().ok()) {
    if (status_.ok()) status_ = value.status();
    return;
  }
  if (value.device() != device_) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "outfeed of a tensor on ", value.device(), " in a loop on ", device_));
    return;
  }
  token_ = ctx_->Record(NewNode(ir::Opcode::kOutfeed, ir::Shape::Token(), device_,
                                {value.node(), Token()}))
               .node();
}

absl::StatusOr<std::vector<Tensor>> While(int64_t trip_count, const std::vector<Tensor>& state,
                                          const LoopBody& body) {
  RETURN_IF_ERROR(CheckLoopState(state));
  LazyContext* ctx = state[0].context();
  const std::string device = state[0].device();
  auto spec = std::make_shared<LoopSpec>();
  std::vector<Tensor> inputs;
  for (const Tensor& t : state) {
    spec->placeholders.push_back(StandIn(*t.node(), t.shape(), t.IsReducedPrecision()));
    inputs.push_back(Tensor(spec->placeholders.back()));
  }
  if (!body) return absl::InvalidArgumentError("the device loop's body is empty");
  const bool nested = ctx->in_loop_body();
  DeviceLoop loop(ctx, device);
  ctx->BeginLoopBody();
  absl::StatusOr<std::vector<Tensor>> next = body(loop, inputs);
  LazyContext::LoopBodyNodes body_nodes = ctx->EndLoopBody();
  if (!next.ok()) return WithContext(next.status(), "device loop body");
  RETURN_IF_ERROR(loop.status());
  // Feeds run in traced order along the body's own token chain: one used in
  // a conditional branch or a nested body, or a loop with feeds inside
  // another body or a branch, would run out of that order.
  if (loop.last_token() != nullptr && !body_nodes.nodes.contains(loop.last_token().get())) {
    return absl::InvalidArgumentError(
        "the device loop's feeds were used inside a conditional branch or a nested loop body; "
        "use them in the loop body itself");
  }
  if (nested && loop.last_token() != nullptr) {
    return absl::InvalidArgumentError(
        "a device loop inside a loop body or a conditional branch cannot read or write feeds");
  }
  if (next->size() != state.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the loop body returned ", next->size(), " tensors for ", state.size(), " state tensors"));
  }
  for (size_t i = 0; i < state.size(); ++i) {
    RETURN_IF_ERROR(WithContext((*next)[i].status(), absl::StrCat("loop state ", i)));
    spec->results.push_back((*next)[i].node());
  }
  spec->effects = loop.last_token();
  spec->nodes = std::move(body_nodes.nodes);
  spec->alive = std::move(body_nodes.alive);
  return WhileOfTracedBody(trip_count, state, std::move(spec));
}

absl::StatusOr<std::vector<Tensor>> WhileOfTracedBody(int64_t trip_count,
                                                      const std::vector<Tensor>& state,
                                                      std::shared_ptr<LoopSpec> spec) {
  RETURN_IF_ERROR(CheckLoopState(state));
  if (trip_count < 0 || trip_count > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("trip count ", trip_count, " out of range"));
  }
  LazyContext* ctx = state[0].context();
  const std::string device = state[0].device();
  if (spec->placeholders.size() != state.size() || spec->results.size() != state.size()) {
    return absl::InternalError(absl::StrCat("a loop body of ", spec->placeholders.size(),
                                            " stand-ins and ", spec->results.size(),
                                            " results for ", state.size(), " state tensors"));
  }
  for (size_t i = 0; i < state.size(); ++i) {
    const Node& r = *spec->results[i];
    if (r.shape != state[i].shape() || r.device != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loop state ", i, " enters as ", state[i].shape().ToString(), " on ", device,
          " but the body returns ", r.shape.ToString(), " on ", r.device));
    }
  }
  spec->trip_count = trip_count;
  absl::flat_hash_set<const Node*> input_set;
  for (const auto& p : spec->placeholders) input_set.insert(p.get());
  std::vector<std::shared_ptr<Node>> roots = spec->results;
  if (spec->effects) roots.push_back(spec->effects);
  spec->captures = FindCaptures(roots, spec->nodes, input_set);

  std::vector<ir::Shape> carried{ir::Shape::Scalar(ir::ElementType::kS32)};
  std::vector<std::shared_ptr<Node>> operands;
  for (const Tensor& t : state) {
    carried.push_back(t.shape());
    operands.push_back(t.node());
  }
  for (const auto& c : spec->captures) {
    RETURN_IF_ERROR(c->status);
    if (c->device != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the loop body on ", device, " reads a tensor on ", c->device));
    }
    carried.push_back(c->shape);
    operands.push_back(c);
  }
  auto loop_node = NewNode(ir::Opcode::kWhile, ir::Shape::Tuple(carried), device,
                           std::move(operands));
  loop_node->loop = spec;  // spec stays writable here: its outputs come next
  loop_node->context = state[0].node()->context;
  ctx->JoinLoopBody(loop_node);
  std::vector<Tensor> out;
  for (size_t i = 0; i < state.size(); ++i) {
    out.push_back(Tensor(TupleElement(ctx, loop_node, 1 + static_cast<int64_t>(i))));
    out.back().node()->reduced_precision = state[i].IsReducedPrecision();
    spec->outputs.push_back(out.back().node());
  }
  return out;
}

}  // namespace kiln::client

namespace kiln::client {

absl::StatusOr<std::vector<Tensor>> ConditionalOfTracedBranches(
    const Tensor& selector, const std::vector<Tensor>& operands, std::vector<CondBranch> branches) {
  RETURN_IF_ERROR(selector.status());
  const ir::Shape pred = ir::Shape::Scalar(ir::ElementType::kPred);
  const ir::Shape index = ir::Shape::Scalar(ir::ElementType::kS32);
  if (selector.shape() != pred && selector.shape() != index) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a conditional's selector is a pred[] or s32[] scalar, not ", selector.shape().ToString()));
  }
  if (branches.empty()) return absl::InvalidArgumentError("a conditional needs a branch");
  if (selector.shape() == pred && branches.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a conditional on a pred has two branches, not ", branches.size()));
  }
  LazyContext* ctx = selector.context();
  const std::string& device = selector.device();
  for (size_t i = 0; i < operands.size(); ++i) {
    RETURN_IF_ERROR(WithContext(operands[i].status(), absl::StrCat("conditional operand ", i)));
    if (operands[i].device() != device) {
      return absl::InvalidArgumentError(absl::StrCat("conditional operand ", i, " lives on ",
                                                     operands[i].device(), ", its selector on ",
                                                     device));
    }
  }
  auto spec = std::make_shared<CondSpec>();
  spec->operand_count = operands.size();
  absl::flat_hash_set<const Node*> captured;
  std::vector<ir::Shape> result_shapes;
  for (size_t k = 0; k < branches.size(); ++k) {
    CondBranch& branch = branches[k];
    if (branch.placeholders.size() != operands.size()) {
      return absl::InternalError(absl::StrCat("branch ", k, " has ", branch.placeholders.size(),
                                              " stand-ins for ", operands.size(), " operands"));
    }
    for (size_t i = 0; i < branch.results.size(); ++i) {
      const Node& r = *branch.results[i];
      RETURN_IF_ERROR(WithContext(r.status, absl::StrCat("branch ", k, " result ", i)));
      if (r.device != device) {
        return absl::InvalidArgumentError(absl::StrCat(
            "branch ", k, " result ", i, " lives on ", r.device, ", the conditional on ", device));
      }
    }
    if (k == 0) {
      for (const auto& r : branch.results) result_shapes.push_back(r->shape);
    } else if (branch.results.size() != result_shapes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("branch ", k, " returns ",
                                                     branch.results.size(), " tensors, branch 0 ",
                                                     result_shapes.size()));
    } else {
      for (size_t i = 0; i < result_shapes.size(); ++i) {
        if (branch.results[i]->shape != result_shapes[i]) {
          return absl::InvalidArgumentError(absl::StrCat(
              "branch ", k, " result ", i, " is ", branch.results[i]->shape.ToString(),
              ", branch 0's ", result_shapes[i].ToString()));
        }
        if (branch.results[i]->reduced_precision != branches[0].results[i]->reduced_precision) {
          return absl::InvalidArgumentError(absl::StrCat(
              "branch ", k, " result ", i, " is ",
              branch.results[i]->reduced_precision ? "" : "not ",
              "reduced precision, branch 0's is ",
              branches[0].results[i]->reduced_precision ? "" : "not ",
              "(convert one with ToReducedPrecision() or ToFullPrecision())"));
        }
      }
    }
    absl::flat_hash_set<const Node*> inputs;
    for (const auto& p : branch.placeholders) inputs.insert(p.get());
    for (auto& c : FindCaptures(branch.results, branch.nodes, inputs)) {
      RETURN_IF_ERROR(c->status);
      if (c->device != device) {
        return absl::InvalidArgumentError(absl::StrCat(
            "branch ", k, " of a conditional on ", device, " reads a tensor on ", c->device));
      }
      if (captured.insert(c.get()).second) spec->captures.push_back(std::move(c));
    }
  }
  std::vector<std::shared_ptr<Node>> node_operands{selector.node()};
  for (const Tensor& t : operands) node_operands.push_back(t.node());
  node_operands.insert(node_operands.end(), spec->captures.begin(), spec->captures.end());
  spec->branches = std::move(branches);
  auto cond = NewNode(ir::Opcode::kConditional, ir::Shape::Tuple(result_shapes), device,
                      std::move(node_operands));
  CondSpec* writable = spec.get();  // its outputs come next
  cond->cond = std::move(spec);
  cond->context = selector.node()->context;
  ctx->JoinLoopBody(cond);
  std::vector<Tensor> out;
  for (size_t i = 0; i < result_shapes.size(); ++i) {
    out.push_back(Tensor(TupleElement(ctx, cond, static_cast<int64_t>(i))));
    out.back().node()->reduced_precision = writable->branches[0].results[i]->reduced_precision;
    writable->outputs.push_back(out.back().node());
  }
  return out;
}

namespace {

// Whether `nodes` (traced in a body or branch) read or write feeds: a feed
// op, or a device loop that does.
bool UsesFeeds(const absl::flat_hash_set<const Node*>& nodes) {
  for (const Node* n : nodes) {
    if (n->op == ir::Opcode::kInfeed || n->op == ir::Opcode::kOutfeed) return true;
    if (n->loop != nullptr && n->loop->effects != nullptr) return true;
  }
  return false;
}

// Traces each branch over stand-ins for `operands`; the conditional of them.
absl::StatusOr<std::vector<Tensor>> TraceConditional(const Tensor& selector,
                                                     const std::vector<Tensor>& operands,
                                                     const std::vector<Branch>& branches) {
  RETURN_IF_ERROR(selector.status());
  LazyContext* ctx = selector.context();
  std::vector<CondBranch> traced(branches.size());
  for (size_t k = 0; k < branches.size(); ++k) {
    CondBranch& branch = traced[k];
    std::vector<Tensor> inputs;
    for (const Tensor& t : operands) {
      RETURN_IF_ERROR(t.status());
      branch.placeholders.push_back(StandIn(*t.node(), t.shape(), t.IsReducedPrecision()));
      inputs.push_back(Tensor(branch.placeholders.back()));
    }
    ctx->BeginLoopBody();
    absl::StatusOr<std::vector<Tensor>> results =
        branches[k] ? branches[k](inputs)
                    : absl::InvalidArgumentError(absl::StrCat("branch ", k, " is empty"));
    LazyContext::LoopBodyNodes nodes = ctx->EndLoopBody();
    if (!results.ok()) return WithContext(results.status(), absl::StrCat("conditional branch ", k));
    for (const Tensor& r : *results) {
      RETURN_IF_ERROR(WithContext(r.status(), absl::StrCat("conditional branch ", k)));
      branch.results.push_back(r.node());
    }
    if (UsesFeeds(nodes.nodes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conditional branch ", k, " reads or writes feeds; a branch cannot (the feeds of a "
          "device loop run in the loop body itself)"));
    }
    branch.nodes = std::move(nodes.nodes);
    branch.alive = std::move(nodes.alive);
  }
  return ConditionalOfTracedBranches(selector, operands, std::move(traced));
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> Switch(const Tensor& index, const std::vector<Tensor>& operands,
                                           const std::vector<Branch>& branches) {
  RETURN_IF_ERROR(index.status());
  if (index.shape() != ir::Shape::Scalar(ir::ElementType::kS32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Switch's index is an s32[] scalar, not ", index.shape().ToString(),
        " (Cond takes a pred)"));
  }
  return TraceConditional(index, operands, branches);
}

absl::StatusOr<std::vector<Tensor>> Cond(const Tensor& pred, const std::vector<Tensor>& operands,
                                         const Branch& on_true, const Branch& on_false) {
  RETURN_IF_ERROR(pred.status());
  if (pred.shape() != ir::Shape::Scalar(ir::ElementType::kPred)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cond's predicate is a pred[] scalar, not ", pred.shape().ToString()));
  }
  return TraceConditional(pred, operands, {on_true, on_false});
}

absl::Status WhileCarrying(int64_t trip_count,
                           const std::vector<std::pair<std::string, Tensor*>>& carried,
                           const std::function<absl::Status(DeviceLoop& loop)>& step) {
  if (carried.empty()) return absl::InvalidArgumentError("WhileCarrying needs state to carry");
  if (!step) return absl::InvalidArgumentError("WhileCarrying's step is empty");
  std::vector<Tensor> before;
  for (const auto& [name, tensor] : carried) {
    if (tensor == nullptr || !tensor->defined()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "carried tensor '", name, "' has no value (create an optimizer's state with InitState)"));
    }
    RETURN_IF_ERROR(tensor->status());
    before.push_back(*tensor);
  }
  auto body = [&](DeviceLoop& loop,
                  const std::vector<Tensor>& state) -> absl::StatusOr<std::vector<Tensor>> {
    for (size_t i = 0; i < carried.size(); ++i) *carried[i].second = state[i];
    RETURN_IF_ERROR(step(loop));
    std::vector<Tensor> next;
    for (size_t i = 0; i < carried.size(); ++i) {
      const Tensor& t = *carried[i].second;
      if (t.defined()) RETURN_IF_ERROR(t.status());
      if (!t.defined() || t.shape() != state[i].shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "carried tensor '", carried[i].first, "' enters the loop as ",
            state[i].shape().ToString(), " but the step leaves it ",
            t.defined() ? t.shape().ToString() : "without a value"));
      }
      next.push_back(t);
    }
    return next;
  };
  absl::StatusOr<std::vector<Tensor>> out = While(trip_count, before, body);
  for (size_t i = 0; i < carried.size(); ++i) *carried[i].second = before[i];
  RETURN_IF_ERROR(out.status());
  for (size_t i = 0; i < carried.size(); ++i) *carried[i].second = (*out)[i];
  return absl::OkStatus();
}

}  // namespace kiln::client
