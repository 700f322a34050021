// Client::Embedded: the service runs in this process and the client calls it
// directly, without sockets.
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "compiler/ir/status_macros.h"
#include "server/service.h"

namespace kiln::client {
namespace {

class InProcessTransport : public Transport {
 public:
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
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r) override {
    return service_->Execute(r);
  }
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) override {
    return service_->MemoryInfo(r);
  }
  absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest&) override {
    return service_->GetMetrics();
  }

 private:
  std::unique_ptr<server::Service> service_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Embedded(const EmbeddedOptions& options) {
  server::ServiceOptions service_options;
  service_options.cpu_devices = options.cpu_devices;
  service_options.cpu_memory_bytes = options.cpu_memory_bytes;
  // In-process, the client cannot vanish without the service: a long lease.
  service_options.lease = absl::Hours(24);
  ASSIGN_OR_RETURN(std::unique_ptr<server::Service> service,
                   server::Service::Create(service_options));
  ConnectOptions connect;
  connect.client_name = options.client_name;
  return Create(std::make_unique<InProcessTransport>(std::move(service)), connect);
}

}  // namespace kiln::client
