#include "server/service.h"

#include "server/prometheus.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/proto_convert.h"
#include "base/mutexes.h"
#include "base/net_address.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"
#include "runtime/replicated.h"
#include "proto/protocol.h"
#include "base/logging.h"
#include "base/chunks.h"

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

// Polled by a session's long waits: true once the session has ended or
// the caller gave up.
runtime::CancelCheck UntilSessionEnds(const std::shared_ptr<Session>& session,
                                      const runtime::CancelCheck& cancelled) {
  return [session, cancelled]() { return session->closed() || (cancelled && cancelled()); };
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

void ProfileToProto(const runtime::ExecutionProfile& p, v1::ExecutionProfileProto* out) {
  out->set_simulated_seconds(p.simulated_seconds);
  out->set_matrix_seconds(p.matrix_seconds);
  out->set_vector_seconds(p.vector_seconds);
  out->set_hbm_seconds(p.hbm_seconds);
  out->set_interconnect_seconds(p.interconnect_seconds);
  out->set_infeed_seconds(p.infeed_seconds);
  out->set_matrix_utilization(p.matrix_utilization);
  out->set_matrix_flops(p.matrix_flops);
  out->set_hbm_bytes(p.hbm_bytes);
  out->set_padding_waste(p.padding_waste);
}

Service::Service(const ServiceOptions& options)
    : options_(options),
      sessions_(std::make_unique<SessionManager>(options.lease, options.feed_queue_capacity,
                                                 options.session_limits)),
      cache_(options.compile_cache_entries, options.compile_cache_bytes) {}

absl::StatusOr<std::unique_ptr<Service>> Service::Create(const ServiceOptions& options) {
  ConfigureMutexes();
  if (options.backends.empty()) {
    return absl::InvalidArgumentError("the server needs at least one backend");
  }
  if (options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the lease must be positive");
  }
  auto service = std::unique_ptr<Service>(new Service(options));
  runtime::RegisterBuiltinBackends();
  for (const runtime::BackendSpec& spec : options.backends) {
    for (const auto& other : service->backends_) {
      if (other->kind() == spec.kind) {
        return absl::InvalidArgumentError(
            absl::StrCat("the backend '", spec.kind, "' is named twice"));
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::Backend> backend, runtime::CreateBackend(spec));
    for (const auto& device : backend->devices()) {
      service->devices_.push_back(device.get());
      service->backend_of_[device.get()] = backend.get();
    }
    logging::Info("{} backend: {}", backend->kind(), backend->Describe());
    service->backends_.push_back(std::move(backend));
  }
  if (!options.compile_cache_dir.empty()) {
    ASSIGN_OR_RETURN(service->persistent_, PersistentCache::Open(options.compile_cache_dir,
                                                                 options.compile_cache_dir_bytes));
    logging::Info("persistent compile cache in {}: {} bytes", options.compile_cache_dir,
                  service->persistent_->bytes());
  }
  return service;
}

absl::StatusOr<runtime::Device*> Service::FindDevice(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& d : devices_) {
    if (d->name() == name) return d;
    names.push_back(d->name());
  }
  return absl::NotFoundError(absl::StrCat("unknown device '", name, "' (this server has ",
                                          absl::StrJoin(names, ", "), ")"));
}

runtime::Backend& Service::BackendOf(const runtime::Device* device) const {
  return *backend_of_.at(device);
}

absl::StatusOr<v1::HandshakeResponse> Service::Handshake(const v1::HandshakeRequest& req) {
  const uint32_t lo = std::max(req.min_version(), kMinProtocolVersion);
  const uint32_t hi = std::min(req.max_version(), kMaxProtocolVersion);
  if (req.min_version() > req.max_version() || lo > hi) {
    metrics_.Add("handshakes_refused");
    return absl::FailedPreconditionError(absl::StrCat(
        "protocol version mismatch: the client speaks ", req.min_version(), "..",
        req.max_version(), ", this server speaks ", kMinProtocolVersion, "..",
        kMaxProtocolVersion));
  }
  std::shared_ptr<Session> session = sessions_->Create(req.client_name());
  logging::Info("session {} opened by '{}' (protocol {})", session->id(), session->client_name(),
                hi);
  metrics_.Add("sessions_opened");
  v1::HandshakeResponse resp;
  resp.set_version(hi);
  resp.set_session_id(session->id());
  resp.set_lease_seconds(absl::ToInt64Seconds(sessions_->lease()));
  for (const auto& d : devices_) {
    auto* info = resp.add_devices();
    info->set_name(d->name());
    info->set_kind(d->kind());
    info->set_ordinal(d->ordinal());
    info->set_memory_capacity_bytes(d->memory_stats().capacity_bytes);
  }
  return resp;
}

absl::StatusOr<v1::KeepAliveResponse> Service::KeepAlive(const v1::KeepAliveRequest& req) {
  RETURN_IF_ERROR(sessions_->Get(req.session_id()).status());
  v1::KeepAliveResponse resp;
  resp.set_lease_seconds(absl::ToInt64Seconds(sessions_->lease()));
  return resp;
}

absl::StatusOr<v1::CloseSessionResponse> Service::CloseSession(
    const v1::CloseSessionRequest& req) {
  RETURN_IF_ERROR(sessions_->Close(req.session_id()));
  return v1::CloseSessionResponse();
}

absl::StatusOr<v1::TransferToDeviceResponse> Service::TransferToDevice(
    const v1::TransferHeader& header, const std::string& first_data,
    const ChunkReader& next) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(header.session_id()));
  ASSIGN_OR_RETURN(runtime::Device * device, FindDevice(header.device()));
  absl::StatusOr<ir::Shape> shape = ir::ShapeFromProto(header.shape());
  if (!shape.ok()) return WithContext(shape.status(), "transfer shape");
  if (!shape->IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfers carry arrays, not ", shape->ToString()));
  }
  if (header.total_bytes() != shape->ByteSize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transfer declares ", header.total_bytes(), " bytes but ", shape->ToString(),
        " has ", shape->ByteSize()));
  }
  // Allocation charges the device and the session before any data is
  // read: an over-size transfer is refused here.
  absl::StatusOr<runtime::BufferPtr> buffer;
  {
    runtime::AccountScope account(session->memory_account());
    buffer = device->Allocate(*shape);
  }
  if (!buffer.ok()) return WithContext(buffer.status(), "transfer to " + device->name());
  const int64_t total = header.total_bytes();
  int64_t received = 0;
  auto append = [&](const std::string& data) -> absl::Status {
    if (static_cast<int64_t>(data.size()) > total - received) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer sent more than the declared ", total, " bytes"));
    }
    if (!data.empty() && shape->type() == ir::ElementType::kPred) {
      // Any byte may arrive; the device holds pred values as 0 or 1.
      std::string normalized = data;
      ir::NormalizePredBytes(reinterpret_cast<uint8_t*>(normalized.data()),
                             static_cast<int64_t>(normalized.size()));
      RETURN_IF_ERROR(device->CopyToBuffer(**buffer, received, normalized.data(),
                                           static_cast<int64_t>(normalized.size())));
    } else if (!data.empty()) {
      RETURN_IF_ERROR(device->CopyToBuffer(**buffer, received, data.data(),
                                           static_cast<int64_t>(data.size())));
    }
    received += static_cast<int64_t>(data.size());
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(append(first_data));
  std::string data;
  while (true) {
    ASSIGN_OR_RETURN(bool more, next(&data));
    if (!more) break;
    RETURN_IF_ERROR(append(data));
  }
  metrics_.Add("bytes_in", received);
  if (received != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated transfer: received ", received, " of ", total, " bytes"));
  }
  v1::TransferToDeviceResponse resp;
  resp.set_buffer_handle(session->AddBuffer({*buffer, device, nullptr}));
  resp.set_bytes_received(received);
  metrics_.Add("transfers_to_device");
  metrics_.Record("transfer_to_device", absl::Now() - start);
  if (options_.trace != nullptr) {
    options_.trace->Complete("transfer to device", "transfer", start, absl::Now() - start,
                             {{"device", device->name()}, {"bytes", absl::StrCat(received)}});
  }
  return resp;
}

