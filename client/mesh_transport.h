// Several kiln-servers behind one Transport, so that a Client (and the lazy
// tensors, data parallelism and training built on it) drives them as one
// server: devices read "host<i>/<device>" ("host1/tpu:3"), handles
// "host<i>/<handle>". A program compiled on one server is compiled on
// another when it first runs there. A replicated execution whose replicas
// span servers runs as a group of those servers (client/mesh.h explains
// groups), formed on first use and formed anew after a failure.
//
//   auto client = Client::ConnectMesh({"hostA:8470", "hostB:8470"}, options);
//   DataParallel dp(ctx, {"host0/tpu:0", ..., "host1/tpu:7"});
#ifndef KILN_CLIENT_MESH_TRANSPORT_H_
#define KILN_CLIENT_MESH_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/transport.h"

namespace kiln::client {

// `hosts` are connected transports, one per server, and `addresses` their
// addresses (which the servers of a group use to reach each other).
// `group_timeout` bounds forming a group and each exchange between the
// servers.
std::unique_ptr<Transport> MakeMeshTransport(std::vector<std::unique_ptr<Transport>> hosts,
                                             std::vector<std::string> addresses,
                                             absl::Duration group_timeout);

}  // namespace kiln::client

#endif  // KILN_CLIENT_MESH_TRANSPORT_H_
