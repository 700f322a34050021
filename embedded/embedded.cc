#include "embedded/embedded.h"

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

class InProcessTransport : public Transport {
 public:
  using Transport::Execute;
  using Transport::JoinGroup;
  explicit InProcessTransport(std::unique_ptr<server::Service> service)
      : service_(std::move(service)) {}

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