absl::Status Service::TransferFromDevice(const v1::TransferFromDeviceRequest& req,
                                         const ChunkWriter& write,
                                         const runtime::CancelCheck& cancelled) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  // An output of a sequenced execution still running is waited for.
  ASSIGN_OR_RETURN(BufferEntry entry,
                   session->GetBuffer(req.buffer_handle(), UntilSessionEnds(session, cancelled)));
  const runtime::Buffer& buffer = *entry.buffer;
  absl::Status copied = absl::OkStatus();
  int64_t chunk = req.chunk_bytes() > 0 ? req.chunk_bytes() : options_.transfer_chunk_bytes;
  chunk = std::min<int64_t>(chunk, int64_t{16} << 20);
  const int64_t total = buffer.size_bytes();
  const bool sent = ForEachChunk(total, chunk, [&](int64_t offset, int64_t n) {
    v1::TransferFromDeviceChunk msg;
    if (offset == 0) {
      ir::ShapeToProto(buffer.shape(), msg.mutable_shape());
      msg.set_total_bytes(total);
    }
    std::string* data = msg.mutable_data();
    data->resize(n);
    copied = entry.device->CopyFromBuffer(buffer, offset, data->data(), n);
    return copied.ok() && write(msg);
  });
  RETURN_IF_ERROR(copied);
  if (!sent) return absl::CancelledError("the client went away during a transfer");
  metrics_.Add("bytes_out", total);
  metrics_.Add("transfers_from_device");
  if (options_.trace != nullptr) {
    options_.trace->Complete("transfer from device", "transfer", start, absl::Now() - start,
                             {{"device", entry.device->name()}, {"bytes", absl::StrCat(total)}});
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ReleaseResponse> Service::Release(const v1::ReleaseRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  std::vector<std::string> buffers(req.buffer_handles().begin(), req.buffer_handles().end());
  std::vector<std::string> exes(req.executable_handles().begin(),
                                req.executable_handles().end());
  ASSIGN_OR_RETURN(int released, session->Release(buffers, exes));
  metrics_.Add("handles_released", released);
  v1::ReleaseResponse resp;
  resp.set_released(released);
  return resp;
}

absl::StatusOr<v1::CompileResponse> Service::Compile(const v1::CompileRequest& req) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  ASSIGN_OR_RETURN(runtime::Device * device, FindDevice(req.device()));
  RETURN_IF_ERROR(CheckModuleProto(req.module(), options_.module_limits));
  absl::StatusOr<std::unique_ptr<ir::Module>> module = ir::ModuleFromProto(req.module());
  if (!module.ok()) return WithContext(module.status(), "malformed module");
  absl::Status verified = ir::Verify(**module);
  if (!verified.ok()) return WithContext(verified, "invalid module");
  RETURN_IF_ERROR(CheckModule(**module, options_.module_limits));
  for (const ir::Shape& p : (*module)->entry()->ParameterShapes()) {
    if (!p.IsArray()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry parameters must be arrays; got ", p.ToString()));
    }
  }
  const int64_t device_count = static_cast<int64_t>(BackendOf(device).devices().size());
  if (req.estimate_replicas() < 0 || req.estimate_replicas() > device_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "estimate_replicas must be 0 to ", device_count, " (the ", device->kind(),
        " devices of this server), got ", req.estimate_replicas()));
  }
  const std::string canonical = ir::CanonicalBytes(**module);
  const std::string fingerprint = ir::Sha256Hex(canonical);
  runtime::CompileOptions options;
  if (req.options().rng_seed() != 0) options.rng_seed = req.options().rng_seed();
  // One entry serves every device of the backend: the key names the kind
  // and the config that shapes code, never the device.
  runtime::Backend& backend = BackendOf(device);
  const std::string key = absl::StrCat(fingerprint, "/", backend.kind(), "/",
                                       backend.config_key(), "/seed=", options.rng_seed);
  bool loaded = false;
  ASSIGN_OR_RETURN(CompileCache::Result result, cache_.GetOrCompile(key, canonical, [&]() {
    return CompileOrLoad(backend, **module, fingerprint, options, &loaded);
  }));
  const absl::Duration took = absl::Now() - start;
  metrics_.Add(result.hit ? "compile_cache_hits" : "compile_cache_misses");
  if (!result.hit && !loaded) {
    metrics_.Record("compile", took);
    if (!options_.dump_dir.empty()) DumpModule(**module, fingerprint);
  }
  v1::CompileResponse resp;
  resp.set_executable_handle(session->AddExecutable(
      {result.executable, device, std::make_shared<const std::string>(fingerprint)}));
  resp.set_cache_hit(result.hit);
  resp.set_persistent_cache_hit(loaded);
  resp.set_compile_micros(result.hit ? 0 : absl::ToInt64Microseconds(took));
  resp.set_fingerprint(fingerprint);
  for (const ir::Shape& p : result.executable->parameter_shapes()) {
    ir::ShapeToProto(p, resp.add_parameter_shapes());
  }
  ir::ShapeToProto(result.executable->result_shape(), resp.mutable_result_shape());
  if (result.executable->has_cost_model()) {
    absl::StatusOr<runtime::ExecutionProfile> estimate =
        result.executable->Estimate(std::max(1, req.estimate_replicas()));
    if (estimate.ok()) {
      ProfileToProto(*estimate, resp.mutable_estimate());
    } else {
      resp.set_estimate_error(std::string(estimate.status().message()));
    }
  }
  logging::Debug("compile {} on {}: {}", fingerprint, device->name(), result.hit ? "hit" : "miss");
  if (options_.trace != nullptr) {
    options_.trace->Complete(
        result.hit ? "compile (cache hit)" : loaded ? "compile (loaded)" : "compile", "compile",
        start, took,
        {{"device", device->name()}, {"fingerprint", fingerprint.substr(0, 16)},
         {"entry_instructions", absl::StrCat((*module)->entry()->instruction_count())}});
  }
  return resp;
}

