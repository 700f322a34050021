#include "client/lazy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/lower.h"
#include "client/trace_key.h"
#include "compiler/ir/fingerprint.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

using Clock = std::chrono::steady_clock;

// Results up to this size come back inline with the execution.
constexpr int64_t kInlineBytes = 256;
constexpr size_t kStepHistory = 4096;

std::string CallSite(const std::source_location& where) {
  return absl::StrCat(where.file_name(), ":", where.line());
}

// Errors that may pass (a cancelled call, a server out of reach): a program
// that failed with one may run again.
bool MayPass(const absl::Status& error) {
  const absl::StatusCode code = error.code();
  return code == absl::StatusCode::kCancelled || code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kDeadlineExceeded;
}

// A program must return one value per output of the trace.
absl::Status CheckOutputCount(size_t returned, size_t outputs) {
  if (returned == outputs) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("program returned ", returned, " values for ", outputs, " outputs"));
}

thread_local int64_t thread_activity = 0;

}  // namespace

int64_t LazyContext::ThreadActivity() { return thread_activity; }
void LazyContext::NoteActivity() { ++thread_activity; }

std::shared_ptr<LazyContext> LazyContext::Create(Client* client) {
  return std::shared_ptr<LazyContext>(new LazyContext(client));
}

Tensor LazyContext::Record(std::shared_ptr<Node> node) {
  // Ops copy the context from their first operand; only other nodes need
  // the (slower) shared_from_this.
  if (node->context.get() != this) node->context = shared_from_this();
  ++metrics_.traced_ops;
  node->stops_gradients = !record_gradients_;
  Tensor t(std::move(node));
  if (!t.status().ok()) return t;
  if (!loop_bodies_.empty()) {
    loop_bodies_.back().nodes.insert(t.node().get());
    loop_bodies_.back().alive.push_back(t.node());
    return t;
  }
  if (eager_) {
    // Eager: run the op now. An error becomes the tensor's status. (Sent
    // without waiting, as a pipelined barrier is, an op costs several
    // times more: the hand-off to the dispatch thread and back.)
    absl::Status st = RealizeNodes(absl::MakeConstSpan(&t, 1), std::source_location::current(),
                                   nullptr, /*dispatch=*/false);
    if (!st.ok()) t.node()->status = st;
    if (st.ok() && record_gradients_ && !t.node()->operands.empty()) {
      t.node()->keeps_graph = true;
      eager_graphs_.push_back(t.node());
      if (eager_graphs_.size() >= prune_eager_graphs_at_) {
        std::erase_if(eager_graphs_, [](const std::weak_ptr<Node>& w) { return w.expired(); });
        prune_eager_graphs_at_ = std::max<size_t>(1024, 2 * eager_graphs_.size());
      }
    }
    return t;
  }
  pending_.push_back(t.node());
  if (pending_.size() >= prune_pending_at_) {
    // Dead entries would keep their nodes' memory (the weak references hold
    // the allocation): drop them whenever the list doubles.
    std::erase_if(pending_, [](const std::weak_ptr<Node>& w) { return w.expired(); });
    prune_pending_at_ = std::max<size_t>(1024, 2 * pending_.size());
  }
  return t;
}

void LazyContext::BeginLoopBody() { loop_bodies_.emplace_back(); }

void LazyContext::JoinLoopBody(std::shared_ptr<Node> node) {
  if (loop_bodies_.empty()) return;
  loop_bodies_.back().nodes.insert(node.get());
  loop_bodies_.back().alive.push_back(std::move(node));
}

LazyContext::LoopBodyNodes LazyContext::EndLoopBody() {
  LoopBodyNodes body = std::move(loop_bodies_.back());
  loop_bodies_.pop_back();
  return body;
}

Tensor LazyContext::FromLiteral(const ir::Literal& value, const std::string& device) {
  if (Inlinable(value)) return FromLiteral(ir::Literal(value), device);
  return Upload(value, device);
}

Tensor LazyContext::FromLiteral(ir::Literal&& value, const std::string& device) {
  if (!Inlinable(value)) return Upload(value, device);
  auto node = std::make_shared<Node>();
  node->shape = value.shape();
  node->device = device;
  node->context = shared_from_this();
  const std::vector<DeviceDescription>& devices = client_->devices();
  if (std::none_of(devices.begin(), devices.end(),
                   [&](const DeviceDescription& d) { return d.name == device; })) {
    std::vector<std::string> names;
    for (const DeviceDescription& d : devices) names.push_back(d.name);
    node->status = absl::NotFoundError(absl::StrCat(
        "unknown device '", device, "' (the server has ", absl::StrJoin(names, ", "), ")"));
  } else {
    node->host_value = std::move(value);
  }
  return Tensor(std::move(node));
}

bool LazyContext::Inlinable(const ir::Literal& value) const {
  return client_->protocol_version() >= 4 && value.shape().IsArray() &&
         value.shape().ByteSize() <= kInlineArgumentMaxBytes;
}

