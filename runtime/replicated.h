// Replicated execution: one compiled program run on several devices at
// once, its replicas meeting at every all-reduce.
#ifndef KILN_RUNTIME_REPLICATED_H_
#define KILN_RUNTIME_REPLICATED_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/collectives.h"
#include "runtime/device.h"

namespace kiln::runtime {

struct ReplicaRun {
  Device* device = nullptr;  // borrowed; must be of the executable's backend
  std::vector<BufferPtr> args;
  // Queues, timeouts, cancel check and profile of this replica. The id,
  // count and rendezvous are set by ExecuteReplicated.
  ExecuteOptions options;
};

// Runs `executable` once per element of `replicas`, replica i with id i on
// its own thread (replica 0 on the caller's), charging each replica's
// device memory. A replica that fails stops the others at their next
// collective or wait; the error is the first failure, naming its replica
// when there are several.
// `collective_timeout` bounds how long a replica waits for the others at an
// all-reduce.
// With `cross` (borrowed), the replicas here are those of ids
// cross->replica_offset onwards, and the others run on the other servers
// of cross->group; collectives wait for the group's timeout on top.
absl::StatusOr<std::vector<BufferPtr>> ExecuteReplicated(Executable& executable,
                                                         std::vector<ReplicaRun>& replicas,
                                                         absl::Duration collective_timeout,
                                                         const CrossHost* cross = nullptr);

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_REPLICATED_H_
