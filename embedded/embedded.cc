#include "embedded/embedded.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/service.h"

namespace kiln::embedded {
namespace {

using client::CallCanceller;
using client::Client;
using client::ConnectOptions;
using client::InfeedStream;
using client::OutfeedStream;
using client::Transport;

// What both in-process feed streams hold: the service's endpoint (or why
// it could not be opened) and a cancel flag its waits poll.
class FeedBase {
 protected:
  FeedBase(server::Service* service, const v1::FeedTarget& target) : service_(service) {
    absl::StatusOr<server::Service::FeedEndpoint> feed = service->OpenFeed(target);
    if (feed.ok()) {
      feed_ = *std::move(feed);
    } else {
      status_ = feed.status();
    }
  }
  runtime::CancelCheck Cancelled() {
    return [this]() { return cancelled_.load(); };
  }

  server::Service* service_;
  server::Service::FeedEndpoint feed_;
  absl::Status status_;
  std::atomic<bool> cancelled_{false};
};

// Values go straight into the session's queue.
class Infeed : public InfeedStream, FeedBase {
 public:
  Infeed(server::Service* service, const v1::FeedTarget& target) : FeedBase(service, target) {}
  absl::Status Write(const ir::Literal& value) override {
    if (!status_.ok()) return status_;
    status_ = service_->Infeed(feed_, value, Cancelled());
    if (status_.ok()) {
      response_.set_values(response_.values() + 1);
      response_.set_bytes(response_.bytes() + value.shape().ByteSize());
    }
    return status_;
  }
  absl::StatusOr<v1::InfeedResponse> Finish() override {
    if (!status_.ok()) return status_;
    return response_;
  }
  void Cancel() override { cancelled_ = true; }

 private:
  v1::InfeedResponse response_;
};

class Outfeed : public OutfeedStream, FeedBase {
 public:
  Outfeed(server::Service* service, const v1::OutfeedRequest& r)
      : FeedBase(service, r.target()),
        max_values_(r.max_values()),
        timeout_(r.timeout_millis() > 0 ? absl::Milliseconds(r.timeout_millis())
                                        : absl::InfiniteDuration()) {}
  absl::StatusOr<std::optional<ir::Literal>> Next() override {
    if (!status_.ok()) return status_;
    if (max_values_ > 0 && read_ >= max_values_) return std::optional<ir::Literal>();
    absl::StatusOr<ir::Literal> value = service_->Outfeed(feed_, timeout_, Cancelled());
    if (!value.ok()) {
      status_ = value.status();
      return status_;
    }
    ++read_;
    return std::optional<ir::Literal>(*std::move(value));
  }
  void Cancel() override { cancelled_ = true; }

 private:
  const int64_t max_values_;
  const absl::Duration timeout_;
  int64_t read_ = 0;
};

// A buffer of the service held by the client as it is.
class HeldBuffer : public client::LocalBuffer {
 public:
  HeldBuffer(const server::Service* owner, runtime::BufferPtr buffer, runtime::Device* device)
      : LocalBuffer(owner), buffer(std::move(buffer)), device(device) {}
  runtime::BufferPtr buffer;  // null once a donation took it
  runtime::Device* const device;
};

// Executions without messages: buffers go in and come out as they are.
class Direct : public client::DirectPath {
 public:
  explicit Direct(server::Service* service) : service_(service) {}

  absl::StatusOr<client::DirectOutputs> Execute(const std::string& session_id,
                                                const std::string& executable_handle,
                                                client::DirectArguments args,
                                                const std::vector<int>& donate,
                                                absl::Duration infeed_timeout,
                                                CallCanceller* cancel) override {
    server::Service::DirectExecution run;
    run.session_id = session_id;
    run.executable_handle = executable_handle;
    run.donated = donate;
    run.infeed_timeout = infeed_timeout;
    if (cancel != nullptr) run.cancelled = [cancel]() { return cancel->cancelled(); };
    run.arguments.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      client::DirectArgument& a = args[i];
      server::Service::DirectArgument& to = run.arguments[i];
      to.value = a.value;
      to.handle = a.handle;
      if (a.local == nullptr) continue;
      // Refused here, the execution still goes to the service, which gives
      // the donated arguments up.
      absl::StatusOr<HeldBuffer*> held = Held(*a.local);
      if (!held.ok()) {
        to.refused = absl::Status(held.status().code(),
                                  absl::StrCat("argument ", i, ": ", held.status().message()));
        continue;
      }
      const bool donated = std::find(donate.begin(), donate.end(), static_cast<int>(i)) != donate.end();
      // A donated buffer nobody else holds goes to the program, which may
      // write its result over it.
      to.buffer = donated && a.local.use_count() == 1 ? std::move((*held)->buffer) : (*held)->buffer;
      to.device = (*held)->device;
      if (to.buffer == nullptr) {
        to.refused = absl::FailedPreconditionError(
            absl::StrCat("argument ", i, ": the buffer was donated to an earlier execution"));
      }
    }
    absl::StatusOr<server::Service::DirectResult> executed = service_->ExecuteDirect(std::move(run));
    args.clear();
    ASSIGN_OR_RETURN(server::Service::DirectResult result, std::move(executed));
    client::DirectOutputs out;
    out.execute_micros = result.execute_micros;
    if (result.profile.has_value()) {
      out.profile.emplace();
      server::ProfileToProto(*result.profile, &*out.profile);
    }
    out.shapes.reserve(result.outputs.size());
    out.outputs.reserve(result.outputs.size());
    for (runtime::BufferPtr& b : result.outputs) {
      out.shapes.push_back(b->shape());
      out.outputs.push_back(std::make_shared<HeldBuffer>(service_, std::move(b), result.device));
    }
    for (runtime::BufferPtr& b : result.argument_buffers) {
      out.argument_buffers.push_back(
          b == nullptr ? nullptr : std::make_shared<HeldBuffer>(service_, std::move(b), result.device));
    }
    return out;
  }

