#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/host_identity.h"
#include "client/grpc_transport.h"
#include "client/mesh_transport.h"
#include "compiler/ir/proto_convert.h"
#include "proto/protocol.h"
#include "base/mutexes.h"
#include "base/status_macros.h"

namespace kiln::client {

// State shared by a client and every handle it gave out: handles may outlive
// the Client object.
class ClientCore {
 public:
  ClientCore(std::unique_ptr<Transport> transport, const ConnectOptions& options)
      : transport_(std::move(transport)), options_(options) {}

  ~ClientCore() { Shutdown(); }

  Transport& transport() { return *transport_; }
  const ConnectOptions& options() const { return options_; }
  const std::string& session_id() const { return session_id_; }

  void Start(std::string session_id, absl::Duration lease) {
    session_id_ = std::move(session_id);
    lease_ = lease;
    releaser_ = std::thread([this] { ReleaseLoop(); });
    if (options_.keep_alive) keeper_ = std::thread([this] { KeepAliveLoop(); });
  }

  // `bytes`: what releasing it frees (an executable's counts as large).
  void QueueRelease(const std::string& handle, bool executable, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (pending_buffers_.empty() && pending_executables_.empty()) first_queued_ = absl::Now();
    (executable ? pending_executables_ : pending_buffers_).push_back(handle);
    pending_bytes_ += executable ? kPromptReleaseBytes : bytes;
  }

  // Runs `work` on a dispatch thread after everything dispatched before it
  // has started; an unsequenced one also waits until those have ended, and
  // nothing starts while it runs. Sequenced work (the server orders it by
  // its number) runs up to kDispatchThreads calls at once. Once the client
  // shuts down, work not yet started finishes `pending` as CANCELLED
  // instead, and the calls in progress are cancelled.
  void Dispatch(std::shared_ptr<PendingExecution> pending, std::function<void()> work,
                bool sequenced) {
    {
      absl::MutexLock lock(&mu_);
      if (!stopping_) {
        dispatch_queue_.push_back({std::move(pending), std::move(work), sequenced});
        const size_t wanted = sequenced ? kDispatchThreads : 1;
        if (dispatchers_.size() < wanted && idle_dispatchers_ == 0) {
          dispatchers_.emplace_back([this] { DispatchLoop(); });
        }
        return;
      }
    }
    pending->Finish(absl::CancelledError("the client shut down"), 0);
  }

  // The number of the next sequenced execution (protocol 6): 1, 2, 3, ...
  // Drawn and dispatched under order_mu(), so that they are queued in
  // order.
  uint64_t NextSequence() { return ++sequence_; }
  absl::Mutex& order_mu() { return order_mu_; }