absl::StatusOr<std::shared_ptr<runtime::Executable>> Service::CompileOrLoad(
    runtime::Backend& backend, const ir::Module& module, const std::string& fingerprint,
    const runtime::CompileOptions& options, bool* loaded) {
  runtime::Compiler& compiler = backend.compiler();
  if (persistent_ == nullptr) return compiler.Compile(module, options);
  const PersistentKey key{fingerprint,
                          backend.kind(),
                          backend.config_key(),
                          absl::StrCat("seed=", options.rng_seed),
                          KILN_VERSION_STRING,
                          compiler.ArtifactDependencies()};
  PersistentCache::Lookup found = persistent_->Find(key);
  if (found.artifact.has_value()) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::shared_ptr<runtime::Executable>> exe =
        compiler.Load(*found.artifact, options);
    // A loaded program must have the module's signature.
    if (exe.ok() && ((*exe)->parameter_shapes() != module.entry()->ParameterShapes() ||
                     (*exe)->result_shape() != module.entry()->root()->shape())) {
      exe = absl::InvalidArgumentError("its signature is not the module's");
    }
    if (exe.ok()) {
      *loaded = true;
      metrics_.Add("persistent_cache_hits");
      metrics_.Record("persistent_cache_load", absl::Now() - start);
      logging::Debug("persistent compile cache: {} loaded", fingerprint);
      return exe;
    }
    found.reason = "unreadable";
    found.explanation = absl::StrCat("the entry could not be loaded: ", exe.status().message());
  }
  metrics_.Add(absl::StrCat("persistent_cache_misses{", found.reason, "}"));
  logging::Info("persistent compile cache miss for {} on {}: {}", fingerprint, backend.kind(),
                found.explanation);
  ASSIGN_OR_RETURN(runtime::Compiler::Compiled compiled, compiler.CompileForCache(module, options));
  if (compiled.artifact.empty()) {
    metrics_.Add("persistent_cache_unsupported");
  } else if (absl::Status st = persistent_->Store(key, compiled.artifact); !st.ok()) {
    metrics_.Add("persistent_cache_write_errors");
    logging::Warn("persistent compile cache: {}", std::string(st.message()));
  }
  return compiled.executable;
}

