// Calls between kiln-servers of one group (runtime/host_group.h): the
// store that member 0 keeps, and whether a member still answers.
#ifndef KILN_SERVER_GRPC_GROUP_H_
#define KILN_SERVER_GRPC_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/host_group.h"

namespace kiln::server {

// How this server reaches the other members: plain TCP, or TLS verified
// with `ca_pem`, presenting `cert_pem`/`key_pem` (this server's own
// certificate) where member 0 asks for a client certificate. Call before
// the server serves.
struct GroupChannelOptions {
  std::string ca_pem;  // empty: no TLS
  std::string cert_pem;
  std::string key_pem;
};
void SetGroupChannelOptions(const GroupChannelOptions& options);

// The store of group `group_id` kept by the kiln-server at `address`,
// reached over gRPC (GroupStore) with the group's secret and
// `authorization` (the joining client's bearer token, or empty). Calls
// retry for up to `timeout` while that server is unreachable or has not
// formed the group yet.
std::shared_ptr<runtime::GroupStore> RemoteGroupStore(const std::string& address,
                                                      const std::string& group_id,
                                                      const std::string& secret,
                                                      absl::Duration timeout,
                                                      const std::string& authorization);

// OK when the kiln-server at `address` answers a health check within
// `timeout` (whatever it answers: a refusal is an answer too).
absl::Status ProbeServer(const std::string& address, absl::Duration timeout);

}  // namespace kiln::server

#endif  // KILN_SERVER_GRPC_GROUP_H_
