// A bounded blocking queue of literals: a device's infeed or outfeed.
#ifndef KILN_RUNTIME_FEED_QUEUE_H_
#define KILN_RUNTIME_FEED_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "compiler/ir/literal.h"
#include "runtime/cancel_check.h"
#include "runtime/memory.h"

namespace kiln::runtime {

// Thread-safe. Push blocks while the queue is full (backpressure); Pop
// blocks while it is empty. Both give up at their deadline with
// DEADLINE_EXCEEDED, with CANCELLED when `cancelled` turns true (polled a
// few times a second), and with CANCELLED when Abort() runs while they wait.
// A queue with an account (a session's host memory) charges each value's
// bytes to it from the moment it is pushed until it is popped or dropped.
class FeedQueue {
 public:
  explicit FeedQueue(size_t capacity, std::shared_ptr<MemoryAccount> account = nullptr)
      : capacity_(capacity), account_(std::move(account)) {}

  // `since`: the failures() count when the caller began (opened its stream);
  // a Fail after that ends its waits and calls. Null: failures do not
  // concern the caller (the program that reads and writes the queue).
  // `charge`: what the caller has already charged for the value to the
  // queue's account (a value assembled from a stream); the queue charges
  // the rest, and a charge past the account's limit is RESOURCE_EXHAUSTED
  // (the value is dropped).
  absl::Status Push(ir::Literal value, absl::Duration timeout,
                    const CancelCheck& cancelled = nullptr,
                    std::optional<uint64_t> since = std::nullopt, MemoryCharge charge = {});
  // `charge`, when given, takes over the value's charge (the caller still
  // holds the value's memory, a reply being sent); otherwise it ends here.
  absl::StatusOr<ir::Literal> Pop(absl::Duration timeout, const CancelCheck& cancelled = nullptr,
                                  std::optional<uint64_t> since = std::nullopt,
                                  MemoryCharge* charge = nullptr);
  // Wakes every current waiter with CANCELLED and drops the queued values.
  // Later calls work as before.
  void Abort();
  // Records that the program using the queue failed with `reason`: callers
  // that began before (see `since`) get `reason` from Push, and from Pop
  // once the values still queued are read; their waits end at once. With
  // `drop_values` the queued values go. Callers that begin afterwards (a new
  // stream, the next program) are not affected.
  void Fail(absl::Status reason, bool drop_values);
  uint64_t failures() const;
  size_t size() const;
  size_t capacity() const { return capacity_; }
  // How many Pop calls wait for a value now, and a wait until at least `n`
  // do (false when `timeout` passes first): lets a caller (a test, a
  // monitor) know that a program has reached its infeed.
  size_t waiting_pops() const;
  bool AwaitWaitingPops(size_t n, absl::Duration timeout) const;

 private:
  // Whether a Fail came after a caller that began at `since`.
  bool FailedSince(std::optional<uint64_t> since) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return since && failures_ > *since;
  }
  // Waits until `ready` holds, the generation changes, the deadline passes
  // or `cancelled` turns true; returns the reason it stopped waiting.
  absl::Status Await(const absl::Condition& ready, uint64_t generation, absl::Duration timeout,
                     const CancelCheck& cancelled, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Item {
    ir::Literal value;
    MemoryCharge charge;
  };
  const size_t capacity_;
  const std::shared_ptr<MemoryAccount> account_;
  mutable absl::Mutex mu_;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_pops_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // the latest
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_FEED_QUEUE_H_