void Service::DumpModule(const ir::Module& module, const std::string& fingerprint) const {
  const std::string path = absl::StrCat(options_.dump_dir, "/", fingerprint, ".hlo");
  std::ofstream out(path);
  out << ir::PrintModule(module);
  if (!out.good()) logging::Warn("could not write the module dump {}", path);
}

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
    feeds[r] = session->Feeds(device->name());

    run.options.infeed_timeout = infeed_timeout;
    run.options.outfeed_timeout = infeed_timeout;
    run.options.infeed = &feeds[r]->infeed;
    run.options.outfeed = &feeds[r]->outfeed;
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
      f->infeed.Fail(failed, /*drop_values=*/true);
      f->outfeed.Fail(failed, /*drop_values=*/false);
    }
  }
  return error;
}

absl::StatusOr<Service::DirectResult> Service::ExecuteDirect(DirectExecution execution) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(execution.session_id));
  std::vector<std::string> donated_handles;
  for (int index : execution.donated) {
    if (index >= 0 && index < static_cast<int>(execution.arguments.size()) &&
        !execution.arguments[index].handle.empty()) {
      donated_handles.emplace_back(execution.arguments[index].handle);
    }
  }
  absl::StatusOr<DirectResult> result = ExecuteDirectIn(session, execution);
  // Given up whatever happens: those the execution did not take go now.
  if (!result.ok() && !donated_handles.empty()) session->Drop(donated_handles);
  return result;
}