absl::Status LazyContext::UploadHostValue(Node& node) {
  if (!node.host_only()) return absl::OkStatus();
  ASSIGN_OR_RETURN(node.data, client_->TransferToDevice(*node.host_value, node.device));
  metrics_.bytes_to_device += node.shape.ByteSize();
  return absl::OkStatus();
}

Tensor LazyContext::Upload(const ir::Literal& value, const std::string& device) {
  auto node = std::make_shared<Node>();
  node->shape = value.shape();
  node->device = device;
  node->context = shared_from_this();
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> buffer = client_->TransferToDevice(value, device);
  if (!buffer.ok()) {
    node->status = buffer.status();
  } else {
    node->data = *std::move(buffer);
    metrics_.bytes_to_device += value.shape().ByteSize();
  }
  return Tensor(std::move(node));
}

Tensor LazyContext::FromReplicaLiterals(const std::vector<ir::Literal>& values,
                                        const std::vector<std::string>& devices) {
  auto node = std::make_shared<Node>();
  node->context = shared_from_this();
  if (values.empty() || values.size() != devices.size()) {
    node->status = absl::InvalidArgumentError(absl::StrCat(
        "replicated tensor: ", values.size(), " values for ", devices.size(), " devices"));
    return Tensor(std::move(node));
  }
  node->shape = values[0].shape();
  node->device = devices[0];
  for (size_t r = 0; r < values.size(); ++r) {
    if (values[r].shape() != node->shape) {
      node->status = absl::InvalidArgumentError(absl::StrCat(
          "replicated tensor: replica ", r, " has shape ", values[r].shape().ToString(),
          ", replica 0 ", node->shape.ToString()));
      break;
    }
    absl::StatusOr<std::shared_ptr<DeviceBuffer>> buffer =
        client_->TransferToDevice(values[r], devices[r]);
    if (!buffer.ok()) {
      node->status = buffer.status();
      break;
    }
    metrics_.bytes_to_device += values[r].shape().ByteSize();
    node->replicas.push_back(*std::move(buffer));
  }
  if (node->status.ok()) {
    node->data = node->replicas[0];
  } else {
    node->replicas.clear();
  }
  return Tensor(std::move(node));
}

absl::StatusOr<std::vector<ReplicaArguments>> LazyContext::ReplicaInputs(NodeSpan params) {
  const Node* lead = nullptr;
  for (const auto& p : params) {
    if (p->replicas.size() > 1) {
      lead = p.get();
      break;
    }
  }
  if (lead == nullptr) return std::vector<ReplicaArguments>();
  std::vector<ReplicaArguments> replicas(lead->replicas.size());
  for (size_t r = 0; r < replicas.size(); ++r) replicas[r].device = lead->replicas[r]->device();
  for (size_t i = 0; i < params.size(); ++i) {
    Node& p = *params[i];
    if (p.replicas.empty()) {
      // Read from the lead device only (a learning rate, a constant
      // uploaded once): every replica gets a copy, kept on the node.
      RETURN_IF_ERROR(UploadHostValue(p));
      ASSIGN_OR_RETURN(ir::Literal value, Tensor(params[i]).ReadStorage());
      p.replicas.push_back(p.data);
      for (size_t r = 1; r < replicas.size(); ++r) {
        ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> copy,
                         client_->TransferToDevice(value, replicas[r].device));
        p.replicas.push_back(std::move(copy));
        metrics_.bytes_to_device += value.shape().ByteSize();
      }
      ++metrics_.broadcasts_to_replicas;
    }
    if (p.replicas.size() != replicas.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a program reads values replicated ", p.replicas.size(), " and ", replicas.size(),
          " times"));
    }
    for (size_t r = 0; r < replicas.size(); ++r) {
      if (p.replicas[r]->device() != replicas[r].device) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a program reads replica ", r, " values on ", p.replicas[r]->device(), " and ",
            replicas[r].device));
      }
      replicas[r].args.push_back(p.replicas[r]);
    }
  }
  return replicas;
}

Tensor LazyContext::Constant(const ir::Literal& value, const std::string& device) {
  auto node = std::make_shared<Node>();
  node->op = ir::Opcode::kConstant;
  node->shape = value.shape();
  node->device = device;
  node->attrs.Mutable().literal = value;
  node->context = shared_from_this();
  return Tensor(std::move(node));
}

Tensor LazyContext::RandomNormal(const ir::Shape& shape, double mean, double stddev,
                                 uint64_t seed, const std::string& device) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(mean, stddev);
  ir::Literal value(shape);
  for (int64_t i = 0; i < shape.ElementCount(); ++i) value.SetFromDouble(i, dist(rng));
  return FromLiteral(value, device);
}

