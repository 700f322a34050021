// The gRPC transport: the only file of the client library with gRPC types.
#ifndef KILN_CLIENT_GRPC_TRANSPORT_H_
#define KILN_CLIENT_GRPC_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/transport.h"

namespace kiln::client {

// Opens a channel to `address` and waits up to `connect_timeout` for it to
// become ready. `call_timeout` (0: none) bounds every unary call.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGrpc(const std::string& address,
                                                       absl::Duration connect_timeout,
                                                       absl::Duration call_timeout);

}  // namespace kiln::client

#endif  // KILN_CLIENT_GRPC_TRANSPORT_H_
