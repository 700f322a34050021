// Service's executions: Execute through messages, ExecuteDirect in
// process, and what both share.
#include "server/service.h"

#include <algorithm>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "compiler/ir/proto_convert.h"
#include "proto/protocol.h"
#include "runtime/replicated.h"

namespace kiln::server {
namespace {

// Flattens a result depth-first into its array leaves (tokens dropped).
template <typename Buffers>  // std::vector or absl::InlinedVector of BufferPtr
void Flatten(const runtime::BufferPtr& buffer, Buffers* out) {
  if (buffer->shape().IsTuple()) {
    for (int i = 0; i < buffer->tuple_size(); ++i) Flatten(buffer->tuple_element(i), out);
  } else if (buffer->shape().IsArray()) {
    out->push_back(buffer);
  }
}

// An execution's argument `i` lives on `runs_on` and has the shape the
// program takes; `where` names the replica of a replicated execution.
absl::Status CheckArgument(absl::string_view where, size_t i, const runtime::Device* device,
                           const runtime::Buffer& buffer, const runtime::Device& runs_on,
                           const ir::Shape& param) {
  if (device != &runs_on) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "argument ", i, " lives on ", device == nullptr ? "no device" : device->name(),
        " but the program runs on ", runs_on.name(), "; copy it explicitly"));
  }
  if (buffer.shape() != param) {
    return absl::InvalidArgumentError(absl::StrCat(where, "argument ", i, " has shape ",
                                                   buffer.shape().ToString(),
                                                   ", the program expects ", param.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::ExecuteResponse> Service::Execute(const v1::ExecuteRequest& req,
                                                     const runtime::CancelCheck& cancelled,
                                                     runtime::MemoryCharge* reply_charge) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  absl::StatusOr<v1::ExecuteResponse> resp = ExecuteCounted(session, req, cancelled, reply_charge);
  if (!resp.ok() && req.sequence() != 0) {
    // A sequenced execution's caller gives its donated arguments up
    // whatever happens (protocol 6): those it did not take go now. (An
    // unsequenced one refused before it took them leaves them alone.)
    session->Drop(protocol::DonatedHandles(req));
  }
  return resp;
}

absl::StatusOr<v1::ExecuteResponse> Service::ExecuteCounted(
    const std::shared_ptr<Session>& session, const v1::ExecuteRequest& req,
    const runtime::CancelCheck& cancelled, runtime::MemoryCharge* reply_charge) {
  // Counted from here: a sequenced execution waiting for its turn is one.
  absl::StatusOr<Session::Running> running = session->BeginExecution();
  if (req.sequence() == 0) {
    RETURN_IF_ERROR(running.status());
    return ExecuteIn(session, req, cancelled, reply_charge, nullptr);
  }
  absl::Status before_turn = running.status();
  if (before_turn.ok() && (req.replicas_size() > 0 || !req.group_id().empty())) {
    before_turn = absl::InvalidArgumentError(
        "a sequenced execution is a single one (no replicas, no group)");
  }
  if (before_turn.ok()) {
    before_turn = session->AwaitTurn(req.sequence(), UntilSessionEnds(session, cancelled),
                                     options_.sequence_patience);
  }
  if (!before_turn.ok()) {
    // Its number passes on when its turn comes: the ones after it need not
    // wait for it.
    session->Abandon(req.sequence(), before_turn);
    return before_turn;
  }
  SequencedOutputs sequenced{req.sequence(), false, {}};
  absl::StatusOr<v1::ExecuteResponse> resp =
      ExecuteIn(session, req, cancelled, reply_charge, &sequenced);
  if (!sequenced.started) {
    session->SkipTurn(req.sequence(), resp.ok() ? absl::InternalError("no outputs registered")
                                                : resp.status());
  } else if (!resp.ok()) {
    session->FailPending(sequenced.handles, resp.status());
  }
  return resp;
}

absl::StatusOr<v1::ExecuteResponse> Service::ExecuteIn(const std::shared_ptr<Session>& session,
                                                       const v1::ExecuteRequest& req,
                                                       const runtime::CancelCheck& cancelled,
                                                       runtime::MemoryCharge* reply_charge,
                                                       SequencedOutputs* sequenced) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(ExecutableEntry exe, session->GetExecutable(req.executable_handle()));
  if (sequenced != nullptr) {
    // Its outputs' handles exist from now on: the next execution may start
    // and wait for them.
    const int outputs =
        static_cast<int>(ir::FlattenedArrays(exe.executable->result_shape()).size());
    sequenced->handles = session->StartSequenced(sequenced->sequence, outputs, exe.device);
    sequenced->started = true;
  }
  // Everything the execution allocates, on every replica, is the session's.
  runtime::AccountScope account(session->memory_account());
  const bool replicated = req.replicas_size() > 0;
  if (replicated && req.argument_handles_size() > 0) {
    return absl::InvalidArgumentError(
        "a replicated execution takes its arguments per replica, not in argument_handles");
  }
  // Every replica's device and argument handles; a single execution is one
  // replica on the executable's device.
  std::vector<std::pair<runtime::Device*, std::vector<std::string>>> plan;
  if (!replicated) {
    plan.push_back({exe.device, {req.argument_handles().begin(), req.argument_handles().end()}});
  }
  for (int r = 0; r < req.replicas_size(); ++r) {
    const v1::ReplicaArguments& replica = req.replicas(r);
    absl::StatusOr<runtime::Device*> device = FindDevice(replica.device());
    if (!device.ok()) return WithContext(device.status(), absl::StrCat("replica ", r));
    if ((*device)->kind() != exe.device->kind()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replica ", r, " is on ", (*device)->name(), " but the program was compiled for ",
          exe.device->kind(), " devices"));
    }
    for (const auto& [other, unused] : plan) {
      if (other == *device) {
        return absl::InvalidArgumentError(
            absl::StrCat("replica ", r, ": ", other->name(), " already runs a replica"));
      }
    }
    plan.push_back({*device, {replica.argument_handles().begin(), replica.argument_handles().end()}});
  }
  const auto& params = exe.executable->parameter_shapes();
  // Arguments that came with the call: decoded and checked before any is
  // allocated.
  if (replicated && req.inline_arguments_size() > 0) {
    return absl::InvalidArgumentError("a replicated execution takes no inline arguments");
  }
  std::vector<std::optional<ir::Literal>> inline_values(params.size());
  runtime::MemoryCharge inline_charge(session->host_account());
  for (int k = 0; k < req.inline_arguments_size(); ++k) {
    const v1::InlineArgument& a = req.inline_arguments(k);
    const int index = a.index();
    if (index < 0 || index >= static_cast<int>(params.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("inline argument ", k, ": index ", index, " out of range"));
    }
    if (inline_values[index].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("argument ", index, " sent inline twice"));
    }
    if (index < req.argument_handles_size() && !req.argument_handles(index).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", index, " has both a handle and an inline value"));
    }
    // Held on the host until it is on the device.
    RETURN_IF_ERROR(inline_charge.Grow(a.value().ByteSizeLong(),
                                       absl::StrCat("inline argument ", index)));
    absl::StatusOr<ir::Literal> value = ir::LiteralFromProto(a.value());
    if (!value.ok()) return WithContext(value.status(), absl::StrCat("inline argument ", index));
    if (value->shape() != params[index]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inline argument ", index, " has shape ", value->shape().ToString(),
          ", the program expects ", params[index].ToString()));
    }
    inline_values[index] = *std::move(value);
  }
  std::vector<runtime::BufferPtr> inline_buffers(params.size());
  std::vector<runtime::ReplicaRun> runs(plan.size());
  std::vector<runtime::ExecutionProfile> profiles(plan.size());
  std::vector<std::shared_ptr<FeedQueues>> feeds(plan.size());
  const absl::Duration infeed_timeout = req.infeed_timeout_millis() > 0
                                            ? absl::Milliseconds(req.infeed_timeout_millis())
                                            : options_.infeed_timeout;
  const runtime::CancelCheck until_done = UntilSessionEnds(session, cancelled);
  for (size_t r = 0; r < plan.size(); ++r) {
    const auto& [device, handles] = plan[r];
    const std::string where = replicated ? absl::StrCat("replica ", r, ", ") : "";
    if (handles.size() != params.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "program takes ", params.size(), " arguments, got ", handles.size()));
    }
    runtime::ReplicaRun& run = runs[r];
    run.device = device;
    for (size_t i = 0; i < handles.size(); ++i) {
      if (inline_values[i].has_value()) {
        // Charged to the session (the account scope above).
        absl::StatusOr<runtime::BufferPtr> buffer = device->TransferToDevice(*inline_values[i]);
        if (!buffer.ok()) return WithContext(buffer.status(), absl::StrCat("argument ", i));
        metrics_.Add("bytes_in", params[i].ByteSize());
        // Kept for the reply unless donated (then only the program holds it,
        // and may write over it).
        if (std::find(req.donated_arguments().begin(), req.donated_arguments().end(),
                      static_cast<int>(i)) == req.donated_arguments().end()) {
          inline_buffers[i] = *buffer;
        }
        run.args.push_back(*std::move(buffer));
        continue;
      }
      // An output of an earlier sequenced execution still running is
      // waited for.
      absl::StatusOr<BufferEntry> arg = session->GetBuffer(
          handles[i], until_done, sequenced != nullptr ? sequenced->sequence : 0);
      if (!arg.ok()) return WithContext(arg.status(), absl::StrCat(where, "argument ", i));
      RETURN_IF_ERROR(CheckArgument(where, i, arg->device, *arg->buffer, *device, params[i]));
      run.args.push_back(arg->buffer);
    }
    // Only a program with feed ops reads the session's queues (see
    // ExecutionFailed for what a failure does to them).
    if (exe.executable->uses_feeds()) feeds[r] = session->Feeds(device->name());

    run.options.infeed_timeout = infeed_timeout;
    run.options.outfeed_timeout = infeed_timeout;
    if (feeds[r] != nullptr) {
      run.options.infeed = &feeds[r]->infeed;
      run.options.outfeed = &feeds[r]->outfeed;
    }
    run.options.cancelled = until_done;
    run.options.profile = &profiles[r];
  }
  std::vector<std::string> donated;
  for (int index : req.donated_arguments()) {
    if (index < 0 || index >= static_cast<int>(params.size())) {
      return absl::InvalidArgumentError(absl::StrCat("donated argument ", index, " out of range"));
    }
    // A donated inline value was never registered: the program takes it.
    if (inline_values[index].has_value()) continue;
    for (const auto& [device, handles] : plan) donated.push_back(handles[index]);
  }
  inline_values.clear();  // the buffers hold the values now
  inline_charge.Reset();
  // A group's execution: this server's replicas and the other members'.
  std::shared_ptr<GroupEntry> group;
  runtime::CrossHost cross;
  if (!req.group_id().empty()) {
    if (!replicated) {
      return absl::InvalidArgumentError("an execution in a group lists its replicas");
    }
    ASSIGN_OR_RETURN(group, session->GetGroup(req.group_id()));
    const runtime::HostGroup& hosts = *group->group;
    if (req.group_replicas_size() != hosts.size()) {
      return absl::InvalidArgumentError(absl::StrCat("group ", req.group_id(), " has ",
                                                     hosts.size(), " members, the execution counts replicas of ",
                                                     req.group_replicas_size()));
    }
    int64_t total = 0;
    for (int m = 0; m < hosts.size(); ++m) {
      const int count = req.group_replicas(m);
      if (count < 1 || count > kMaxReplicasPerMember) {
        return absl::InvalidArgumentError(absl::StrCat(
            "member ", m, " of group ", req.group_id(), " would run ", count,
            " replicas (1 to ", kMaxReplicasPerMember, ")"));
      }
      if (m == hosts.rank()) cross.replica_offset = static_cast<int>(total);
      total += count;
    }
    if (req.group_replicas(hosts.rank()) != static_cast<int>(plan.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this server is member ", hosts.rank(), " of group ", req.group_id(), " with ",
          req.group_replicas(hosts.rank()), " replicas, but the execution lists ", plan.size()));
    }
    if (plan[0].first->kind() == "gpu") {
      return absl::UnimplementedError(
          "groups of servers run on cpu and tpu devices; gpu collectives across servers are not "
          "built yet");
    }
    cross.group = group->group.get();
    cross.replica_count = static_cast<int>(total);
    cross.device = plan[0].first;
    // The fingerprint is hex: its first 16 digits name the program.
    uint64_t program = 0;
    for (size_t i = 0; i < exe.fingerprint->size() && i < 16; ++i) {
      program = program * 31 + static_cast<unsigned char>((*exe.fingerprint)[i]);
    }
    cross.program = program;
  }
  // One execution of a group at a time: every member must run the group's
  // executions in the same order. Checked before anything is taken.
  bool holds_group = false;
  absl::Cleanup release_group = [&] {
    if (holds_group) group->run_mu.Unlock();
  };
  if (group != nullptr) {
    if (absl::Status broken = group->group->broken(); !broken.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group ", req.group_id(), " broke in an earlier execution (form a new group): ",
          broken.message()));
    }
    if (!group->run_mu.TryLock()) {
      return absl::AbortedError(absl::StrCat("another execution of group ", req.group_id(),
                                             " is running; run one at a time"));
    }
    holds_group = true;
    cross.execution = group->executions++;
  }
  if (!donated.empty()) {
    if (absl::Status taken = session->TakeBuffers(donated).status(); !taken.ok()) {
      // This member skips an execution the others run: its rounds no
      // longer match theirs.
      if (group != nullptr) group->group->Break(taken).IgnoreError();
      return taken;
    }
  }
  absl::StatusOr<std::vector<runtime::BufferPtr>> results;
  if (group == nullptr) {
    results = runtime::ExecuteReplicated(*exe.executable, runs, options_.collective_timeout);
  } else {
    metrics_.Add("group_executes");
    results =
        runtime::ExecuteReplicated(*exe.executable, runs, options_.collective_timeout, &cross);
    if (!results.ok()) {
      // This member's rounds no longer match the others': the group is
      // done. Say who is gone when the servers lost each other in this
      // execution.
      const bool lost = !group->group->broken().ok();
      group->group->Break(results.status()).IgnoreError();
      if (lost) {
        metrics_.Add("group_failures");
        results = absl::Status(results.status().code(),
                               absl::StrCat(results.status().message(), MissingMembers(*group, req)));
      }
    }
  }
  runs.clear();
  metrics_.Add("executes");
  if (replicated) metrics_.Add("replicated_executes");
  if (!results.ok()) return ExecutionFailed(results.status(), exe, session, feeds, until_done);
  v1::ExecuteResponse resp;
  runtime::MemoryCharge reply(session->host_account());
  // Kept inline values (not donated) become buffers of the session.
  for (const v1::InlineArgument& a : req.inline_arguments()) {
    const runtime::BufferPtr& kept = inline_buffers[a.index()];
    resp.add_inline_argument_handles(kept == nullptr ? std::string()
                                                     : session->AddBuffer({kept, exe.device, nullptr}));
  }
  inline_buffers.clear();
  const bool profiled = exe.executable->has_cost_model();
  for (size_t r = 0; r < plan.size(); ++r) {
    runtime::Device* device = plan[r].first;
    v1::ReplicaOutputs* replica = replicated ? resp.add_replicas() : nullptr;
    if (replica != nullptr) replica->set_device(device->name());
    std::vector<runtime::BufferPtr> leaves;
    Flatten((*results)[r], &leaves);
    if (sequenced != nullptr && leaves.size() != sequenced->handles.size()) {
      return absl::InternalError(absl::StrCat("the program returned ", leaves.size(),
                                              " arrays for ", sequenced->handles.size(),
                                              " outputs of its result shape"));
    }
    for (size_t k = 0; k < leaves.size(); ++k) {
      const runtime::BufferPtr& leaf = leaves[k];
      auto* out = replica != nullptr ? replica->add_outputs() : resp.add_outputs();
      ir::ShapeToProto(leaf->shape(), out->mutable_shape());
      // The reply holds a copy until it is sent: host memory of the
      // session. Past its quota the result stays on the device only. Copied
      // before the buffer is the session's: a sequenced execution waiting
      // for it may take it and write over it at once.
      if (leaf->size_bytes() <= req.inline_result_max_bytes() &&
          reply.Grow(leaf->size_bytes(), "an inline result").ok()) {
        ASSIGN_OR_RETURN(ir::Literal value, device->TransferFromDevice(*leaf));
        ir::LiteralToProto(value, out->mutable_inline_value());
      }
      if (sequenced != nullptr) {
        session->Resolve(sequenced->handles[k], leaf);
        out->set_buffer_handle(sequenced->handles[k]);
      } else {
        out->set_buffer_handle(session->AddBuffer({leaf, device, nullptr}));
      }
    }
    if (profiled) {
      RecordProfile(profiles[r]);
      ProfileToProto(profiles[r], replica != nullptr ? replica->mutable_profile()
                                                     : resp.mutable_profile());
    }
  }
  // The replicas run in parallel: the execution takes as long as the
  // slowest, which is what the top-level profile of a replicated run says.
  if (profiled && replicated) {
    const auto slowest = std::max_element(
        profiles.begin(), profiles.end(),
        [](const auto& a, const auto& b) { return a.simulated_seconds < b.simulated_seconds; });
    ProfileToProto(*slowest, resp.mutable_profile());
  }
  resp.set_execute_micros(absl::ToInt64Microseconds(ExecutionDone(start, exe, plan.size())));
  if (reply_charge != nullptr) *reply_charge = std::move(reply);
  return resp;
}