absl::StatusOr<Service::DirectResult> Service::ExecuteDirectIn(
    const std::shared_ptr<Session>& session, DirectExecution& execution) {
  ASSIGN_OR_RETURN(Session::Running running, session->BeginExecution());
  const absl::Time start = absl::Now();
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
  const std::shared_ptr<FeedQueues> feeds = session->Feeds(exe.device->name());
  runtime::ExecutionProfile profile;
  // One replica: no rendezvous (runtime::ExecuteOptions).
  runtime::ExecuteOptions options;
  options.infeed_timeout = execution.infeed_timeout > absl::ZeroDuration()
                               ? execution.infeed_timeout
                               : options_.infeed_timeout;
  options.outfeed_timeout = options.infeed_timeout;
  options.infeed = &feeds->infeed;
  options.outfeed = &feeds->outfeed;
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

namespace {

bool ValidGroupId(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// Compares secrets in time that does not depend on where they differ.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<v1::JoinGroupResponse> Service::JoinGroup(const v1::JoinGroupRequest& req,
                                                         const std::string& authorization,
                                                         const runtime::CancelCheck& cancelled) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  const std::string& id = req.group_id();
  if (!ValidGroupId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group id is 1 to 128 of [A-Za-z0-9._-], got \"",
                     absl::CHexEscape(id.substr(0, 128)), "\""));
  }
  if (req.secret().size() < 16 || req.secret().size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": the secret must have 16 to 128 bytes, got ", req.secret().size()));
  }
  const int n = req.members_size();
  if (n < 1 || n > kMaxGroupMembers) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": ", n, " members (1 to ", kMaxGroupMembers, ")"));
  }
  if (req.rank() < 0 || req.rank() >= n) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": rank ", req.rank(), " of ", n, " members"));
  }
  for (int m = 0; m < n; ++m) {
    const std::string& address = req.members(m);
    const bool plain = std::all_of(address.begin(), address.end(), [](char c) {
      return absl::ascii_isalnum(c) || std::strchr(".-_:[]/%", c) != nullptr;
    });
    if (address.empty() || address.size() > 256 || !plain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", id, ": member ", m, "'s address must be 1 to 256 of [A-Za-z0-9.-_:[]/%], got \"",
          absl::CHexEscape(address.substr(0, 256)), "\""));
    }
  }
  if (req.timeout_millis() > absl::ToInt64Milliseconds(kMaxGroupTimeout)) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": a timeout of ", req.timeout_millis(), " ms is over the limit of ", absl::FormatDuration(kMaxGroupTimeout)));
  }
  const bool any_peer = std::find(options_.group_peers.begin(), options_.group_peers.end(),
                                  "*") != options_.group_peers.end();
  if (options_.group_peers.empty() && options_.group_peers_required) {
    return absl::FailedPreconditionError(
        "this server listens beyond loopback: name the hosts its groups may span with "
        "--group_peers (docs/groups.md)");
  }
  if (!options_.group_peers.empty() && !any_peer) {
    for (int m = 0; m < n; ++m) {
      const absl::string_view host = HostOf(req.members(m));
      if (std::find(options_.group_peers.begin(), options_.group_peers.end(), host) ==
          options_.group_peers.end()) {
        metrics_.Add("group_join_refused");
        return absl::PermissionDeniedError(absl::StrCat(
            "group ", id, ": member ", m, " is on ", host,
            ", which is not among this server's --group_peers"));
      }
    }
  }
  // The session's place for the group, and one of the server's places for
  // a group being formed, before anything waits.
  RETURN_IF_ERROR(session->ReserveGroup(id));
  absl::Cleanup unreserve = [&] { session->Unreserve(id); };
  if (joins_in_flight_.fetch_add(1) >= kMaxJoinsInFlight) {
    joins_in_flight_.fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server is forming ", kMaxJoinsInFlight, " groups already; try again later"));
  }
  absl::Cleanup joined = [&] { joins_in_flight_.fetch_sub(1); };
  runtime::HostGroupSpec spec;
  spec.id = id;
  spec.rank = req.rank();
  spec.members.assign(req.members().begin(), req.members().end());
  spec.bind_host = options_.group_bind_host;
  if (req.timeout_millis() > 0) spec.timeout = absl::Milliseconds(req.timeout_millis());
  if (!runtime::HostGroupsSupported()) {
    return runtime::HostGroup::Create(spec, nullptr).status();
  }
  std::shared_ptr<runtime::GroupStore> store;
  if (spec.rank == 0) {
    // Gloo writes two keys per member: its host name and its addresses.
    auto local = std::make_shared<runtime::LocalGroupStore>(2 * n + 8, int64_t{1} << 20);
    absl::MutexLock lock(&group_stores_mu_);
    // Stores of sessions that are gone go first.
    absl::erase_if(group_stores_, [&](const auto& entry) {
      return !sessions_->Alive(entry.second.session_id);
    });
    if (group_stores_.contains(id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("group ", id, " is already formed on this server by another session"));
    }
    if (static_cast<int>(group_stores_.size()) >= kMaxHostedGroups) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this server keeps the stores of ", kMaxHostedGroups, " groups already"));
    }
    group_stores_[id] = HostedStore{req.secret(), session->id(), local};
    store = local;
  } else {
    if (!options_.remote_group_store) {
      return absl::UnimplementedError(absl::StrCat(
          "group ", id, ": this server reaches no other server, so it can only be member 0"));
    }
    store = options_.remote_group_store(req.members(0), id, req.secret(), spec.timeout,
                                        authorization);
  }
  auto forget_store = [&]() {
    if (spec.rank != 0) return;
    absl::MutexLock lock(&group_stores_mu_);
    auto it = group_stores_.find(id);
    if (it != group_stores_.end() && it->second.session_id == session->id()) group_stores_.erase(it);
  };
  logging::Info("session {}: joining group {} as member {} of {}", session->id(), id, spec.rank, n);
  absl::StatusOr<std::unique_ptr<runtime::HostGroup>> formed =
      runtime::HostGroup::Create(spec, store, cancelled);
  // A client that went away meanwhile gets no group (nobody would leave it).
  if (formed.ok() && cancelled && cancelled()) {
    formed = absl::CancelledError(absl::StrCat("group ", id, ": the joining call went away"));
  }
  if (!formed.ok()) {
    forget_store();
    metrics_.Add("group_join_errors");
    return formed.status();
  }
  auto entry = std::make_shared<GroupEntry>();
  entry->group = *std::move(formed);
  std::move(unreserve).Cancel();
  if (absl::Status added = session->AddGroup(id, std::move(entry)); !added.ok()) {
    forget_store();
    return added;
  }
  metrics_.Add("groups_joined");
  return v1::JoinGroupResponse();
}