Tensor LazyContext::RandomUniform(const ir::Shape& shape, double low, double high,
                                  uint64_t seed, const std::string& device) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  ir::Literal value(shape);
  for (int64_t i = 0; i < shape.ElementCount(); ++i) value.SetFromDouble(i, dist(rng));
  return FromLiteral(value, device);
}

namespace {

// Whether parameter `p` could be donated as far as it alone says: no
// handle, one replica, and a buffer (or host value) nothing else holds.
bool MayDonate(const Node& p) {
  if (p.handles.load(std::memory_order_relaxed) != 0 || !p.replicas.empty()) return false;
  // A value sent along that nothing can read again need not be kept.
  return p.host_only() || (p.data != nullptr && p.data.use_count() == 1 && !p.data->donated());
}

// The arguments nothing can read after this execution, which the server
// may therefore reuse for its results (donation). After the execution only
// its outputs drop their operands; every other node of the trace lives on
// if anything still refers to it, and could be computed again, reading its
// arguments. So a trace donates only when each of its nodes between the
// outputs and the arguments is referred to by the trace alone (no Tensor
// handle, no reference from outside the trace); then a parameter is donated
// when it has no handle, the trace's references and the one in `params` are
// all there are, and no other node shares its buffer. A trace with a device
// loop or a conditional donates nothing (their specs hold references of
// their own).
std::vector<int> DonatableParams(NodeSpan outputs, NodeSpan params) {
  // Most steps read only values a handle still holds: then there is no
  // need to walk the trace.
  if (std::none_of(params.begin(), params.end(),
                   [](const std::shared_ptr<Node>& p) { return MayDonate(*p); })) {
    return {};
  }
  absl::flat_hash_map<const Node*, long> edges;  // references from the trace
  absl::flat_hash_set<const Node*> seen, output_set;
  std::vector<const Node*> inner;  // unrealized nodes that are not outputs
  std::vector<const Node*> stack;
  for (const auto& o : outputs) {
    output_set.insert(o.get());
    stack.push_back(o.get());
  }
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->loop != nullptr || node->cond != nullptr) return {};
    if (!output_set.contains(node)) inner.push_back(node);
    for (const auto& operand : node->operands) {
      ++edges[operand.get()];
      if (!operand->realized()) stack.push_back(operand.get());
    }
  }
  for (const Node* node : inner) {
    if (node->handles.load(std::memory_order_relaxed) != 0) return {};
  }
  // Each inner node's references must all be the trace's own edges (its
  // use count is read through one of them).
  for (const Node* node : seen) {
    for (const auto& operand : node->operands) {
      if (operand->realized() || output_set.contains(operand.get())) continue;
      if (operand.use_count() != edges[operand.get()]) return {};
    }
  }
  std::vector<int> donate;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::shared_ptr<Node>& p = params[i];
    if (!MayDonate(*p)) continue;
    auto it = edges.find(p.get());
    if (it != edges.end() && p.use_count() == it->second + 1) donate.push_back(static_cast<int>(i));
  }
  return donate;
}

// A replayed program's arguments that it may donate: those that MayDonate
// allows and that nothing holds but `params` (the replay's own list).
std::vector<int> UnsharedParams(NodeSpan params) {
  std::vector<int> donate;
  for (size_t i = 0; i < params.size(); ++i) {
    if (MayDonate(*params[i]) && params[i].use_count() == 1) donate.push_back(static_cast<int>(i));
  }
  return donate;
}

}  // namespace

absl::Status LazyContext::Barrier(const std::string& device, std::source_location where) {
  // The step's eager values are computed: their graphs can go now.
  std::erase_if(eager_graphs_, [&device](const std::weak_ptr<Node>& weak) {
    std::shared_ptr<Node> node = weak.lock();
    if (node == nullptr) return true;
    if (node->device != device) return false;
    node->keeps_graph = false;
    node->operands.clear();
    return true;
  });
  std::vector<Tensor> live;
  std::vector<std::weak_ptr<Node>> still_pending;
  for (const auto& weak : pending_) {
    std::shared_ptr<Node> node = weak.lock();
    if (node == nullptr || node->realized()) continue;
    // Only other nodes refer to it: it is computed wherever it is read.
    if (node->handles.load(std::memory_order_relaxed) == 0) {
      still_pending.push_back(weak);
      continue;
    }
    if (node->device != device) {
      still_pending.push_back(weak);
      continue;
    }
    live.push_back(Tensor(std::move(node)));
  }
  pending_ = std::move(still_pending);
  ++metrics_.barriers;
  if (live.empty()) return absl::OkStatus();
  return RealizeNodes(live, where, nullptr, pipelined_);
}

absl::Status LazyContext::Realize(const std::vector<Tensor>& tensors, std::source_location where,
                                  CallCanceller* cancel) {
  return RealizeNodes(tensors, where, cancel, /*dispatch=*/false);
}

absl::Status LazyContext::Sync() {
  absl::Status first;
  while (!in_flight_.empty()) first.Update(SettleOldest());
  return first;
}

