// grpc.health.v1.Health for kiln-server: SERVING while it accepts calls,
// NOT_SERVING once it shuts down. Served by the server itself (not gRPC's
// built-in service) so that a probe passes the same token check as every
// other call.
#ifndef KILN_SERVER_GRPC_HEALTH_H_
#define KILN_SERVER_GRPC_HEALTH_H_

#include <atomic>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/grpc_auth.h"

namespace kiln::server {

// Thread-safe. Borrows `auth`, which must outlive it.
class HealthService final : public grpc::health::v1::Health::Service {
 public:
  explicit HealthService(const CallAuth* auth) : auth_(auth) {}

  // "" (the whole server) and "kiln.v1.KilnService" are known; any other
  // name is NOT_FOUND.
  grpc::Status Check(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::health::v1::HealthCheckResponse* resp) override;
  // Watching would hold a server thread per watcher for as long as the
  // client likes: UNIMPLEMENTED; probes poll Check.
  grpc::Status Watch(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

  void SetServing(bool serving) { serving_ = serving; }

 private:
  const CallAuth* auth_;
  std::atomic<bool> serving_{true};
};

}  // namespace kiln::server

#endif  // KILN_SERVER_GRPC_HEALTH_H_