absl::StatusOr<v1::LeaveGroupResponse> Service::LeaveGroup(const v1::LeaveGroupRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  RETURN_IF_ERROR(session->RemoveGroup(req.group_id()));
  absl::MutexLock lock(&group_stores_mu_);
  auto it = group_stores_.find(req.group_id());
  if (it != group_stores_.end() && it->second.session_id == session->id()) group_stores_.erase(it);
  return v1::LeaveGroupResponse();
}

absl::StatusOr<v1::GroupStoreResponse> Service::GroupStore(const v1::GroupStoreRequest& req) {
  std::shared_ptr<runtime::LocalGroupStore> store;
  {
    absl::MutexLock lock(&group_stores_mu_);
    auto it = group_stores_.find(req.group_id());
    // An unknown group and a wrong secret read alike: a caller without the
    // secret learns nothing of the groups here.
    const bool known = it != group_stores_.end() && sessions_->Alive(it->second.session_id);
    if (!known || !SameSecret(it->second.secret, req.secret())) {
      if (known) metrics_.Add("group_store_denied");
      return absl::NotFoundError(absl::StrCat("no group ",
                                              absl::CHexEscape(req.group_id().substr(0, 128)),
                                              " with this secret is formed on this server"));
    }
    store = it->second.store;
  }
  if (req.key().empty() || req.key().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("a group store key has 1 to 256 bytes, got ", req.key().size()));
  }
  v1::GroupStoreResponse resp;
  if (req.set()) {
    RETURN_IF_ERROR(store->Set(req.key(), req.value()));
    return resp;
  }
  const absl::Duration timeout =
      std::clamp(absl::Milliseconds(req.timeout_millis()), absl::ZeroDuration(), kMaxGroupTimeout);
  ASSIGN_OR_RETURN(*resp.mutable_value(), store->Get(req.key(), timeout));
  return resp;
}

