#include "runtime/feed_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::runtime {
namespace {

// How often a waiter with a cancel check looks at it.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

}  // namespace

absl::Status FeedQueue::Await(const absl::Condition& ready, uint64_t generation,
                              absl::Duration timeout, const CancelCheck& cancelled,
                              absl::string_view what) {
  const absl::Time deadline = absl::Now() + timeout;
  auto aborted = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return generation_ != generation; };
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration slice = cancelled ? std::min(left, kCancelPoll) : left;
    if (slice > absl::ZeroDuration()) mu_.AwaitWithTimeout(ready, slice);
    if (aborted()) return absl::CancelledError(absl::StrCat(what, ": the queue was aborted"));
    // `ready` includes a failure that concerns the caller: the caller
    // tells the two apart.
    if (ready.Eval()) return absl::OkStatus();
    if (cancelled && cancelled()) return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " after ", absl::FormatDuration(timeout)));
    }
  }
}

absl::Status FeedQueue::Push(ir::Literal value, absl::Duration timeout,
                             const CancelCheck& cancelled, std::optional<uint64_t> since,
                             MemoryCharge charge) {
  if (account_ != nullptr) {
    // Charged before waiting for room: the value is held while it waits.
    if (charge.account() != account_) charge = MemoryCharge(account_);
    const int64_t rest = value.shape().ByteSize() - charge.bytes();
    if (rest > 0) {
      RETURN_IF_ERROR(charge.Grow(rest, absl::StrCat("the feed value ", value.shape().ToString())));
    }
  }
  absl::MutexLock lock(&mu_);
  if (FailedSince(since)) return failure_;
  const uint64_t generation = generation_;
  auto ready = [this, generation, since]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return generation_ != generation || FailedSince(since) || items_.size() < capacity_;
  };
  absl::Status st = Await(absl::Condition(&ready), generation, timeout, cancelled,
                          "the feed queue stayed full");
  if (!st.ok()) return st;
  if (FailedSince(since)) return failure_;
  items_.push_back({std::move(value), std::move(charge)});
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> FeedQueue::Pop(absl::Duration timeout, const CancelCheck& cancelled,
                                           std::optional<uint64_t> since, MemoryCharge* charge) {
  Item item;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t generation = generation_;
    // A failed queue still hands out what it holds, then the failure.
    auto ready = [this, generation, since]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return generation_ != generation || !items_.empty() || FailedSince(since);
    };
    ++waiting_pops_;
    absl::Status st = Await(absl::Condition(&ready), generation, timeout, cancelled,
                            "no value arrived in the feed queue");
    --waiting_pops_;
    if (!st.ok()) return st;
    if (items_.empty()) return failure_;
    item = std::move(items_.front());
    items_.pop_front();
  }
  if (charge != nullptr) *charge = std::move(item.charge);
  return std::move(item.value);
}

void FeedQueue::Fail(absl::Status reason, bool drop_values) {
  absl::MutexLock lock(&mu_);
  ++failures_;
  failure_ = std::move(reason);
  if (drop_values) items_.clear();
}

uint64_t FeedQueue::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

void FeedQueue::Abort() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  items_.clear();
}

size_t FeedQueue::waiting_pops() const {
  absl::MutexLock lock(&mu_);
  return waiting_pops_;
}

bool FeedQueue::AwaitWaitingPops(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return waiting_pops_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

size_t FeedQueue::size() const {
  absl::MutexLock lock(&mu_);
  return items_.size();
}

}  // namespace kiln::runtime
