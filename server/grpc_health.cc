#include "server/grpc_health.h"

#include <string>

namespace kiln::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

grpc::Status HealthService::Check(grpc::ServerContext* ctx, const HealthCheckRequest* req,
                                  HealthCheckResponse* resp) {
  if (grpc::Status st = auth_->Check(ctx); !st.ok()) return st;
  if (!req->service().empty() && req->service() != "kiln.v1.KilnService") {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "unknown service '" + req->service() + "' (known: \"\", kiln.v1.KilnService)");
  }
  resp->set_status(serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx, const HealthCheckRequest*,
                                  grpc::ServerWriter<HealthCheckResponse>*) {
  if (grpc::Status st = auth_->Check(ctx); !st.ok()) return st;
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "kiln-server answers Check only; poll it");
}

}  // namespace kiln::server