std::string Service::MissingMembers(const GroupEntry& entry, const v1::ExecuteRequest& req) const {
  const runtime::HostGroup& group = *entry.group;
  if (!options_.probe_member) return "";
  const absl::Duration wait = std::min(absl::Seconds(2), group.spec().timeout);
  std::vector<absl::Status> answers(group.size());
  std::vector<std::thread> probes;
  for (int m = 0; m < group.size(); ++m) {
    if (m == group.rank()) continue;
    probes.emplace_back([&, m] { answers[m] = options_.probe_member(group.spec().members[m], wait); });
  }
  for (std::thread& t : probes) t.join();
  std::vector<std::string> gone;
  int first = 0;
  for (int m = 0; m < group.size(); ++m) {
    const int count = m < req.group_replicas_size() ? req.group_replicas(m) : 0;
    if (m != group.rank() && !answers[m].ok()) {
      gone.push_back(absl::StrCat("member ", m, " (", group.spec().members[m], ", replicas ", first,
                                  " to ", first + count - 1, ") does not answer: ",
                                  answers[m].message()));
    }
    first += count;
  }
  if (gone.empty()) {
    return "; every other member answers, so one of them failed or stalled in the program";
  }
  return absl::StrCat("; ", absl::StrJoin(gone, "; "));
}

absl::StatusOr<v1::MemoryInfoResponse> Service::MemoryInfo(const v1::MemoryInfoRequest& req) {
  RETURN_IF_ERROR(sessions_->Get(req.session_id()).status());
  ASSIGN_OR_RETURN(runtime::Device * device, FindDevice(req.device()));
  runtime::MemoryStats stats = device->memory_stats();
  v1::MemoryInfoResponse resp;
  resp.set_device(device->name());
  resp.set_capacity_bytes(stats.capacity_bytes);
  resp.set_bytes_in_use(stats.bytes_in_use);
  resp.set_peak_bytes_in_use(stats.peak_bytes_in_use);
  resp.set_live_buffers(stats.live_buffers);
  return resp;
}

absl::StatusOr<v1::CreateFeedTokenResponse> Service::CreateFeedToken(
    const v1::CreateFeedTokenRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  ASSIGN_OR_RETURN(runtime::Device * device, FindDevice(req.device()));
  std::string token = NewHandle("f-");
  {
    absl::MutexLock lock(&feed_tokens_mu_);
    // Drop the grants of sessions that have ended.
    for (auto it = feed_tokens_.begin(); it != feed_tokens_.end();) {
      if (!sessions_->Alive(it->second.session_id)) {
        feed_tokens_.erase(it++);
      } else {
        ++it;
      }
    }
    feed_tokens_[token] = FeedGrant{session->id(), device->name()};
  }
  logging::Info("session {} issued a feed token for {}", session->id(), device->name());
  v1::CreateFeedTokenResponse resp;
  resp.set_feed_token(token);
  return resp;
}

