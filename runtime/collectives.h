// Where the replicas of one replicated execution meet: each collective
// (all-reduce) is a round in which every replica hands in its operands and
// gets back everyone's.
#ifndef KILN_RUNTIME_COLLECTIVES_H_
#define KILN_RUNTIME_COLLECTIVES_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/buffer.h"
#include "runtime/feed_queue.h"
#include "runtime/host_group.h"

namespace kiln::runtime {

class Device;

// The servers a replicated execution spans, seen from one of them: this
// server runs replicas [replica_offset, replica_offset + its count) of
// `replica_count`, the others run the rest.
struct CrossHost {
  HostGroup* group = nullptr;  // borrowed
  int replica_offset = 0;
  int replica_count = 0;
  // Where the other servers' operands land (one of this server's devices,
  // of the executable's kind). Borrowed.
  Device* device = nullptr;
  // What every server must agree on at each round: the program (a hash of
  // its fingerprint) and which execution of the group this is.
  uint64_t program = 0;
  int64_t execution = 0;
};

// How an all-reduce combines its operands, for the path across servers
// that reduces each server's replicas first and then the servers' partial
// results: out = a (+) b over `count` elements of operand `operand`.
struct Reduction {
  std::function<void(size_t operand, void* out, const void* a, const void* b, size_t count)>
      combine;
};

// Thread-safe; one per replicated execution, shared by its replicas (each
// replica on its own thread). Replicas run the same program, so their n-th
// collectives are the same instruction.
class ReplicaRendezvous {
 public:
  ReplicaRendezvous(int replica_count, absl::Duration timeout)
      : local_count_(replica_count),
        replica_count_(replica_count),
        timeout_(timeout),
        next_round_(replica_count, 0) {}
  // `local_count` replicas here, the others on the servers of `cross`: the
  // last local replica to arrive at a round exchanges the local operands
  // for the other servers' (within the group's timeout).
  ReplicaRendezvous(int local_count, absl::Duration timeout, const CrossHost& cross)
      : local_count_(local_count),
        replica_count_(cross.replica_count),
        timeout_(timeout),
        cross_(cross),
        next_round_(local_count, 0) {}

  // Replicas on all servers.
  int replica_count() const { return replica_count_; }

  // Hands in `operands` for `replica`'s next collective and waits for every
  // replica's. Returns them indexed by replica (its global id). The buffers must not change
  // afterwards (they are read by the other replicas). Errors: the status of
  // Abort; DEADLINE_EXCEEDED when a replica does not arrive in time;
  // CANCELLED when `cancelled` turns true.
  // With `reduction`, across servers (crosses_hosts()), every replica
  // gets the operands of all replicas already reduced (buffers this
  // server's replicas share: read only), as its own entry of the result
  // (the others are empty), and `*reduced` is set.
  // `kind` names the collective (its opcode, reduction and groups, hashed
  // by the caller): replicas at different kinds fail.
  absl::StatusOr<std::vector<std::vector<BufferPtr>>> Exchange(
      int replica, std::vector<BufferPtr> operands, const CancelCheck& cancelled,
      uint64_t kind = 0, const Reduction* reduction = nullptr, bool* reduced = nullptr);

  // Whether the replicas span several servers.
  bool crosses_hosts() const { return cross_.group != nullptr; }

  // Fails every waiting and later Exchange with `status` (a replica failed,
  // so the others would wait for it forever). The first status wins.
  void Abort(absl::Status status);

 private:
  struct Round {
    int64_t number = -1;
    int arrived = 0;
    bool ready = false;  // every replica's operands are in `values`
    bool exchanging = false;  // a replica is exchanging with the other servers
    bool reduced = false;     // `values` holds each replica's reduced operands
    std::vector<std::vector<BufferPtr>> values;
    std::vector<uint64_t> kinds;  // each replica's `kind`
  };
  // OK when every local replica handed in operands of the shapes of the
  // first one's.
  absl::Status SameOperands(const std::vector<std::vector<BufferPtr>>& values,
                            const std::vector<uint64_t>& kinds) const;
  // The other servers' replicas' operands for round `number`, given this
  // server's (by local replica).
  absl::StatusOr<std::vector<std::vector<BufferPtr>>> ExchangeAcrossHosts(
      int64_t number, const std::vector<std::vector<BufferPtr>>& local, uint64_t kind);
  // All replicas' operands for round `number` reduced (this server's
  // replicas in order, then the servers' partial results through Gloo), by
  // local replica (the same buffers for each).
  absl::StatusOr<std::vector<std::vector<BufferPtr>>> ReduceAcrossHosts(
      int64_t number, const std::vector<std::vector<BufferPtr>>& local, uint64_t kind,
      const Reduction& reduction);

  const int local_count_;
  const int replica_count_;
  const absl::Duration timeout_;
  const CrossHost cross_;
  absl::Mutex mu_;
  // Rounds alternate between two slots: a replica can only start round n+2
  // after every replica arrived at n+1, that is, after all have read n.
  Round rounds_[2] ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> next_round_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_COLLECTIVES_H_
