// The gRPC face of the Service: translates calls and maps statuses. The only
// place below server/ where gRPC types appear.
#ifndef KILN_SERVER_GRPC_SERVICE_H_
#define KILN_SERVER_GRPC_SERVICE_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/service.grpc.pb.h"
#include "server/grpc_auth.h"
#include "server/grpc_health.h"
#include "server/service.h"
#include "server/grpc_tls.h"
#include "server/tokens.h"

namespace kiln::server {

// The one mapping from internal status to gRPC status.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Every call first passes `auth` (borrowed, must outlive it). A non-empty
// `security_warning` goes to every client in its handshake.
class GrpcService final : public v1::KilnService::Service {
 public:
  GrpcService(kiln::server::Service* service, const CallAuth* auth,
              std::string security_warning = "")
      : service_(service), auth_(auth), security_warning_(std::move(security_warning)) {}

  grpc::Status Handshake(grpc::ServerContext*, const v1::HandshakeRequest*,
                         v1::HandshakeResponse*) override;
  grpc::Status KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest*,
                         v1::KeepAliveResponse*) override;
  grpc::Status CloseSession(grpc::ServerContext*, const v1::CloseSessionRequest*,
                            v1::CloseSessionResponse*) override;
  grpc::Status TransferToDevice(grpc::ServerContext*,
                                grpc::ServerReader<v1::TransferToDeviceChunk>*,
                                v1::TransferToDeviceResponse*) override;
  grpc::Status TransferFromDevice(grpc::ServerContext*, const v1::TransferFromDeviceRequest*,
                                  grpc::ServerWriter<v1::TransferFromDeviceChunk>*) override;
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest*,
                       v1::ReleaseResponse*) override;
  grpc::Status Compile(grpc::ServerContext*, const v1::CompileRequest*,
                       v1::CompileResponse*) override;
  grpc::Status Execute(grpc::ServerContext*, const v1::ExecuteRequest*,
                       v1::ExecuteResponse*) override;
  grpc::Status MemoryInfo(grpc::ServerContext*, const v1::MemoryInfoRequest*,
                          v1::MemoryInfoResponse*) override;
  grpc::Status GetMetrics(grpc::ServerContext*, const v1::MetricsRequest*,
                          v1::MetricsResponse*) override;
  grpc::Status CreateFeedToken(grpc::ServerContext*, const v1::CreateFeedTokenRequest*,
                               v1::CreateFeedTokenResponse*) override;
  grpc::Status Infeed(grpc::ServerContext*, grpc::ServerReader<v1::InfeedChunk>*,
                      v1::InfeedResponse*) override;
  grpc::Status Outfeed(grpc::ServerContext*, const v1::OutfeedRequest*,
                       grpc::ServerWriter<v1::OutfeedChunk>*) override;
  grpc::Status JoinGroup(grpc::ServerContext*, const v1::JoinGroupRequest*,
                         v1::JoinGroupResponse*) override;
  grpc::Status LeaveGroup(grpc::ServerContext*, const v1::LeaveGroupRequest*,
                          v1::LeaveGroupResponse*) override;
  // Between servers: the token of the client that formed the group, and
  // the group's secret.
  grpc::Status GroupStore(grpc::ServerContext*, const v1::GroupStoreRequest*,
                          v1::GroupStoreResponse*) override;

 private:
  // The token check, and for an identified caller (a token's name, or
  // without tokens a verified client certificate's identity) that
  // `session_id` (if not empty) was opened by the same identity:
  // PERMISSION_DENIED otherwise. The identity goes to `caller` (empty for
  // an anonymous caller, whose sessions any anonymous caller may use).
  grpc::Status Authorize(const grpc::ServerContext* ctx, const std::string& session_id,
                         std::string* caller = nullptr);

  kiln::server::Service* service_;  // borrowed
  const CallAuth* auth_;            // borrowed
  const std::string security_warning_;
  absl::Mutex owners_mu_;
  // Session id -> the identity that opened it (identified callers only).
  absl::flat_hash_map<std::string, std::string> owners_ ABSL_GUARDED_BY(owners_mu_);
  uint64_t handshakes_ ABSL_GUARDED_BY(owners_mu_) = 0;
};

struct GrpcServerOptions {
  std::string address = "127.0.0.1:0";  // port 0 picks a free port
  TlsFiles tls;                         // none: plaintext
  const TokenStore* tokens = nullptr;   // borrowed, must outlive the server; null: no tokens
  std::string security_warning;         // shown to every client (CheckExposure)
};

// A running gRPC server around a Service. Thread-safe.
class GrpcServer {
 public:
  // Listens on `address` ("127.0.0.1:0" picks a free port), plaintext and
  // without tokens.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(kiln::server::Service* service,
                                                           const std::string& address);
  // INVALID_ARGUMENT for unusable TLS files, UNAVAILABLE when it cannot
  // listen.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(kiln::server::Service* service,
                                                           const GrpcServerOptions& options);
  // "127.0.0.1:PORT" as bound.
  const std::string& address() const { return address_; }
  // Stops accepting calls; in-flight calls get `grace` to finish, then are
  // cancelled.
  void Shutdown(absl::Duration grace);
  void Wait();

 private:
  std::unique_ptr<CallAuth> auth_;
  std::unique_ptr<GrpcService> handler_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_GRPC_SERVICE_H_
