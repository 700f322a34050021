#include "server/service.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/chunks.h"
#include "base/host_identity.h"
#include "base/logging.h"
#include "base/mutexes.h"
#include "base/status_macros.h"
#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"
#include "proto/protocol.h"
#include "runtime/compute_threads.h"
#include "server/prometheus.h"

namespace kiln::server {

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
  resp.set_host_id(HostId());
  for (int cpu : AllowedCpus()) resp.add_host_cpus(cpu);
  for (const auto& d : devices_) {
    auto* info = resp.add_devices();
    info->set_name(d->name());
    info->set_kind(d->kind());
    info->set_ordinal(d->ordinal());
    info->set_memory_capacity_bytes(d->memory_stats().capacity_bytes);
    // The host backend and the TPU simulator compute on this machine's
    // cores with the process's one compute team; other kinds do not.
    if (d->kind() == "cpu" || d->kind() == "tpu") {
      info->set_compute_threads(runtime::ComputeThreads());
    }
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
  TransferredFromDevice(start, *entry.device, total);
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> Service::ReadDirect(absl::string_view session_id,
                                                const runtime::Buffer& buffer,
                                                runtime::Device& device) {
  const absl::Time start = absl::Now();
  sessions_->GetAt(session_id, start).IgnoreError();  // gone: nothing to renew
  ASSIGN_OR_RETURN(ir::Literal value, device.TransferFromDevice(buffer));
  TransferredFromDevice(start, device, buffer.size_bytes());
  return value;
}

void Service::TransferredFromDevice(absl::Time start, const runtime::Device& device,
                                    int64_t bytes) {
  metrics_.Add("bytes_out", bytes);
  metrics_.Add("transfers_from_device");
  if (options_.trace != nullptr) {
    options_.trace->Complete("transfer from device", "transfer", start, absl::Now() - start,
                             {{"device", device.name()}, {"bytes", absl::StrCat(bytes)}});
  }
}

absl::StatusOr<v1::ReleaseResponse> Service::Release(const v1::ReleaseRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  std::vector<std::string> buffers(req.buffer_handles().begin(), req.buffer_handles().end());
  std::vector<std::string> exes(req.executable_handles().begin(),
                                req.executable_handles().end());
  ASSIGN_OR_RETURN(int released, session->Release(buffers, exes));
  metrics_.Add("release_calls");
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
