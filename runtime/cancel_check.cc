#include "runtime/cancel_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace kiln::runtime {

namespace {
// Steady: a wall clock stepped back would delay every ask by as much.
using Clock = std::chrono::steady_clock;
}  // namespace

struct CancelWatch::Entry {
  // Held while `slow` is asked, and by the destructor to stop asking.
  absl::Mutex mu;
  CancelCheck slow ABSL_GUARDED_BY(mu);
  absl::Duration period;
  Clock::time_point next_ask;  // guarded by the watcher's lock
  std::atomic<bool> cancelled{false};
};

namespace {

// The thread that asks every watched check: it sleeps while there is none.
class Watcher {
 public:
  static Watcher& Get() {
    // Leaked: the thread outlives static destruction.
    static Watcher* const watcher = new Watcher;
    return *watcher;
  }

  void Add(std::shared_ptr<CancelWatch::Entry> entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entry->next_ask = Clock::now() + absl::ToChronoNanoseconds(entry->period);
    // The watcher sleeps until its earliest ask: woken only when this one is
    // due sooner.
    if (entry->next_ask < sleeping_until_) added_.notify_one();
    entries_.insert(std::move(entry));
    if (!started_) {
      std::thread([this] { Loop(); }).detach();
      started_ = true;
    }
  }

  void Remove(const std::shared_ptr<CancelWatch::Entry>& entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(entry);
  }

 private:
  void Loop() {
    std::vector<std::shared_ptr<CancelWatch::Entry>> due;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_until_ = Clock::time_point::max();
        for (const auto& e : entries_) sleeping_until_ = std::min(sleeping_until_, e->next_ask);
        // Woken before then: an entry added meanwhile is due sooner. A
        // standard condition variable, not absl's: this Abseil times its
        // waits on the wall clock.
        if (sleeping_until_ == Clock::time_point::max()) {
          added_.wait(lock);
        } else {
          added_.wait_until(lock, sleeping_until_);
        }
        sleeping_until_ = Clock::time_point::min();
        const Clock::time_point now = Clock::now();
        for (const auto& e : entries_) {
          if (e->next_ask <= now) due.push_back(e);
        }
      }
      for (const auto& e : due) {
        const Clock::time_point start = Clock::now();
        {
          absl::MutexLock lock(&e->mu);
          if (e->slow && !e->cancelled.load(std::memory_order_relaxed) && e->slow()) {
            e->cancelled.store(true, std::memory_order_relaxed);
          }
        }
        // Many watched calls, or slow answers, stretch the period so that
        // asking takes about a fifth of this thread's time at most.
        const Clock::duration took = Clock::now() - start;
        const Clock::duration period = std::max<Clock::duration>(
            absl::ToChronoNanoseconds(e->period), 4 * took * static_cast<int64_t>(due.size()));
        std::lock_guard<std::mutex> lock(mu_);
        e->next_ask = Clock::now() + period;
      }
      due.clear();
    }
  }

  std::mutex mu_;
  absl::flat_hash_set<std::shared_ptr<CancelWatch::Entry>> entries_;  // guarded by mu_
  std::condition_variable added_;  // notified by Add
  // When the watcher wakes next; the earliest time point while it is awake.
  Clock::time_point sleeping_until_ = Clock::time_point::min();  // guarded by mu_
  bool started_ = false;                                           // guarded by mu_
};

}  // namespace

CancelWatch::CancelWatch(CancelCheck slow, absl::Duration period)
    : entry_(std::make_shared<Entry>()) {
  // At most an hour: the steady clock's time points hold no infinity.
  entry_->period = std::clamp(period, absl::Microseconds(100), absl::Hours(1));
  if (!slow) return;
  {
    absl::MutexLock lock(&entry_->mu);
    entry_->slow = std::move(slow);
  }
  Watcher::Get().Add(entry_);
}

CancelWatch::~CancelWatch() {
  {
    // Waits for an ask in progress; none starts after.
    absl::MutexLock lock(&entry_->mu);
    if (!entry_->slow) return;
    entry_->slow = nullptr;
  }
  Watcher::Get().Remove(entry_);
}

CancelCheck CancelWatch::check() const {
  return [entry = entry_]() { return entry->cancelled.load(std::memory_order_relaxed); };
}

}  // namespace kiln::runtime