absl::Duration Service::ExecutionDone(absl::Time start, const ExecutableEntry& exe,
                                      size_t replicas) {
  const absl::Duration took = absl::Now() - start;
  if (options_.trace != nullptr) {
    options_.trace->Complete("execute", "execute", start, took,
                             {{"device", exe.device->name()},
                              {"fingerprint", exe.fingerprint->substr(0, 16)},
                              {"replicas", absl::StrCat(replicas)}});
  }
  metrics_.Record("execute", took);
  return took;
}

absl::Status Service::ExecutionFailed(const absl::Status& error, const ExecutableEntry& exe,
                                      const std::shared_ptr<Session>& session,
                                      const std::vector<std::shared_ptr<FeedQueues>>& feeds,
                                      const runtime::CancelCheck& until_done) {
  metrics_.Add("execute_errors");
  if (until_done()) {
    // Wake producers and consumers of the aborted program; drop its data.
    for (const auto& f : feeds) {
      if (f == nullptr) continue;  // a program without feed ops
      f->infeed.Abort();
      f->outfeed.Abort();
    }
    metrics_.Add("executes_cancelled");
    logging::Info("session {}: execution cancelled on {}", session->id(), exe.device->name());
    return absl::CancelledError(absl::StrCat("execution cancelled: ", error.message()));
  }
  if (exe.executable->uses_feeds()) {
    // Producers and outfeed readers would wait for a program that is gone:
    // they get its error instead (readers after the values it wrote).
    const absl::Status failed(
        error.code(),
        absl::StrCat("the program on ", exe.device->name(), " failed: ", error.message()));
    for (const auto& f : feeds) {
      if (f == nullptr) continue;
      f->infeed.Fail(failed, /*drop_values=*/true);
      f->outfeed.Fail(failed, /*drop_values=*/false);
    }
  }
  return error;
}