absl::Status LazyContext::SyncFor(const Node* node) {
  const auto computes = [node](const InFlight& flight) {
    return std::any_of(flight.outputs.begin(), flight.outputs.end(),
                       [node](const std::weak_ptr<Node>& w) { return w.lock().get() == node; });
  };
  const auto last = std::find_if(in_flight_.rbegin(), in_flight_.rend(), computes);
  if (last == in_flight_.rend()) return Sync();
  absl::Status first;
  for (size_t n = in_flight_.rend() - last; n > 0; --n) first.Update(SettleOldest());
  return first;
}

void LazyContext::SupersedeInFlight() {
  for (InFlight& flight : in_flight_) {
    if (flight.superseded) continue;
    flight.superseded = true;
    for (const std::weak_ptr<Node>& weak : flight.outputs) {
      if (std::shared_ptr<Node> node = weak.lock()) node->operands.clear();
    }
  }
}

absl::Status LazyContext::SettleOldest() {
  if (in_flight_.empty()) return absl::OkStatus();
  InFlight flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  const auto wait_start = Clock::now();
  absl::StatusOr<ExecuteResult> executed = flight.pending->Wait();
  metrics_.pipeline_wait_seconds +=
      std::chrono::duration<double>(Clock::now() - wait_start).count();
  RecordStep(flight.pending->round_trip_seconds());
  std::vector<std::shared_ptr<Node>> outputs, params;
  for (const auto& weak : flight.outputs) outputs.push_back(weak.lock());
  for (const auto& weak : flight.params) params.push_back(weak.lock());
  if (executed.ok()) {
    if (absl::Status count = CheckOutputCount(executed->outputs.size(), outputs.size());
        !count.ok()) {
      executed = count;
    }
  }
  if (!executed.ok()) {
    // As a synchronous execution's: an error that may pass leaves the
    // outputs to be computed again from their graphs, unless the step gave
    // up arguments they read, or a later execution was sent after it (its
    // graph is gone, and that execution may have taken the outputs).
    const bool retry =
        MayPass(executed.status()) && !flight.donated && !flight.superseded && !flight.replayed;
    for (const auto& node : outputs) {
      if (node == nullptr) continue;
      if (node->named_in_advance) {
        node->named_in_advance = false;
        node->data = nullptr;
      }
      if (retry) {
        node->dispatched = false;
      } else {
        node->status = executed.status();
        node->operands.clear();
      }
    }
    return executed.status();
  }
  ++metrics_.executions;
  for (const auto& node : outputs) {
    if (node != nullptr) node->named_in_advance = false;
  }
  Settle(*executed, outputs, params, {});
  return absl::OkStatus();
}

void LazyContext::RecordStep(double seconds) {
  metrics_.step_seconds.push_back(seconds);
  if (metrics_.step_seconds.size() > kStepHistory) metrics_.step_seconds.pop_front();
}

void LazyContext::Settle(ExecuteResult& result, NodeSpan outputs, NodeSpan params,
                         const std::vector<ExecuteResult>& replica_results) {
  // Values sent along are on the device now (unless donated).
  for (size_t i = 0; i < params.size() && i < result.inline_argument_buffers.size(); ++i) {
    if (params[i] == nullptr || !params[i]->host_only()) continue;
    metrics_.bytes_to_device += params[i]->shape.ByteSize();
    if (result.inline_argument_buffers[i] != nullptr) {
      params[i]->data = std::move(result.inline_argument_buffers[i]);
    }
  }
  if (result.profile.has_value()) {
    metrics_.last_profile = result.profile;
    metrics_.simulated_seconds += result.profile->simulated_seconds();
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] == nullptr) continue;
    Node& node = *outputs[i];
    node.data = result.outputs[i];
    for (const ExecuteResult& replica : replica_results) {
      node.replicas.push_back(replica.outputs[i]);
    }
    if (result.inline_values[i].has_value()) {
      metrics_.bytes_from_device += node.shape.ByteSize();
      node.host_value = std::move(result.inline_values[i]);
    }
    // The value exists now: the graph that produced it can go (in eager
    // mode at the next barrier, so that gradients can walk it, unless
    // gradients are not recorded).
    if (!eager_ || !record_gradients_) node.operands.clear();
  }
}

absl::StatusOr<bool> LazyContext::PrepareToRun(bool dispatch, CallCanceller* cancel) {
  // What is in flight may be what the program reads: a program sent in
  // the server's order may name it (keeping fewer than kPipelineDepth in
  // flight before it), anything else waits for it.
  const bool named_outputs =
      dispatch && cancel == nullptr && client_->protocol_version() >= 6;
  if (!named_outputs) {
    RETURN_IF_ERROR(Sync());
  } else {
    while (in_flight_.size() >= kPipelineDepth) RETURN_IF_ERROR(SettleOldest());
  }
  return named_outputs;
}

