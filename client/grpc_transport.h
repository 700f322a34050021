// The gRPC transport: the only file of the client library with gRPC types.
#ifndef KILN_CLIENT_GRPC_TRANSPORT_H_
#define KILN_CLIENT_GRPC_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/security.h"
#include "client/transport.h"

namespace kiln::client {

struct GrpcOptions {
  // How long to wait for the channel to become ready.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadlines per call kind (zero: none). Control calls (handshake,
  // keep-alive, release, memory info, metrics, feed tokens) answer at once
  // unless the server is stuck; compiles may take minutes; executions run
  // device loops for hours, so they have none and rely on keep-alive pings.
  absl::Duration control_timeout = absl::Seconds(60);
  absl::Duration compile_timeout = absl::Minutes(30);
  absl::Duration execute_timeout = absl::ZeroDuration();
  // HTTP/2 keep-alive pings on the channel, also while no call is active:
  // a server that stops answering fails the calls within about
  // keepalive_time + keepalive_timeout instead of never.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // A call made while the connection is down (it broke and the channel is
  // making it again) waits this long for it before failing UNAVAILABLE.
  // The calls of one outage share the wait: once it has passed they fail
  // at once until the connection is back.
  // The session and its handles live on the server for the lease, so a
  // client whose connection comes back within it carries on unchanged.
  absl::Duration reconnect_timeout = absl::Seconds(10);
  // TLS and bearer token; empty fields are taken from KILN_* environment
  // variables (client/security.h).
  SecurityOptions security;
};

// Opens a channel to `address` and waits up to `options.connect_timeout`
// for it to become ready. UNAVAILABLE when it does not (at once when a TLS
// handshake fails, saying why); INVALID_ARGUMENT for unusable security
// options.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGrpc(const std::string& address,
                                                       const GrpcOptions& options = {});

// Asks the server's grpc.health.v1 service (with the bearer token, if any)
// and returns its status: "SERVING", "NOT_SERVING" or "UNKNOWN". An error
// when the call fails (UNAUTHENTICATED without a valid token).
absl::StatusOr<std::string> CheckHealth(const std::string& address, const GrpcOptions& options = {});

}  // namespace kiln::client

#endif  // KILN_CLIENT_GRPC_TRANSPORT_H_