absl::StatusOr<Service::FeedEndpoint> Service::OpenFeed(const v1::FeedTarget& target) {
  FeedEndpoint feed;
  if (!target.feed_token().empty()) {
    FeedGrant grant;
    {
      absl::MutexLock lock(&feed_tokens_mu_);
      auto it = feed_tokens_.find(target.feed_token());
      if (it == feed_tokens_.end()) {
        return absl::PermissionDeniedError("the feed token is not valid on this server");
      }
      grant = it->second;
    }
    if (!target.device().empty() && target.device() != grant.device) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the feed token grants ", grant.device, ", not ", target.device()));
    }
    absl::StatusOr<std::shared_ptr<Session>> session =
        sessions_->Get(grant.session_id, /*renew=*/false);
    if (!session.ok()) {
      return absl::PermissionDeniedError("the session that issued the feed token has ended");
    }
    feed.session = *session;
    ASSIGN_OR_RETURN(feed.device, FindDevice(grant.device));
  } else if (!target.session_id().empty()) {
    ASSIGN_OR_RETURN(feed.session, sessions_->Get(target.session_id()));
    ASSIGN_OR_RETURN(feed.device, FindDevice(target.device()));
  } else {
    return absl::PermissionDeniedError(
        "feeds need the session id or a feed token issued by the session");
  }
  feed.queues = feed.session->Feeds(feed.device->name());
  feed.infeed_since = feed.queues->infeed.failures();
  feed.outfeed_since = feed.queues->outfeed.failures();
  feed.max_value_bytes = feed.device->memory_stats().capacity_bytes;
  return feed;
}

absl::Status Service::Infeed(const FeedEndpoint& feed, ir::Literal value,
                             const runtime::CancelCheck& cancelled,
                             runtime::MemoryCharge charge) {
  RETURN_IF_ERROR(ir::CheckFeedValue(value.shape(), feed.max_value_bytes));
  const int64_t bytes = value.shape().ByteSize();
  absl::Status pushed = feed.queues->infeed.Push(std::move(value), absl::InfiniteDuration(),
                                                 UntilSessionEnds(feed.session, cancelled),
                                                 feed.infeed_since, std::move(charge));
  if (!pushed.ok()) {
    if (feed.session->closed()) return absl::CancelledError("the session has ended");
    return WithContext(pushed, "infeed");
  }
  metrics_.Add("infeed_values");
  metrics_.Add("infeed_bytes", bytes);
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> Service::Outfeed(const FeedEndpoint& feed, absl::Duration timeout,
                                             const runtime::CancelCheck& cancelled,
                                             runtime::MemoryCharge* charge) {
  absl::StatusOr<ir::Literal> value =
      feed.queues->outfeed.Pop(timeout, UntilSessionEnds(feed.session, cancelled),
                               feed.outfeed_since, charge);
  if (!value.ok()) {
    if (feed.session->closed()) return absl::CancelledError("the session has ended");
    return WithContext(value.status(), "outfeed");
  }
  metrics_.Add("outfeed_values");
  metrics_.Add("outfeed_bytes", value->shape().ByteSize());
  return value;
}

void Service::RefreshGauges() {
  metrics_.Set("sessions_live", static_cast<int64_t>(sessions_->size()));
  metrics_.Set("sessions_host_bytes", sessions_->host_memory().bytes_in_use());
  metrics_.Set("compile_cache_entries", static_cast<int64_t>(cache_.size()));
  metrics_.Set("compile_cache_bytes", cache_.bytes());
  metrics_.Set("compile_cache_collisions", static_cast<int64_t>(cache_.collisions()));
  if (persistent_ != nullptr) metrics_.Set("persistent_cache_bytes", persistent_->bytes());
  for (const auto& d : devices_) {
    runtime::MemoryStats s = d->memory_stats();
    metrics_.Set(absl::StrCat("live_buffers{", d->name(), "}"), s.live_buffers);
    metrics_.Set(absl::StrCat("live_bytes{", d->name(), "}"), s.bytes_in_use);
    metrics_.Set(absl::StrCat("capacity_bytes{", d->name(), "}"), s.capacity_bytes);
  }
}

bool Service::SessionAlive(const std::string& session_id) const {
  return sessions_->Alive(session_id);
}

std::string Service::PrometheusMetrics() {
  RefreshGauges();
  return PrometheusText(metrics_.Counters(), metrics_.Histograms());
}

v1::MetricsResponse Service::GetMetrics() {
  RefreshGauges();
  return metrics_.Snapshot();
}

}  // namespace kiln::server