absl::Status LazyContext::RealizeNodes(absl::Span<const Tensor> tensors,
                                       std::source_location where, CallCanceller* cancel,
                                       bool dispatch, RealizedProgram* program) {
  ASSIGN_OR_RETURN(const bool named_outputs, PrepareToRun(dispatch, cancel));
  NodeList outputs;
  std::string device;
  for (const Tensor& t : tensors) {
    RETURN_IF_ERROR(t.status());
    if (t.node()->realized()) continue;
    if (t.node()->op == ir::Opcode::kConstant && t.node()->operands.empty() && tensors.size() == 1) {
      // A lone constant: upload it.
      Tensor up = FromLiteral(t.node()->attrs->literal, t.device());
      RETURN_IF_ERROR(up.status());
      t.node()->data = up.node()->data;
      t.node()->host_value = t.node()->attrs->literal;
      continue;
    }
    if (!device.empty() && t.device() != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot realize tensors on ", device, " and ", t.device(), " in one program"));
    }
    device = t.device();
    outputs.push_back(t.node());
  }
  if (outputs.empty()) return absl::OkStatus();
  // A device loop's or a conditional's other results come out of the same
  // run: realize those still held with the ones asked for, or reading them
  // later would run it again (a loop would find its infeed drained).
  for (size_t i = 0, n = outputs.size(); i < n; ++i) {
    const Node& out = *outputs[i];
    if (out.op != ir::Opcode::kGetTupleElement || out.operands.size() != 1 ||
        (out.operands[0]->loop == nullptr && out.operands[0]->cond == nullptr)) {
      continue;
    }
    const Node& producer = *out.operands[0];
    for (const std::weak_ptr<Node>& weak :
         producer.loop != nullptr ? producer.loop->outputs : producer.cond->outputs) {
      std::shared_ptr<Node> sibling = weak.lock();
      if (sibling == nullptr || sibling->realized() || !sibling->status.ok() ||
          std::find(outputs.begin(), outputs.end(), sibling) != outputs.end()) {
        continue;
      }
      outputs.push_back(std::move(sibling));
    }
  }
  // The cheap step: a trace whose structure ran before takes its program
  // by the trace's key, without lowering, printing or fingerprinting.
  const auto lower_start = Clock::now();
  // The device's length first, so that no device name runs into the bytes.
  RETURN_IF_ERROR(KeyOfTrace(outputs, absl::StrCat(device.size(), ":", device), trace_key_));
  // Valid until this context keys another trace: nothing below realizes on
  // it before the key is stored (Lower and Compile do not).
  const std::string& structure = trace_key_.bytes;
  // The context keeps the key's bytes, not its nodes.
  NodeList params = std::move(trace_key_.params);
  trace_key_.params.clear();
  std::shared_ptr<Executable> exe;
  // Where the key found the program, the execution's time starts where the
  // keying's ends: one clock read fewer per step (an eager op's is 40 ns).
  Clock::time_point keyed_at;
  if (auto known = by_structure_.find(structure); known != by_structure_.end()) {
    exe = known->second;
    ++metrics_.cached_compiles;
    keyed_at = Clock::now();
    metrics_.lowering_seconds += std::chrono::duration<double>(keyed_at - lower_start).count();
  } else {
    ASSIGN_OR_RETURN(Lowered lowered, Lower(outputs));
    ++metrics_.lowerings;
    const std::string fingerprint = ir::Fingerprint(*lowered.module);
    metrics_.lowering_seconds +=
        std::chrono::duration<double>(Clock::now() - lower_start).count();
    const std::string site = CallSite(where);
    const std::string key = absl::StrCat(fingerprint, "@", device);
    auto it = executables_.find(key);
    if (it != executables_.end()) {
      exe = it->second;
      ++metrics_.cached_compiles;
    } else {
      GraphSummary summary;
      summary.fingerprint = fingerprint;
      for (const auto& p : lowered.params) summary.inputs.push_back(p->shape.ToString());
      for (const auto& instr : lowered.module->entry()->instructions()) {
        if (instr->opcode() == ir::Opcode::kParameter) continue;
        summary.ops.push_back(absl::StrCat(ir::OpcodeName(instr->opcode()), " ",
                                           instr->shape().ToString()));
      }
      auto previous = last_graph_at_.find(site);
      if (previous != last_graph_at_.end() && previous->second.fingerprint != fingerprint) {
        std::string why = absl::StrCat(site, ": ", Explain(previous->second, summary));
        explanations_.push_back(why);
        if (std::getenv("KILN_EXPLAIN_RECOMPILES") != nullptr) {
          std::cerr << "kiln: recompiling at " << why << "\n";
        }
      }
      last_graph_at_[site] = std::move(summary);
      const auto compile_start = Clock::now();
      ASSIGN_OR_RETURN(exe, client_->Compile(*lowered.module, device));
      metrics_.compile_call_seconds +=
          std::chrono::duration<double>(Clock::now() - compile_start).count();
      if (exe->cache_hit()) {
        ++metrics_.cached_compiles;
      } else {
        ++metrics_.uncached_compiles;
        metrics_.compile_seconds += exe->compile_micros() * 1e-6;
      }
      executables_[key] = exe;
    }
    // The key walks the trace as Lower does; the parameters they find agree
    // (a trace whose do not is not looked up by its key).
    if (std::equal(params.begin(), params.end(), lowered.params.begin(), lowered.params.end())) {
      by_structure_[structure] = exe;
    }
    params.assign(std::make_move_iterator(lowered.params.begin()),
                  std::make_move_iterator(lowered.params.end()));
  }
  RETURN_IF_ERROR(RunProgram(exe, params, outputs, cancel, dispatch, named_outputs, keyed_at,
                             /*replay=*/false));
  if (program != nullptr) {
    program->executable = std::move(exe);
    program->params = std::move(params);
    program->outputs = std::move(outputs);
  }
  return absl::OkStatus();
}