  absl::Status Flush() {
    absl::MutexLock lock(&mu_);
    const uint64_t target = queued_generation();
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return sent_generation_ >= target || stopping_;
    };
    ++flushing_;  // the releaser sends at once
    mu_.Await(absl::Condition(&done));
    --flushing_;
    return last_release_error_;
  }

  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      // Let the releaser send what is queued before it stops.
      const uint64_t target = queued_generation();
      auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return sent_generation_ >= target || session_id_.empty();
      };
      ++flushing_;
      mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(5));
      --flushing_;
      stopping_ = true;
      for (const auto& running : dispatching_) running->canceller_.Cancel();
    }
    for (std::thread& dispatcher : dispatchers_) dispatcher.join();
    if (releaser_.joinable()) releaser_.join();
    if (keeper_.joinable()) keeper_.join();
    if (!session_id_.empty() && options_.keep_alive) {
      v1::CloseSessionRequest req;
      req.set_session_id(session_id_);
      transport_->CloseSession(req).IgnoreError();
    }
  }

 private:
  // Releases queued so far, counted by generation so Flush can wait.
  uint64_t queued_generation() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queued_base_ + pending_buffers_.size() + pending_executables_.size();
  }

  void ReleaseLoop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !pending_buffers_.empty() || !pending_executables_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (pending_buffers_.empty() && pending_executables_.empty()) return;  // stopping
      // Gather more for a moment, so that a stream of small releases (an
      // eager op frees its operand's buffer each time; a training step its
      // loss) costs one call and one wake-up of this thread (and of one of
      // the server's) per batch, not one per handle. Small buffers wait
      // longer than large ones, whose memory the server may need soon.
      // Flush and Shutdown cut the wait short. The wait counts from when
      // the first of them was queued, not from when this thread woke.
      const absl::Time first = first_queued_;
      auto full = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || flushing_ > 0 ||
               pending_buffers_.size() + pending_executables_.size() >= kReleaseBatch;
      };
      auto full_or_large = [this, &full]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return full() || pending_bytes_ >= kPromptReleaseBytes;
      };
      mu_.AwaitWithDeadline(absl::Condition(&full_or_large), first + kSmallReleaseGather);
      mu_.AwaitWithDeadline(absl::Condition(&full), first + kReleaseGather);
      v1::ReleaseRequest req;
      req.set_session_id(session_id_);
      for (auto& h : pending_buffers_) req.add_buffer_handles(std::move(h));
      for (auto& h : pending_executables_) req.add_executable_handles(std::move(h));
      const uint64_t count = pending_buffers_.size() + pending_executables_.size();
      pending_buffers_.clear();
      pending_executables_.clear();
      pending_bytes_ = 0;
      queued_base_ += count;
      mu_.Unlock();
      absl::Status st = transport_->Release(req).status();
      mu_.Lock();
      // NOT_FOUND: the session already ended (lease, close) — nothing to free.
      if (!st.ok() && st.code() != absl::StatusCode::kNotFound) last_release_error_ = st;
      sent_generation_ += count;
    }
  }

  void DispatchLoop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        if (stopping_) return true;
        if (dispatch_queue_.empty() || unsequenced_running_) return false;
        return dispatching_.empty() || dispatch_queue_.front().sequenced;
      };
      ++idle_dispatchers_;
      mu_.Await(absl::Condition(&ready));
      --idle_dispatchers_;
      if (stopping_) break;
      Dispatched next = std::move(dispatch_queue_.front());
      dispatch_queue_.pop_front();
      dispatching_.push_back(next.pending);
      if (!next.sequenced) unsequenced_running_ = true;
      mu_.Unlock();
      next.work();
      mu_.Lock();
      if (!next.sequenced) unsequenced_running_ = false;
      // Dropped outside the lock: the last reference to a result nobody
      // waited for releases its buffers, which queues their handles under it.
      std::shared_ptr<PendingExecution> done = std::move(next.pending);
      std::erase(dispatching_, done);
      mu_.Unlock();
      next = Dispatched();
      done.reset();
      mu_.Lock();
    }
    // Outside the lock: dropping the work releases its buffers, which
    // queues their handles under it.
    std::deque<Dispatched> left = std::move(dispatch_queue_);
    dispatch_queue_.clear();
    mu_.Unlock();
    for (Dispatched& d : left) d.pending->Finish(absl::CancelledError("the client shut down"), 0);
    left.clear();
    mu_.Lock();
  }

  void KeepAliveLoop() {
    const absl::Duration period = std::max(absl::Milliseconds(100), lease_ / 3);
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), period);
      if (stopping_) break;
      mu_.Unlock();
      v1::KeepAliveRequest req;
      req.set_session_id(session_id_);
      transport_->KeepAlive(req).IgnoreError();
      mu_.Lock();
    }
  }

  std::unique_ptr<Transport> transport_;
  const ConnectOptions options_;
  std::string session_id_;
  absl::Duration lease_ = absl::Seconds(60);
  absl::Mutex mu_;
  std::vector<std::string> pending_buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> pending_executables_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_base_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_release_error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Callers waiting for everything queued to be sent (Flush, Shutdown).
  int flushing_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // what the pending releases free
  absl::Time first_queued_ ABSL_GUARDED_BY(mu_);    // when the oldest pending one was queued
  static constexpr size_t kReleaseBatch = 256;
  // Releases freeing this much in all are sent within kReleaseGather,
  // smaller ones within kSmallReleaseGather.
  static constexpr int64_t kPromptReleaseBytes = int64_t{1} << 20;
  static constexpr absl::Duration kReleaseGather = absl::Milliseconds(2);
  static constexpr absl::Duration kSmallReleaseGather = absl::Milliseconds(20);
  struct Dispatched {
    std::shared_ptr<PendingExecution> pending;
    std::function<void()> work;
    bool sequenced = false;
  };
  static constexpr size_t kDispatchThreads = 4;
  std::deque<Dispatched> dispatch_queue_ ABSL_GUARDED_BY(mu_);
  // The calls in progress, and whether an unsequenced one is among them.
  std::vector<std::shared_ptr<PendingExecution>> dispatching_ ABSL_GUARDED_BY(mu_);
  bool unsequenced_running_ ABSL_GUARDED_BY(mu_) = false;
  int idle_dispatchers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex order_mu_;
  std::atomic<uint64_t> sequence_{0};
  std::thread releaser_;
  std::thread keeper_;
  std::vector<std::thread> dispatchers_;  // started by Dispatch as needed
};

DeviceBuffer::DeviceBuffer(std::shared_ptr<ClientCore> core, std::string handle,
                           ir::Shape shape, std::string device)
    : core_(std::move(core)),
      handle_(std::move(handle)),
      shape_(std::move(shape)),
      device_(std::move(device)) {}

DeviceBuffer::DeviceBuffer(std::shared_ptr<ClientCore> core, std::shared_ptr<LocalBuffer> local,
                           ir::Shape shape, std::string device)
    : core_(std::move(core)),
      local_(std::move(local)),
      shape_(std::move(shape)),
      device_(std::move(device)) {}

DeviceBuffer::~DeviceBuffer() {
  absl::MutexLock lock(&mu_);
  if (!donated_ && !handle_.empty()) {
    core_->QueueRelease(handle_, /*executable=*/false, shape_.ByteSize());
  }
}

