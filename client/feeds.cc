#include "client/feeds.h"

#include <algorithm>

namespace kiln::client {

InfeedLoader::InfeedLoader(std::unique_ptr<InfeedStream> stream, BatchSource next, int prefetch)
    : stream_(std::move(stream)),
      next_(std::move(next)),
      prefetch_(static_cast<size_t>(std::max(1, prefetch))) {
  preparer_ = std::thread([this]() { Prepare(); });
  sender_ = std::thread([this]() { Send(); });
}

InfeedLoader::~InfeedLoader() {
  Stop();
  Wait().IgnoreError();
}

void InfeedLoader::Prepare() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || ready_.size() < prefetch_;
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
    }
    absl::StatusOr<std::optional<std::vector<ir::Literal>>> batch = next_();
    absl::MutexLock lock(&mu_);
    if (!batch.ok()) {
      if (status_.ok()) status_ = batch.status();
      stop_ = true;
      return;
    }
    if (!batch->has_value()) {
      source_done_ = true;
      return;
    }
    ready_.push_back(std::move(**batch));
  }
}

void InfeedLoader::Send() {
  while (true) {
    std::vector<ir::Literal> batch;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || !ready_.empty() || source_done_;
      };
      mu_.Await(absl::Condition(&work));
      if (stop_ || ready_.empty()) return;
      batch = std::move(ready_.front());
      ready_.pop_front();
    }
    for (const ir::Literal& value : batch) {
      absl::Status st = stream_->Write(value);
      if (!st.ok()) {
        absl::MutexLock lock(&mu_);
        // The stream's own verdict (from Finish) is the better message.
        stop_ = true;
        return;
      }
    }
    absl::MutexLock lock(&mu_);
    ++written_;
  }
}

absl::Status InfeedLoader::Wait() {
  if (preparer_.joinable()) preparer_.join();
  if (sender_.joinable()) sender_.join();
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return status_;
    finished_ = true;
  }
  absl::StatusOr<v1::InfeedResponse> verdict = stream_->Finish();
  absl::MutexLock lock(&mu_);
  if (status_.ok() && !verdict.ok()) status_ = verdict.status();
  return status_;
}

void InfeedLoader::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ || finished_) return;
    stop_ = true;
  }
  stream_->Cancel();
}

int64_t InfeedLoader::batches_written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

}  // namespace kiln::client