absl::Status LazyContext::Replay(const std::shared_ptr<Executable>& exe, NodeSpan params,
                                 NodeSpan outputs) {
  ++metrics_.replays;
  absl::StatusOr<bool> named_outputs = PrepareToRun(pipelined_, nullptr);
  absl::Status run = named_outputs.status();
  if (run.ok()) {
    run = RunProgram(exe, params, outputs, nullptr, pipelined_, *named_outputs,
                     Clock::time_point(), /*replay=*/true);
  }
  // The outputs have no graph: whatever kept them from being computed
  // stays on them.
  if (!run.ok()) {
    for (const auto& node : outputs) {
      if (!node->realized() && node->status.ok()) node->status = run;
    }
  }
  return run;
}

absl::Status LazyContext::RunProgram(const std::shared_ptr<Executable>& exe, NodeSpan params,
                                     NodeSpan outputs, CallCanceller* cancel, bool dispatch,
                                     bool named_outputs, Clock::time_point keyed_at,
                                     bool replay) {
  NoteActivity();
  for (const auto& p : params) {
    // A value another context sent and has not settled yet (its error, if
    // any, stays on the value).
    if (p->in_flight() && p->context.get() != this) p->context->Sync().IgnoreError();
    // A value whose pipelined execution failed: nothing can compute it.
    if (!p->status.ok()) {
      for (const auto& node : outputs) node->status = p->status;
      return p->status;
    }
  }
  // A replicated program (one reading replicated values) runs
  // synchronously, and not in the server's order: what is in flight
  // settles first (the start of this call left it in flight).
  if (named_outputs && std::any_of(params.begin(), params.end(), [](const std::shared_ptr<Node>& p) {
        return !p->replicas.empty();
      })) {
    RETURN_IF_ERROR(Sync());
  }
  ASSIGN_OR_RETURN(std::vector<ReplicaArguments> replica_args, ReplicaInputs(params));
  ExecuteOptions options;
  // In this process a read is a copy from the device: nothing to save.
  options.inline_result_max_bytes = client_->in_process() ? 0 : kInlineBytes;
  if (named_outputs && replica_args.empty()) SupersedeInFlight();
  if (replica_args.empty()) {
    options.donate = replay ? UnsharedParams(params) : DonatableParams(outputs, params);
  }
  metrics_.donated_arguments += static_cast<int64_t>(options.donate.size());
  options.cancel = cancel;
  std::vector<std::shared_ptr<DeviceBuffer>> args;
  if (replica_args.empty()) {
    args.reserve(params.size());
    // No list of values when none goes as one (an eager op's arguments).
    const bool values = std::any_of(params.begin(), params.end(),
                                    [](const std::shared_ptr<Node>& p) { return p->host_only(); });
    if (values) options.inline_values.reserve(params.size());
    for (const auto& p : params) {
      args.push_back(p->data);
      if (values) options.inline_values.push_back(p->host_only() ? &*p->host_value : nullptr);
    }
  }
  if (dispatch && replica_args.empty() && cancel == nullptr) {
    ASSIGN_OR_RETURN(std::shared_ptr<PendingExecution> pending,
                     client_->ExecuteAsync(exe, args, options));
    const std::vector<std::shared_ptr<DeviceBuffer>> named = pending->TakeOutputs();
    if (!named.empty()) RETURN_IF_ERROR(CheckOutputCount(named.size(), outputs.size()));
    InFlight flight{std::move(pending), {}, {}, !options.donate.empty(), false, replay};
    for (size_t i = 0; i < outputs.size(); ++i) {
      Node& node = *outputs[i];
      // A leaf of later traces from now on; its graph stays until the
      // reply settles it, in case the call fails in a way worth retrying
      // (or until a later execution is sent, see SupersedeInFlight).
      node.dispatched = true;
      if (!named.empty()) {
        node.data = named[i];
        node.named_in_advance = true;
      }
      flight.outputs.push_back(outputs[i]);
    }
    for (const auto& p : params) flight.params.push_back(p);
    in_flight_.push_back(std::move(flight));
    ++metrics_.pipelined_executions;
    return absl::OkStatus();
  }
  const auto exec_start = keyed_at != Clock::time_point() ? keyed_at : Clock::now();
  ExecuteResult result;
  std::vector<ExecuteResult> replica_results;
  // A program that failed fails the same way again: its outputs keep the
  // error, so reading them later does not run it a second time. Errors that
  // may pass (a cancelled call, a server out of reach) are not kept.
  auto keep_error = [&](const absl::Status& error) {
    // A replayed program's outputs have no graph to compute them from.
    if (!MayPass(error) || replay) {
      for (const auto& node : outputs) node->status = error;
    }
    return error;
  };
  if (replica_args.empty()) {
    absl::StatusOr<ExecuteResult> executed = client_->Execute(*exe, args, options);
    if (!executed.ok() && !options.donate.empty()) {
      // The server took the donated arguments before the program failed
      // (Client::Execute marks them): no rerun of this trace can read them,
      // so its outputs keep the error whatever it was.
      const absl::Status failed = executed.status();
      for (const auto& node : outputs) node->status = failed;
      return failed;
    }
    if (!executed.ok()) return keep_error(executed.status());
    result = *std::move(executed);
  } else {
    absl::StatusOr<ReplicatedResult> replicated =
        client_->ExecuteReplicated(*exe, replica_args, options);
    if (!replicated.ok()) return keep_error(replicated.status());
    replica_results = std::move(replicated->replicas);
    result = replica_results[0];
    result.profile = replicated->profile;
    ++metrics_.replicated_executions;
  }
  RecordStep(std::chrono::duration<double>(Clock::now() - exec_start).count());
  ++metrics_.executions;
  RETURN_IF_ERROR(CheckOutputCount(result.outputs.size(), outputs.size()));
  Settle(result, outputs, params, replica_results);
  return absl::OkStatus();
}

