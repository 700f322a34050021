#include "runtime/feed_queue.h"

namespace kiln::runtime {

absl::Status FeedQueue::Push(ir::Literal value, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return aborted_ || items_.size() < capacity_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError("feed queue stayed full");
  }
  if (aborted_) return absl::CancelledError("feed queue aborted");
  items_.push_back(std::move(value));
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> FeedQueue::Pop(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return aborted_ || !items_.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError("no value arrived in the feed queue");
  }
  if (aborted_) return absl::CancelledError("feed queue aborted");
  ir::Literal value = std::move(items_.front());
  items_.pop_front();
  return value;
}

void FeedQueue::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  items_.clear();
}

void FeedQueue::Reset() {
  absl::MutexLock lock(&mu_);
  aborted_ = false;
}

size_t FeedQueue::size() const {
  absl::MutexLock lock(&mu_);
  return items_.size();
}

}  // namespace kiln::runtime
