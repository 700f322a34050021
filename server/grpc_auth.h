// The bearer-token check every gRPC call of kiln-server passes first, the
// health check included.
#ifndef KILN_SERVER_GRPC_AUTH_H_
#define KILN_SERVER_GRPC_AUTH_H_

#include "grpcpp/grpcpp.h"
#include "server/metrics.h"
#include "server/tokens.h"

namespace kiln::server {

// Thread-safe. Borrows `tokens` (null: no token is required) and `metrics`;
// both must outlive it.
class CallAuth {
 public:
  CallAuth(const TokenStore* tokens, Metrics* metrics) : tokens_(tokens), metrics_(metrics) {}

  // OK when the call carries a known token (or none is required), with
  // the token's name in `caller` (if not null); UNAUTHENTICATED saying what
  // was wrong otherwise, counted in the `auth_failures` counter.
  grpc::Status Check(const grpc::ServerContext* ctx, std::string* caller = nullptr) const;

  bool required() const { return tokens_ != nullptr; }

 private:
  const TokenStore* tokens_;
  Metrics* metrics_;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_GRPC_AUTH_H_
