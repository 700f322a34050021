#include "runtime/cancel_check.h"

#include <atomic>
#include <chrono>
#include <memory>

namespace kiln::runtime {

CancelCheck Throttled(CancelCheck check, absl::Duration period) {
  struct State {
    CancelCheck check;
    int64_t period_ns;
    std::atomic<int64_t> next_ns{0};  // steady-clock time of the next ask
    std::atomic<bool> cancelled{false};
  };
  auto state = std::make_shared<State>();
  state->check = std::move(check);
  state->period_ns = absl::ToInt64Nanoseconds(period);
  return [state]() {
    if (state->cancelled.load(std::memory_order_relaxed)) return true;
    if (!state->check) return false;
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    int64_t next = state->next_ns.load(std::memory_order_relaxed);
    // One caller per period asks; the others keep the last answer.
    if (now < next ||
        !state->next_ns.compare_exchange_strong(next, now + state->period_ns)) {
      return false;
    }
    if (state->check()) {
      state->cancelled.store(true, std::memory_order_relaxed);
      return true;
    }
    return false;
  };
}

}  // namespace kiln::runtime
