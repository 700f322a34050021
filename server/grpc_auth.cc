#include "server/grpc_auth.h"

#include "absl/strings/string_view.h"

namespace kiln::server {

grpc::Status CallAuth::Check(const grpc::ServerContext* ctx, std::string* caller) const {
  if (tokens_ == nullptr) return grpc::Status::OK;
  absl::string_view authorization;
  const auto& metadata = ctx->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  absl::StatusOr<std::string> name = tokens_->Authenticate(authorization);
  if (name.ok()) {
    if (caller != nullptr) *caller = *std::move(name);
    return grpc::Status::OK;
  }
  metrics_->Add("auth_failures");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(name.status().message()));
}

}  // namespace kiln::server