const std::string& DeviceBuffer::handle() const {
  absl::MutexLock lock(&mu_);
  if (handle_.empty() && !adopted_ && local_ != nullptr) {
    adopted_ = true;
    if (DirectPath* direct = core_->transport().direct(); direct != nullptr) {
      absl::StatusOr<std::string> handle = direct->Adopt(core_->session_id(), *local_);
      if (handle.ok()) handle_ = *std::move(handle);
    }
  }
  return handle_;
}

void DeviceBuffer::MarkDonated() {
  donated_ = true;
  TakeLocal();
}

std::shared_ptr<LocalBuffer> DeviceBuffer::local() const {
  absl::MutexLock lock(&mu_);
  return local_;
}

std::shared_ptr<LocalBuffer> DeviceBuffer::TakeLocal() {
  absl::MutexLock lock(&mu_);
  return std::move(local_);
}

bool DeviceBuffer::has_handle() const {
  absl::MutexLock lock(&mu_);
  return !handle_.empty();
}

Executable::Executable(std::shared_ptr<ClientCore> core, const v1::CompileResponse& r,
                       std::string device)
    : core_(std::move(core)),
      handle_(r.executable_handle()),
      device_(std::move(device)),
      fingerprint_(r.fingerprint()),
      cache_hit_(r.cache_hit()),
      compile_micros_(r.compile_micros()) {
  persistent_cache_hit_ = r.persistent_cache_hit();
  for (const auto& p : r.parameter_shapes()) {
    parameter_shapes_.push_back(ir::ShapeFromProto(p).value_or(ir::Shape()));
  }
  result_shape_ = ir::ShapeFromProto(r.result_shape()).value_or(ir::Shape());
  if (r.has_estimate()) {
    estimate_ = r.estimate();
  } else if (!r.estimate_error().empty()) {
    estimate_ = absl::FailedPreconditionError(r.estimate_error());
  } else {
    estimate_ = absl::UnimplementedError(
        absl::StrCat(device_, " has no cost model to price programs with (tpu devices do)"));
  }
}

Executable::~Executable() { core_->QueueRelease(handle_, /*executable=*/true, 0); }

absl::StatusOr<std::unique_ptr<Client>> Client::Create(std::unique_ptr<Transport> transport,
                                                       const ConnectOptions& options) {
  ConfigureMutexes();
  auto core = std::make_shared<ClientCore>(std::move(transport), options);
  v1::HandshakeRequest req;
  req.set_min_version(kClientMinVersion);
  req.set_max_version(kClientMaxVersion);
  req.set_client_name(options.client_name);
  absl::StatusOr<v1::HandshakeResponse> resp = core->transport().Handshake(req);
  if (!resp.ok()) return WithContext(resp.status(), "handshake");
  core->Start(resp->session_id(), absl::Seconds(std::max<int64_t>(1, resp->lease_seconds())));
  auto client = std::unique_ptr<Client>(new Client(core));
  client->protocol_version_ = resp->version();
  client->security_warning_ = resp->security_warning();
  client->host_id_ = resp->host_id();
  client->host_cpus_.assign(resp->host_cpus().begin(), resp->host_cpus().end());
  for (const auto& d : resp->devices()) {
    client->devices_.push_back(
        {d.name(), d.kind(), d.ordinal(), d.memory_capacity_bytes(), d.compute_threads()});
  }
  if (client->devices_.empty()) return absl::FailedPreconditionError("the server has no devices");
  return client;
}

namespace {

GrpcOptions GrpcOptionsOf(const ConnectOptions& options) {
  GrpcOptions grpc;
  grpc.connect_timeout = options.connect_timeout;
  grpc.control_timeout = options.control_timeout;
  grpc.compile_timeout = options.compile_timeout;
  grpc.execute_timeout = options.execute_timeout;
  grpc.keepalive_time = options.keepalive_time;
  grpc.security = options.security;
  grpc.reconnect_timeout = options.reconnect_timeout;
  return grpc;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address,
                                                        const ConnectOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                   ConnectGrpc(address, GrpcOptionsOf(options)));
  return Create(std::move(transport), options);
}

absl::StatusOr<std::unique_ptr<Client>> Client::ConnectMesh(
    const std::vector<std::string>& addresses, const ConnectOptions& options) {
  if (addresses.empty()) return absl::InvalidArgumentError("a mesh needs a server");
  std::vector<std::unique_ptr<Transport>> hosts;
  for (size_t i = 0; i < addresses.size(); ++i) {
    absl::StatusOr<std::unique_ptr<Transport>> t = ConnectGrpc(addresses[i], GrpcOptionsOf(options));
    if (!t.ok()) return WithContext(t.status(), absl::StrCat("host", i, " (", addresses[i], ")"));
    hosts.push_back(*std::move(t));
  }
  return Create(MakeMeshTransport(std::move(hosts), addresses, options.group_timeout), options);
}

Client::~Client() { core_->Shutdown(); }

const std::string& Client::session_id() const { return core_->session_id(); }

bool Client::ComputeFillsSharedCores(const std::string& device) const {
  if (host_id_.empty() || host_id_ != HostId() || host_cpus_.empty()) return false;
  const absl::flat_hash_set<int> server(host_cpus_.begin(), host_cpus_.end());
  for (int cpu : AllowedCpus()) {
    if (!server.contains(cpu)) return false;  // a core the team leaves alone
  }
  for (const DeviceDescription& d : devices_) {
    if (d.name == device) return d.compute_threads >= static_cast<int>(server.size());
  }
  return false;
}