  absl::StatusOr<std::string> Adopt(const std::string& session_id,
                                    const client::LocalBuffer& buffer) override {
    ASSIGN_OR_RETURN(HeldBuffer * held, Held(buffer));
    return service_->AdoptBuffer(session_id, held->buffer, held->device);
  }

  absl::StatusOr<ir::Literal> Read(const std::string& session_id,
                                   const client::LocalBuffer& buffer) override {
    ASSIGN_OR_RETURN(HeldBuffer * held, Held(buffer));
    if (held->buffer == nullptr) {
      return absl::FailedPreconditionError("the buffer was donated to an execution");
    }
    return service_->ReadDirect(session_id, *held->buffer, *held->device);
  }

 private:
  // The buffer as this service's (another embedded service's buffers are
  // not this one's to run).
  absl::StatusOr<HeldBuffer*> Held(const client::LocalBuffer& buffer) const {
    if (buffer.owner() != service_) {
      return absl::InvalidArgumentError(
          "the buffer belongs to another client's service; copy it through the host");
    }
    // This service's LocalBuffers are all HeldBuffers.
    return const_cast<HeldBuffer*>(static_cast<const HeldBuffer*>(&buffer));
  }

  server::Service* const service_;
};

class InProcessTransport : public Transport {
 public:
  using Transport::Execute;
  using Transport::JoinGroup;
  explicit InProcessTransport(std::unique_ptr<server::Service> service)
      : service_(std::move(service)), direct_(service_.get()) {}

  client::DirectPath* direct() override { return &direct_; }

  absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& r) override {
    return service_->Handshake(r);
  }
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest& r) override {
    return service_->KeepAlive(r);
  }
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(
      const v1::CloseSessionRequest& r) override {
    return service_->CloseSession(r);
  }
  absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(
      const v1::TransferHeader& header, absl::string_view data, int64_t chunk_bytes) override {
    // One piece: nothing crosses a wire.
    bool sent = false;
    return service_->TransferToDevice(
        header, "", [&](std::string* out) -> absl::StatusOr<bool> {
          if (sent) return false;
          out->assign(data.data(), data.size());
          sent = true;
          return true;
        });
  }
  absl::Status TransferFromDevice(
      const v1::TransferFromDeviceRequest& r,
      const std::function<absl::Status(v1::TransferFromDeviceChunk&)>& on_chunk) override {
    absl::Status local;
    absl::Status remote = service_->TransferFromDevice(r, [&](const v1::TransferFromDeviceChunk& c) {
      v1::TransferFromDeviceChunk copy = c;
      local = on_chunk(copy);
      return local.ok();
    });
    return local.ok() ? remote : local;
  }
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& r) override {
    return service_->Release(r);
  }
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r) override {
    return service_->Compile(r);
  }
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r,
                                              CallCanceller* cancel) override {
    if (cancel == nullptr) return service_->Execute(r);
    return service_->Execute(r, [cancel]() { return cancel->cancelled(); });
  }
  absl::StatusOr<v1::CreateFeedTokenResponse> CreateFeedToken(
      const v1::CreateFeedTokenRequest& r) override {
    return service_->CreateFeedToken(r);
  }
  absl::StatusOr<std::unique_ptr<InfeedStream>> OpenInfeed(const v1::FeedTarget& target,
                                                           int64_t) override {
    return std::unique_ptr<InfeedStream>(new Infeed(service_.get(), target));
  }
  absl::StatusOr<std::unique_ptr<OutfeedStream>> OpenOutfeed(
      const v1::OutfeedRequest& r) override {
    return std::unique_ptr<OutfeedStream>(new Outfeed(service_.get(), r));
  }
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) override {
    return service_->MemoryInfo(r);
  }
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest& r,
                                                  CallCanceller* cancel) override {
    return service_->JoinGroup(r, "", [cancel] { return cancel != nullptr && cancel->cancelled(); });
  }
  absl::StatusOr<v1::LeaveGroupResponse> LeaveGroup(const v1::LeaveGroupRequest& r) override {
    return service_->LeaveGroup(r);
  }
  absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest&) override {
    return service_->GetMetrics();
  }

 private:
  std::unique_ptr<server::Service> service_;
  Direct direct_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Connect(const Options& options) {
  server::ServiceOptions service_options;
  ASSIGN_OR_RETURN(service_options.backends,
                   runtime::ParseBackendSpecs(options.devices, options.backend_config));
  // In-process, the client cannot vanish without the service: a long lease.
  service_options.lease = absl::Hours(24);
  ASSIGN_OR_RETURN(std::unique_ptr<server::Service> service,
                   server::Service::Create(service_options));
  ConnectOptions connect;
  connect.client_name = options.client_name;
  return Client::Create(std::make_unique<InProcessTransport>(std::move(service)), connect);
}

}  // namespace kiln::embedded
