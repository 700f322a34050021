// A bounded blocking queue of literals: a device's infeed or outfeed.
#ifndef KILN_RUNTIME_FEED_QUEUE_H_
#define KILN_RUNTIME_FEED_QUEUE_H_

#include <deque>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "compiler/ir/literal.h"

namespace kiln::runtime {

// Thread-safe. Push blocks while the queue is full (backpressure); Pop
// blocks while it is empty. Both give up at their deadline with
// DEADLINE_EXCEEDED, and with CANCELLED once Abort() was called.
class FeedQueue {
 public:
  explicit FeedQueue(size_t capacity) : capacity_(capacity) {}

  absl::Status Push(ir::Literal value, absl::Duration timeout);
  absl::StatusOr<ir::Literal> Pop(absl::Duration timeout);
  // Wakes every waiter with CANCELLED and drops the queued values; the queue
  // accepts values again after Reset().
  void Abort();
  void Reset();
  size_t size() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<ir::Literal> items_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_FEED_QUEUE_H_