const DeviceDescription& Client::default_device() const {
  for (const auto& d : devices_) {
    if (d.kind != "cpu") return d;
  }
  return devices_.front();
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> Client::TransferToDevice(
    const ir::Literal& value, const std::string& device) {
  if (!value.shape().IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("only arrays can be transferred, not ", value.shape().ToString()));
  }
  v1::TransferHeader header;
  header.set_session_id(core_->session_id());
  header.set_device(device);
  ir::ShapeToProto(value.shape(), header.mutable_shape());
  header.set_total_bytes(value.shape().ByteSize());
  const absl::string_view data(reinterpret_cast<const char*>(value.bytes().data()),
                               value.bytes().size());
  ASSIGN_OR_RETURN(v1::TransferToDeviceResponse resp,
                   core_->transport().TransferToDevice(header, data, core_->options().chunk_bytes));
  return std::make_shared<DeviceBuffer>(core_, resp.buffer_handle(), value.shape(), device);
}

absl::StatusOr<ir::Literal> Client::TransferFromDevice(const DeviceBuffer& buffer) {
  if (DirectPath* direct = core_->transport().direct(); direct != nullptr) {
    if (std::shared_ptr<LocalBuffer> local = buffer.local(); local != nullptr) {
      return direct->Read(core_->session_id(), *local);
    }
  }
  v1::TransferFromDeviceRequest req;
  req.set_session_id(core_->session_id());
  req.set_buffer_handle(buffer.handle());
  req.set_chunk_bytes(core_->options().chunk_bytes);
  // The server is trusted to announce a consistent value; any mismatch is
  // data loss on the way.
  ir::ChunkedValue value;
  auto lost = [](const absl::Status& st) {
    return absl::DataLossError(absl::StrCat("transfer from device: ", st.message()));
  };
  RETURN_IF_ERROR(core_->transport().TransferFromDevice(
      req, [&](v1::TransferFromDeviceChunk& chunk) -> absl::Status {
        if (!value.started()) {
          absl::Status st = value.Start(chunk.shape(), chunk.total_bytes(),
                                        std::numeric_limits<int64_t>::max());
          if (!st.ok()) return lost(st);
        }
        absl::Status st = value.Append(chunk.data());
        return st.ok() ? st : lost(st);
      }));
  if (!value.complete()) return lost(absl::InternalError("the stream ended before the value did"));
  return value.Take();
}