std::string LazyContext::Explain(const GraphSummary& before, const GraphSummary& after) const {
  std::vector<std::string> reasons;
  if (before.inputs.size() != after.inputs.size()) {
    reasons.push_back(absl::StrCat("number of inputs ", before.inputs.size(), " -> ",
                                   after.inputs.size()));
  }
  for (size_t i = 0; i < std::min(before.inputs.size(), after.inputs.size()); ++i) {
    if (before.inputs[i] != after.inputs[i]) {
      reasons.push_back(absl::StrCat("input ", i, " shape ", before.inputs[i], " -> ",
                                     after.inputs[i]));
    }
  }
  if (before.ops.size() != after.ops.size()) {
    reasons.push_back(absl::StrCat("number of ops ", before.ops.size(), " -> ", after.ops.size()));
  }
  int shown = 0;
  for (size_t i = 0; i < std::min(before.ops.size(), after.ops.size()) && shown < 3; ++i) {
    if (before.ops[i] == after.ops[i]) continue;
    const std::string op_before = before.ops[i].substr(0, before.ops[i].find(' '));
    const std::string op_after = after.ops[i].substr(0, after.ops[i].find(' '));
    if (op_before != op_after) {
      reasons.push_back(absl::StrCat("op ", i, " changed from ", op_before, " to ", op_after));
    } else {
      reasons.push_back(absl::StrCat("op ", i, " ", op_before, " shape ",
                                     before.ops[i].substr(op_before.size() + 1), " -> ",
                                     after.ops[i].substr(op_after.size() + 1)));
    }
    ++shown;
  }
  if (reasons.empty()) reasons.push_back("attributes or constants changed");
  // Input shape changes explain the op shape changes that follow from them:
  // keep the list short.
  if (reasons.size() > 4) reasons.resize(4);
  return absl::StrJoin(reasons, "; ");
}

