// Where the replicas of one replicated execution meet: each collective
// (all-reduce) is a round in which every replica hands in its operands and
// gets back everyone's.
#ifndef KILN_RUNTIME_COLLECTIVES_H_
#define KILN_RUNTIME_COLLECTIVES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/buffer.h"
#include "runtime/feed_queue.h"

namespace kiln::runtime {

// Thread-safe; one per replicated execution, shared by its replicas (each
// replica on its own thread). Replicas run the same program, so their n-th
// collectives are the same instruction.
class ReplicaRendezvous {
 public:
  ReplicaRendezvous(int replica_count, absl::Duration timeout)
      : replica_count_(replica_count), timeout_(timeout), next_round_(replica_count, 0) {}

  int replica_count() const { return replica_count_; }

  // Hands in `operands` for `replica`'s next collective and waits for every
  // replica's. Returns them indexed by replica. The buffers must not change
  // afterwards (they are read by the other replicas). Errors: the status of
  // Abort; DEADLINE_EXCEEDED when a replica does not arrive in time;
  // CANCELLED when `cancelled` turns true.
  absl::StatusOr<std::vector<std::vector<BufferPtr>>> Exchange(
      int replica, std::vector<BufferPtr> operands, const CancelCheck& cancelled);

  // Fails every waiting and later Exchange with `status` (a replica failed,
  // so the others would wait for it forever). The first status wins.
  void Abort(absl::Status status);

 private:
  struct Round {
    int64_t number = -1;
    int arrived = 0;
    std::vector<std::vector<BufferPtr>> values;
  };
  const int replica_count_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  // Rounds alternate between two slots: a replica can only start round n+2
  // after every replica arrived at n+1, that is, after all have read n.
  Round rounds_[2] ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> next_round_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_COLLECTIVES_H_