namespace {

v1::CompileRequest CompileRequestFor(const std::string& session_id, const ir::Module& module,
                                     const std::string& device) {
  v1::CompileRequest req;
  req.set_session_id(session_id);
  req.set_device(device);
  *req.mutable_module() = ir::ModuleToProto(module);
  return req;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Executable>> Client::Compile(const ir::Module& module,
                                                            const std::string& device,
                                                            uint64_t rng_seed) {
  v1::CompileRequest req = CompileRequestFor(core_->session_id(), module, device);
  req.mutable_options()->set_rng_seed(rng_seed);
  ASSIGN_OR_RETURN(v1::CompileResponse resp, core_->transport().Compile(req));
  return std::make_shared<Executable>(core_, resp, device);
}

absl::StatusOr<v1::ExecutionProfileProto> Client::Estimate(const ir::Module& module,
                                                           const std::string& device,
                                                           int replicas) {
  if (replicas < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot price ", replicas, " replicas"));
  }
  v1::CompileRequest req = CompileRequestFor(core_->session_id(), module, device);
  req.set_estimate_replicas(replicas);
  ASSIGN_OR_RETURN(v1::CompileResponse resp, core_->transport().Compile(req));
  return Executable(core_, resp, device).estimate();
}

namespace {

// Argument `i`'s value to send with the call (from `inline_values`, by
// index; null: none may), or null when its buffer goes: a value or a
// buffer, not both, and never a buffer donated before.
absl::StatusOr<const ir::Literal*> ArgumentValue(
    const std::vector<std::shared_ptr<DeviceBuffer>>& args,
    const std::vector<const ir::Literal*>* inline_values, size_t i) {
  const ir::Literal* value =
      inline_values != nullptr && i < inline_values->size() ? (*inline_values)[i] : nullptr;
  if (args[i] == nullptr) {
    if (value == nullptr) return absl::InvalidArgumentError("null argument buffer");
    return value;
  }
  if (value != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("argument ", i, " has both a buffer and an inline value"));
  }
  if (args[i]->donated()) {
    return absl::FailedPreconditionError(
        absl::StrCat("argument ", i, ": the buffer was donated to an earlier execution"));
  }
  return nullptr;
}

// The arguments' handles; an argument without a buffer goes inline with
// its value from `inline_values` (by index; null: none may).
absl::Status AddArguments(const std::vector<std::shared_ptr<DeviceBuffer>>& args,
                          const std::vector<const ir::Literal*>* inline_values,
                          google::protobuf::RepeatedPtrField<std::string>* handles,
                          v1::ExecuteRequest* req) {
  for (size_t i = 0; i < args.size(); ++i) {
    ASSIGN_OR_RETURN(const ir::Literal* value, ArgumentValue(args, inline_values, i));
    if (value != nullptr) {
      handles->Add();
      v1::InlineArgument* inline_arg = req->add_inline_arguments();
      inline_arg->set_index(static_cast<int>(i));
      ir::LiteralToProto(*value, inline_arg->mutable_value());
      continue;
    }
    *handles->Add() = args[i]->handle();
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecuteResult> ReadOutputs(
    const std::shared_ptr<ClientCore>& core,
    const google::protobuf::RepeatedPtrField<v1::ExecuteOutput>& outputs,
    const std::string& device) {
  ExecuteResult result;
  for (const auto& out : outputs) {
    ASSIGN_OR_RETURN(ir::Shape shape, ir::ShapeFromProto(out.shape()));
    result.outputs.push_back(std::make_shared<DeviceBuffer>(core, out.buffer_handle(), shape, device));
    if (out.has_inline_value()) {
      ASSIGN_OR_RETURN(ir::Literal value, ir::LiteralFromProto(out.inline_value()));
      result.inline_values.push_back(std::move(value));
    } else {
      result.inline_values.push_back(std::nullopt);
    }
  }
  return result;
}

void FillRequest(const ExecuteOptions& options, v1::ExecuteRequest* req) {
  req->set_inline_result_max_bytes(options.inline_result_max_bytes);
  for (int d : options.donate) req->add_donated_arguments(d);
  req->set_infeed_timeout_millis(absl::ToInt64Milliseconds(options.infeed_timeout));
  if (!options.group_id.empty()) {
    req->set_group_id(options.group_id);
    for (int count : options.group_replicas) req->add_group_replicas(count);
  }
}

void MarkDonated(const std::vector<int>& donate,
                 const std::vector<std::shared_ptr<DeviceBuffer>>& args) {
  for (int d : donate) {
    if (d >= 0 && d < static_cast<int>(args.size()) && args[d] != nullptr) args[d]->MarkDonated();
  }
}

// After an unsequenced execution failed, its donated arguments are gone
// where the server took them before the failure, and still on the server
// where it refused the call first (the protocol leaves them to the
// caller). This client has given them up either way (MarkDonated), so it
// releases them, a NOT_FOUND (taken) being no error; otherwise
// a refused call's donated buffers stayed on the server until the session
// ended. Not after a failure that may not have reached the server
// (unavailable, cancelled, past its deadline): a release would then wait
// for the connection, and the session keeps them. A sequenced execution's
// donated arguments go with its failure on the server (protocol 6).
void GiveUpDonated(ClientCore& core, const v1::ExecuteRequest& req, const absl::Status& failure) {
  if (req.sequence() != 0 || req.donated_arguments().empty()) return;
  const absl::StatusCode code = failure.code();
  if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kCancelled ||
      code == absl::StatusCode::kDeadlineExceeded) {
    return;
  }
  const std::vector<std::string> donated = protocol::DonatedHandles(req);
  // All at once (a release is all or nothing); where one was taken, each
  // on its own.
  auto release = [&](auto begin, auto end) {
    v1::ReleaseRequest rel;
    rel.set_session_id(req.session_id());
    for (auto it = begin; it != end; ++it) rel.add_buffer_handles(*it);
    return core.transport().Release(rel).status();
  };
  if (donated.empty() || release(donated.begin(), donated.end()).code() != absl::StatusCode::kNotFound) {
    return;
  }
  for (auto it = donated.begin(); it != donated.end(); ++it) release(it, it + 1).IgnoreError();
}

// The request of an execution of `executable` with `args`.
absl::StatusOr<v1::ExecuteRequest> ExecuteRequestOf(const std::string& session_id,
                                                    const Executable& executable,
                                                    const std::vector<std::shared_ptr<DeviceBuffer>>& args,
                                                    const ExecuteOptions& options) {
  v1::ExecuteRequest req;
  req.set_session_id(session_id);
  req.set_executable_handle(executable.handle());
  RETURN_IF_ERROR(AddArguments(args, &options.inline_values, req.mutable_argument_handles(), &req));
  FillRequest(options, &req);
  // A donated buffer held in this process is the session's by its handle
  // now: let go of it, so that the program may write over it.
  for (int d : options.donate) {
    if (d >= 0 && d < static_cast<int>(args.size()) && args[d] != nullptr && args[d]->has_handle()) {
      args[d]->TakeLocal();
    }
  }
  return req;
}

// The result of `req` from its reply; `inline_shapes` are the shapes of the
// arguments sent inline, by argument index (`args` of them in all).
absl::StatusOr<ExecuteResult> ExecuteResultOf(const std::shared_ptr<ClientCore>& core,
                                              const v1::ExecuteRequest& req,
                                              const v1::ExecuteResponse& resp,
                                              const std::string& device, size_t args,
                                              const std::vector<ir::Shape>& inline_shapes) {
  ASSIGN_OR_RETURN(ExecuteResult result, ReadOutputs(core, resp.outputs(), device));
  result.execute_micros = resp.execute_micros();
  if (resp.has_profile()) result.profile = resp.profile();
  if (resp.inline_argument_handles_size() != req.inline_arguments_size()) {
    return absl::InternalError(absl::StrCat(
        "the server returned ", resp.inline_argument_handles_size(), " handles for ",
        req.inline_arguments_size(), " inline arguments (protocol version 4 needed)"));
  }
  if (req.inline_arguments_size() > 0) result.inline_argument_buffers.resize(args);
  for (int k = 0; k < req.inline_arguments_size(); ++k) {
    const std::string& handle = resp.inline_argument_handles(k);
    if (handle.empty()) continue;  // donated
    const int index = req.inline_arguments(k).index();
    result.inline_argument_buffers[index] =
        std::make_shared<DeviceBuffer>(core, handle, inline_shapes[k], device);
  }
  return result;
}

std::vector<ir::Shape> InlineShapes(const v1::ExecuteRequest& req, const ExecuteOptions& options) {
  std::vector<ir::Shape> shapes;
  for (const v1::InlineArgument& a : req.inline_arguments()) {
    shapes.push_back(options.inline_values[a.index()]->shape());
  }
  return shapes;
}

// Checks that the reply named `result`'s outputs as they were named before
// the call, and marks the reply's own objects for them as not releasing
// their handles: the named objects do (PendingExecution::Wait hands those
// out where they are alive).
absl::Status CheckNamedOutputs(const ExecuteResult& result,
                               const std::vector<std::string>& named) {
  if (result.outputs.size() != named.size()) {
    return absl::InternalError(absl::StrCat("the server returned ", result.outputs.size(),
                                            " outputs for a program with ", named.size()));
  }
  for (size_t k = 0; k < named.size(); ++k) {
    if (result.outputs[k]->handle() != named[k]) {
      return absl::InternalError(absl::StrCat("the server named output ", k, " '",
                                              result.outputs[k]->handle(), "', not '", named[k],
                                              "'"));
    }
    result.outputs[k]->MarkDonated();
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Client::Execute through an in-process transport's DirectPath: the same
// checks and results as the messages give, without them.
absl::StatusOr<ExecuteResult> ExecuteDirect(DirectPath& direct,
                                            const std::shared_ptr<ClientCore>& core,
                                            const Executable& executable,
                                            const std::vector<std::shared_ptr<DeviceBuffer>>& args,
                                            const ExecuteOptions& options) {
  DirectArguments direct_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    ASSIGN_OR_RETURN(direct_args[i].value, ArgumentValue(args, &options.inline_values, i));
  }
  // Only once every argument passed: a donated one is given up here.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::shared_ptr<DeviceBuffer>& a = args[i];
    if (a == nullptr) continue;
    const bool donated =
        std::find(options.donate.begin(), options.donate.end(), static_cast<int>(i)) !=
        options.donate.end();
    // A buffer given once and donated goes as it is (the program may write
    // over it); one given twice is read at both places, and given up after.
    const bool once = std::count(args.begin(), args.end(), a) == 1;
    // One the session knows by its handle goes by it: a donation takes it
    // there too.
    std::shared_ptr<LocalBuffer> local = donated && once ? a->TakeLocal() : a->local();
    if (local != nullptr && !(donated && a->has_handle())) {
      direct_args[i].local = std::move(local);
    } else {
      local.reset();
      direct_args[i].handle = a->handle();
    }
  }
  absl::StatusOr<DirectOutputs> executed =
      direct.Execute(core->session_id(), executable.handle(), std::move(direct_args),
                     options.donate, options.infeed_timeout, options.cancel);
  MarkDonated(options.donate, args);
  if (!executed.ok()) return executed.status();
  ExecuteResult result;
  result.execute_micros = executed->execute_micros;
  result.profile = executed->profile;
  result.outputs.reserve(executed->outputs.size());
  result.inline_values.reserve(executed->outputs.size());
  for (size_t k = 0; k < executed->outputs.size(); ++k) {
    ir::Shape& shape = executed->shapes[k];
    std::optional<ir::Literal> value;
    if (shape.ByteSize() <= options.inline_result_max_bytes) {
      ASSIGN_OR_RETURN(value, direct.Read(core->session_id(), *executed->outputs[k]));
    }
    result.outputs.push_back(std::make_shared<DeviceBuffer>(
        core, std::move(executed->outputs[k]), std::move(shape), executable.device()));
    result.inline_values.push_back(std::move(value));
  }
  if (!executed->argument_buffers.empty()) result.inline_argument_buffers.resize(args.size());
  for (size_t i = 0; i < executed->argument_buffers.size() && i < args.size(); ++i) {
    if (executed->argument_buffers[i] == nullptr || i >= options.inline_values.size() ||
        options.inline_values[i] == nullptr) {
      continue;
    }
    result.inline_argument_buffers[i] =
        std::make_shared<DeviceBuffer>(core, std::move(executed->argument_buffers[i]),
                                       options.inline_values[i]->shape(), executable.device());
  }
  return result;
}

}  // namespace

bool Client::in_process() const { return core_->transport().direct() != nullptr; }

absl::StatusOr<ExecuteResult> Client::Execute(
    const Executable& executable, const std::vector<std::shared_ptr<DeviceBuffer>>& args,
    const ExecuteOptions& options) {
  if (DirectPath* direct = core_->transport().direct();
      direct != nullptr && options.group_id.empty()) {
    return ExecuteDirect(*direct, core_, executable, args, options);
  }
  ASSIGN_OR_RETURN(v1::ExecuteRequest req,
                   ExecuteRequestOf(core_->session_id(), executable, args, options));
  absl::StatusOr<v1::ExecuteResponse> executed = core_->transport().Execute(req, options.cancel);
  // The server takes donated arguments before the program runs, so they are
  // gone even when it fails: never reuse or release them again.
  MarkDonated(options.donate, args);
  if (!executed.ok()) {
    GiveUpDonated(*core_, req, executed.status());
    return executed.status();
  }
  return ExecuteResultOf(core_, req, *executed, executable.device(), args.size(),
                         InlineShapes(req, options));
}

absl::StatusOr<std::shared_ptr<PendingExecution>> Client::ExecuteAsync(
    std::shared_ptr<const Executable> executable,
    const std::vector<std::shared_ptr<DeviceBuffer>>& args, const ExecuteOptions& options) {
  if (executable == nullptr) return absl::InvalidArgumentError("null executable");
  ASSIGN_OR_RETURN(v1::ExecuteRequest req,
                   ExecuteRequestOf(core_->session_id(), *executable, args, options));
  auto pending = std::make_shared<PendingExecution>();
  std::vector<ir::Shape> shapes = InlineShapes(req, options);
  // Protocol 6: numbered, so the server starts it after the ones sent
  // before and names its outputs now; they can be the next execution's
  // arguments before this one's reply is in.
  const bool sequenced = protocol_version_ >= 6;
  // Numbers are queued in the order they are drawn (calls from several
  // threads take turns here).
  absl::MutexLock order(&core_->order_mu());
  std::vector<std::string> named;
  if (sequenced) {
    const uint64_t sequence = core_->NextSequence();
    req.set_sequence(sequence);
    std::vector<ir::Shape> leaves = ir::FlattenedArrays(executable->result_shape());
    absl::MutexLock lock(&pending->mu_);
    for (size_t k = 0; k < leaves.size(); ++k) {
      pending->outputs_.push_back(std::make_shared<DeviceBuffer>(
          core_, protocol::SequencedHandle(sequence, static_cast<int>(k)), std::move(leaves[k]),
          executable->device()));
      named.push_back(pending->outputs_.back()->handle());
      pending->named_.push_back(pending->outputs_.back());
    }
  }
  // The work holds what the call needs (the executable and the arguments'
  // buffers stay referenced until the reply), never the caller's objects,
  // nor the named outputs: the caller may give them up (drop or donate
  // them) before the reply, as it could the reply's, and nothing but the
  // caller's references may count when it decides to donate them.
  auto work = [core = core_, pending, req = std::move(req), executable = std::move(executable),
               args = args, donate = options.donate, shapes = std::move(shapes),
               named = std::move(named)]() mutable {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<v1::ExecuteResponse> executed =
        core->transport().Execute(req, &pending->canceller_);
    MarkDonated(donate, args);
    if (!executed.ok()) GiveUpDonated(*core, req, executed.status());
    absl::StatusOr<ExecuteResult> result =
        executed.ok()
            ? ExecuteResultOf(core, req, *executed, executable->device(), args.size(), shapes)
            : absl::StatusOr<ExecuteResult>(executed.status());
    if (result.ok() && !named.empty()) {
      if (absl::Status checked = CheckNamedOutputs(*result, named); !checked.ok()) result = checked;
    }
    // Before the result is handed out, so that the caller's next step sees
    // the arguments referenced only where it holds them (donation).
    args.clear();
    executable.reset();
    pending->Finish(std::move(result),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  core_->Dispatch(pending, std::move(work), sequenced);
  return pending;
}

absl::StatusOr<ExecuteResult> PendingExecution::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  if (taken_) return absl::FailedPreconditionError("the execution's result was taken already");
  taken_ = true;
  absl::StatusOr<ExecuteResult> result = std::move(result_);
  // The buffers named before the call, where they are alive, in place of
  // the reply's objects for the same handles (each handle released once).
  if (result.ok() && result->outputs.size() == named_.size()) {
    for (size_t k = 0; k < named_.size(); ++k) {
      if (std::shared_ptr<DeviceBuffer> alive = named_[k].lock()) result->outputs[k] = std::move(alive);
    }
  }
  return result;
}

bool PendingExecution::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

std::vector<std::shared_ptr<DeviceBuffer>> PendingExecution::TakeOutputs() {
  absl::MutexLock lock(&mu_);
  return std::move(outputs_);
}

double PendingExecution::round_trip_seconds() const {
  absl::MutexLock lock(&mu_);
  return seconds_;
}

void PendingExecution::Finish(absl::StatusOr<ExecuteResult> result, double seconds) {
  absl::MutexLock lock(&mu_);
  result_ = std::move(result);
  seconds_ = seconds;
  done_ = true;
}

absl::StatusOr<ReplicatedResult> Client::ExecuteReplicated(
    const Executable& executable, const std::vector<ReplicaArguments>& replicas,
    const ExecuteOptions& options) {
  if (replicas.empty()) return absl::InvalidArgumentError("no replicas to run");
  v1::ExecuteRequest req;
  req.set_session_id(core_->session_id());
  req.set_executable_handle(executable.handle());
  for (const ReplicaArguments& replica : replicas) {
    v1::ReplicaArguments* r = req.add_replicas();
    r->set_device(replica.device);
    RETURN_IF_ERROR(AddArguments(replica.args, nullptr, r->mutable_argument_handles(), &req));
  }
  FillRequest(options, &req);
  absl::StatusOr<v1::ExecuteResponse> executed = core_->transport().Execute(req, options.cancel);
  // Given up whatever happens, as for one device (Client::Execute).
  for (const ReplicaArguments& replica : replicas) MarkDonated(options.donate, replica.args);
  if (!executed.ok()) {
    GiveUpDonated(*core_, req, executed.status());
    return executed.status();
  }
  const v1::ExecuteResponse& resp = *executed;
  if (resp.replicas_size() != static_cast<int>(replicas.size())) {
    return absl::InternalError(absl::StrCat("the server returned ", resp.replicas_size(),
                                            " replica results for ", replicas.size(),
                                            " replicas (protocol version 3 needed)"));
  }
  ReplicatedResult result;
  result.execute_micros = resp.execute_micros();
  if (resp.has_profile()) result.profile = resp.profile();
  for (int r = 0; r < resp.replicas_size(); ++r) {
    const v1::ReplicaOutputs& out = resp.replicas(r);
    ASSIGN_OR_RETURN(ExecuteResult replica, ReadOutputs(core_, out.outputs(), out.device()));
    if (out.has_profile()) replica.profile = out.profile();
    replica.execute_micros = resp.execute_micros();
    result.replicas.push_back(std::move(replica));
  }
  return result;
}

absl::StatusOr<v1::MemoryInfoResponse> Client::MemoryInfo(const std::string& device) {
  v1::MemoryInfoRequest req;
  req.set_session_id(core_->session_id());
  req.set_device(device);
  return core_->transport().MemoryInfo(req);
}

absl::Status Client::JoinGroup(const GroupMembership& membership, CallCanceller* cancel) {
  if (protocol_version() < 5) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the server speaks protocol version ", protocol_version(), "; groups of servers need 5"));
  }
  v1::JoinGroupRequest req;
  req.set_session_id(core_->session_id());
  req.set_group_id(membership.id);
  req.set_secret(membership.secret);
  req.set_rank(membership.rank);
  for (const std::string& m : membership.members) req.add_members(m);
  req.set_timeout_millis(absl::ToInt64Milliseconds(membership.timeout));
  return core_->transport().JoinGroup(req, cancel).status();
}

absl::Status Client::LeaveGroup(const std::string& group_id) {
  v1::LeaveGroupRequest req;
  req.set_session_id(core_->session_id());
  req.set_group_id(group_id);
  return core_->transport().LeaveGroup(req).status();
}

absl::StatusOr<std::string> Client::CreateFeedToken(const std::string& device) {
  v1::CreateFeedTokenRequest req;
  req.set_session_id(core_->session_id());
  req.set_device(device);
  ASSIGN_OR_RETURN(v1::CreateFeedTokenResponse resp, core_->transport().CreateFeedToken(req));
  return resp.feed_token();
}

namespace {
v1::FeedTarget Target(const std::string& session, const std::string& device,
                      const std::string& token) {
  v1::FeedTarget target;
  if (token.empty()) {
    target.set_session_id(session);
  } else {
    target.set_feed_token(token);
  }
  target.set_device(device);
  return target;
}
}  // namespace

absl::StatusOr<std::unique_ptr<InfeedStream>> Client::OpenInfeed(const std::string& device,
                                                                 const std::string& feed_token) {
  return core_->transport().OpenInfeed(Target(core_->session_id(), device, feed_token),
                                       core_->options().chunk_bytes);
}

absl::StatusOr<std::unique_ptr<OutfeedStream>> Client::OpenOutfeed(
    const std::string& device, const OutfeedOptions& options) {
  v1::OutfeedRequest req;
  *req.mutable_target() = Target(core_->session_id(), device, options.feed_token);
  req.set_max_values(options.max_values);
  if (options.timeout != absl::InfiniteDuration()) {
    req.set_timeout_millis(std::max<int64_t>(1, absl::ToInt64Milliseconds(options.timeout)));
  }
  return core_->transport().OpenOutfeed(req);
}

absl::StatusOr<v1::MetricsResponse> Client::Metrics() {
  return core_->transport().GetMetrics(v1::MetricsRequest());
}

absl::Status Client::FlushReleases() { return core_->Flush(); }

}  // namespace kiln::client