std::string LazyContext::Report() const {
  std::string out = "Kiln lazy tensor metrics\n";
  absl::StrAppendFormat(&out, "  traced ops           %lld\n", (long long)metrics_.traced_ops);
  absl::StrAppendFormat(&out, "  barriers             %lld\n", (long long)metrics_.barriers);
  absl::StrAppendFormat(&out, "  executions           %lld\n", (long long)metrics_.executions);
  absl::StrAppendFormat(&out, "  uncached compiles    %lld (%.3f s compiling on the server)\n",
                        (long long)metrics_.uncached_compiles, metrics_.compile_seconds);
  absl::StrAppendFormat(&out, "  cached compiles      %lld\n", (long long)metrics_.cached_compiles);
  absl::StrAppendFormat(&out, "  compile calls        %.3f s round trip in all\n",
                        metrics_.compile_call_seconds);
  absl::StrAppendFormat(&out, "  bytes to device      %lld\n", (long long)metrics_.bytes_to_device);
  absl::StrAppendFormat(&out, "  bytes from device    %lld (inline)\n",
                        (long long)metrics_.bytes_from_device);
  absl::StrAppendFormat(&out, "  lowering time        %.3f s (%d traces lowered, the rest keyed)\n",
                        metrics_.lowering_seconds, metrics_.lowerings);
  if (metrics_.replicated_executions > 0) {
    absl::StrAppendFormat(&out, "  replicated executions %lld (%lld values copied to replicas)\n",
                          (long long)metrics_.replicated_executions,
                          (long long)metrics_.broadcasts_to_replicas);
  }
  if (metrics_.last_profile.has_value()) {
    absl::StrAppendFormat(&out, "  simulated tpu time   %.3f ms in all, %.3f ms the last step\n",
                          metrics_.simulated_seconds * 1e3,
                          metrics_.last_profile->simulated_seconds() * 1e3);
  }
  if (metrics_.pipelined_executions > 0) {
    absl::StrAppendFormat(&out, "  pipelined executions %lld (%.3f s waiting for the device)\n",
                          (long long)metrics_.pipelined_executions,
                          metrics_.pipeline_wait_seconds);
  }
  if (metrics_.replays > 0) {
    absl::StrAppendFormat(&out, "  replayed executions  %lld (compiled functions, not traced)\n",
                          (long long)metrics_.replays);
  }
  if (!metrics_.step_seconds.empty()) {
    std::vector<double> s(metrics_.step_seconds.begin(), metrics_.step_seconds.end());
    std::sort(s.begin(), s.end());
    auto pct = [&](double q) { return s[std::min(s.size() - 1, size_t(q * (s.size() - 1) + 0.5))]; };
    absl::StrAppendFormat(&out, "  execute round trip   p50 %.3f ms  p90 %.3f ms  p99 %.3f ms (%zu recent)\n",
                          pct(0.5) * 1e3, pct(0.9) * 1e3, pct(0.99) * 1e3, s.size());
  }
  if (!explanations_.empty()) {
    out += "  recompiles:\n";
    for (const auto& e : explanations_) absl::StrAppend(&out, "    ", e, "\n");
  }
  return out;
}

absl::StatusOr<ir::Literal> Tensor::ToHost(std::source_location where) const {
  ASSIGN_OR_RETURN(ir::Literal stored, ReadStorage(where));
  if (!IsReducedPrecision()) return stored;
  // bf16 to f32 is exact.
  ir::Literal value(ir::Shape(ir::ElementType::kF32, stored.shape().dims()));
  for (int64_t i = 0; i < stored.element_count(); ++i) value.SetFromDouble(i, stored.GetAsDouble(i));
  return value;
}

absl::StatusOr<ir::Literal> Tensor::ReadStorage(std::source_location where) const {
  // The executions before this value's may fail without it: their errors
  // stay on their own tensors; this one's is its status.
  if (node_ != nullptr && node_->in_flight()) context()->SyncFor(node_.get()).IgnoreError();
  RETURN_IF_ERROR(status());
  LazyContext::NoteActivity();
  if (!node_->realized()) RETURN_IF_ERROR(context()->Realize({*this}, where));
  if (node_->host_value.has_value()) return *node_->host_value;
  ASSIGN_OR_RETURN(ir::Literal value, context()->client()->TransferFromDevice(*node_->data));
  node_->host_value = value;
  return value;
}

absl::StatusOr<double> Tensor::Item(std::source_location where) const {
  RETURN_IF_ERROR(status());
  if (shape().ElementCount() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Item() needs a one-element tensor, not ", shape().ToString()));
  }
  ASSIGN_OR_RETURN(ir::Literal value, ToHost(where));
  return value.GetAsDouble(0);
}

absl::StatusOr<Tensor> Tensor::ToDevice(const std::string& device,
                                        std::source_location where) const {
  ASSIGN_OR_RETURN(ir::Literal value, ReadStorage(where));
  Tensor copy = context()->FromLiteral(value, device);
  RETURN_IF_ERROR(copy.status());
  copy.node()->reduced_precision = IsReducedPrecision();
  return copy;
}

absl::StatusOr<v1::ExecutionProfileProto> LazyContext::Estimate(
    const std::vector<Tensor>& tensors, int replicas) {
  if (tensors.empty()) return absl::InvalidArgumentError("nothing to price");
  NoteActivity();
  std::vector<std::shared_ptr<Node>> outputs;
  for (const Tensor& t : tensors) {
    if (t.node() == nullptr) return absl::InvalidArgumentError("cannot price an empty tensor");
    if (t.node()->device != tensors[0].node()->device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot price tensors of two devices together (", tensors[0].node()->device, " and ",
          t.node()->device, ")"));
    }
    outputs.push_back(t.node());
  }
  ASSIGN_OR_RETURN(Lowered lowered, Lower(outputs));
  return client_->Estimate(*lowered.module, tensors[0].node()->device, replicas);
}

}  // namespace kiln::client