absl::StatusOr<Service::DirectResult> Service::ExecuteDirect(DirectExecution execution) {
  // One clock read renews the lease and starts the execution's time.
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                   sessions_->GetAt(execution.session_id, start));
  std::vector<std::string> donated_handles;
  for (int index : execution.donated) {
    if (index >= 0 && index < static_cast<int>(execution.arguments.size()) &&
        !execution.arguments[index].handle.empty()) {
      donated_handles.emplace_back(execution.arguments[index].handle);
    }
  }
  absl::StatusOr<DirectResult> result = ExecuteDirectIn(session, execution, start);
  // Given up whatever happens: those the execution did not take go now.
  if (!result.ok() && !donated_handles.empty()) session->Drop(donated_handles);
  return result;
}

absl::StatusOr<Service::DirectResult> Service::ExecuteDirectIn(
    const std::shared_ptr<Session>& session, DirectExecution& execution, absl::Time start) {
  ASSIGN_OR_RETURN(Session::Running running, session->BeginExecution());
  ASSIGN_OR_RETURN(ExecutableEntry exe, session->GetExecutable(execution.executable_handle));
  runtime::AccountScope account(session->memory_account());
  const std::vector<ir::Shape>& params = exe.executable->parameter_shapes();
  DirectArguments& arguments = execution.arguments;
  if (arguments.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("program takes ", params.size(),
                                                   " arguments, got ", arguments.size()));
  }
  for (int index : execution.donated) {
    if (index < 0 || index >= static_cast<int>(params.size())) {
      return absl::InvalidArgumentError(absl::StrCat("donated argument ", index, " out of range"));
    }
  }
  auto donated = [&execution](size_t i) {
    return std::find(execution.donated.begin(), execution.donated.end(), static_cast<int>(i)) !=
           execution.donated.end();
  };
  // UntilSessionEnds without its copies: the session and the caller's
  // check outlive the call, and two pointers fit in the std::function
  // without an allocation (an eager op's execution is a few microseconds).
  const runtime::CancelCheck until_done = [session = session.get(),
                                           cancelled = &execution.cancelled]() {
    return session->closed() || (*cancelled && (*cancelled)());
  };
  DirectResult result;
  result.device = exe.device;
  std::vector<runtime::BufferPtr> args;
  args.reserve(params.size());
  std::vector<std::string> taken;
  for (size_t i = 0; i < arguments.size(); ++i) {
    DirectArgument& a = arguments[i];
    if (!a.refused.ok()) return a.refused;
    runtime::BufferPtr buffer;
    runtime::Device* device = nullptr;
    if (a.value != nullptr) {
      if (a.value->shape() != params[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inline argument ", i, " has shape ", a.value->shape().ToString(),
            ", the program expects ", params[i].ToString()));
      }
      absl::StatusOr<runtime::BufferPtr> placed = exe.device->TransferToDevice(*a.value);
      if (!placed.ok()) return WithContext(placed.status(), absl::StrCat("argument ", i));
      metrics_.Add("bytes_in", params[i].ByteSize());
      buffer = *std::move(placed);
      device = exe.device;
      // Kept for the caller unless donated (then the program may write over it).
      if (!donated(i)) {
        result.argument_buffers.resize(params.size());
        result.argument_buffers[i] = buffer;
      }
    } else if (a.buffer != nullptr) {
      buffer = std::move(a.buffer);
      device = a.device;
    } else {
      absl::StatusOr<BufferEntry> entry = session->GetBuffer(std::string(a.handle), until_done);
      if (!entry.ok()) return WithContext(entry.status(), absl::StrCat("argument ", i));
      buffer = std::move(entry->buffer);
      device = entry->device;
      if (donated(i)) taken.emplace_back(a.handle);
    }
    RETURN_IF_ERROR(CheckArgument("", i, device, *buffer, *exe.device, params[i]));
    args.push_back(std::move(buffer));
  }
  // Only a program with feed ops reads the session's queues: an eager op
  // does not look them up.
  const std::shared_ptr<FeedQueues> feeds =
      exe.executable->uses_feeds() ? session->Feeds(exe.device->name()) : nullptr;
  runtime::ExecutionProfile profile;
  // One replica: no rendezvous (runtime::ExecuteOptions).
  runtime::ExecuteOptions options;
  options.infeed_timeout = execution.infeed_timeout > absl::ZeroDuration()
                               ? execution.infeed_timeout
                               : options_.infeed_timeout;
  options.outfeed_timeout = options.infeed_timeout;
  if (feeds != nullptr) {
    options.infeed = &feeds->infeed;
    options.outfeed = &feeds->outfeed;
  }
  options.cancelled = until_done;
  options.profile = &profile;
  if (!taken.empty()) RETURN_IF_ERROR(session->TakeBuffers(taken).status());
  // The arguments go with the execution: a donated one (nobody else holds
  // it) may take a result in place.
  absl::StatusOr<runtime::BufferPtr> results =
      exe.executable->ExecuteOwned(*exe.device, std::move(args), options);
  metrics_.Add("executes");
  if (!results.ok()) return ExecutionFailed(results.status(), exe, session, {feeds}, until_done);
  Flatten(*results, &result.outputs);
  if (exe.executable->has_cost_model()) {
    RecordProfile(profile);
    result.profile = profile;
  }
  result.execute_micros = absl::ToInt64Microseconds(ExecutionDone(start, exe, 1));
  return result;
}

absl::StatusOr<std::string> Service::AdoptBuffer(const std::string& session_id,
                                                 runtime::BufferPtr buffer,
                                                 runtime::Device* device) {
  if (buffer == nullptr || device == nullptr) return absl::InvalidArgumentError("no buffer");
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(session_id));
  return session->AddBuffer({std::move(buffer), device, nullptr});
}

void Service::RecordProfile(const runtime::ExecutionProfile& p) {
  metrics_.Record("tpu_simulated_step", absl::Seconds(p.simulated_seconds));
  metrics_.Add("tpu_simulated_nanos_matrix", static_cast<int64_t>(p.matrix_seconds * 1e9));
  metrics_.Add("tpu_simulated_nanos_vector", static_cast<int64_t>(p.vector_seconds * 1e9));
  metrics_.Add("tpu_simulated_nanos_hbm", static_cast<int64_t>(p.hbm_seconds * 1e9));
  metrics_.Add("tpu_simulated_nanos_interconnect",
               static_cast<int64_t>(p.interconnect_seconds * 1e9));
  metrics_.Add("tpu_simulated_nanos_infeed", static_cast<int64_t>(p.infeed_seconds * 1e9));
  metrics_.Add("tpu_matrix_flops", p.matrix_flops);
  metrics_.Add("tpu_hbm_bytes", p.hbm_bytes);
}

}  // namespace kiln::server
