#include "runtime/cancel_check.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// Polls `check` until it says cancelled, for at most ten seconds.
bool SeenWithin10s(const CancelCheck& check) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!check()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

TEST(CancelWatchTest, SeesACancellationAndKeepsItAfterTheWatchEnds) {
  std::atomic<int> asked{0};
  std::atomic<bool> gave_up{false};
  CancelCheck copy;
  {
    CancelWatch watch(
        [&] {
          asked.fetch_add(1);
          return gave_up.load();
        },
        absl::Milliseconds(1));
    copy = watch.check();
    EXPECT_FALSE(copy());
    gave_up = true;
    ASSERT_TRUE(SeenWithin10s(watch.check()));
    gave_up = false;  // a true answer stays true
    EXPECT_TRUE(watch.check()());
  }
  EXPECT_TRUE(copy());
  EXPECT_GE(asked.load(), 1);
}

TEST(CancelWatchTest, TheCallersThreadNeverAsks) {
  std::atomic<int> asked{0};
  CancelWatch watch(
      [&] {
        asked.fetch_add(1);
        return false;
      },
      absl::Hours(1));
  const CancelCheck check = watch.check();
  for (int i = 0; i < 100000; ++i) EXPECT_FALSE(check());
  // A call shorter than the period is never asked.
  EXPECT_EQ(asked.load(), 0);
}

TEST(CancelWatchTest, NeverAsksAfterTheDestructorReturns) {
  std::atomic<int> asked{0};
  std::atomic<bool> asking{false};
  std::atomic<bool> ask_finished{false};
  auto watch = std::make_unique<CancelWatch>(
      [&] {
        asking = true;
        asked.fetch_add(1);
        absl::SleepFor(absl::Milliseconds(30));
        ask_finished = true;
        return false;
      },
      absl::Milliseconds(1));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!asking && absl::Now() < deadline) absl::SleepFor(absl::Microseconds(100));
  ASSERT_TRUE(asking.load());
  // The destructor waits for the ask in progress.
  watch.reset();
  EXPECT_TRUE(ask_finished.load());
  const int after = asked.load();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(asked.load(), after);
}

TEST(CancelWatchTest, AShortPeriodIsNotDelayedByALongOne) {
  CancelWatch slow_one([] { return false; }, absl::Hours(1));
  CancelWatch quick_one([] { return true; }, absl::Milliseconds(1));
  EXPECT_TRUE(SeenWithin10s(quick_one.check()));
  EXPECT_FALSE(slow_one.check()());
}

TEST(CancelWatchTest, ManyWatchesAreAllAsked) {
  std::vector<std::unique_ptr<CancelWatch>> watches;
  for (int i = 0; i < 64; ++i) {
    watches.push_back(
        std::make_unique<CancelWatch>([i] { return i % 2 == 0; }, absl::Milliseconds(1)));
  }
  for (int i = 0; i < 64; i += 2) EXPECT_TRUE(SeenWithin10s(watches[i]->check())) << i;
  for (int i = 1; i < 64; i += 2) EXPECT_FALSE(watches[i]->check()()) << i;
}

TEST(CancelWatchTest, AnEmptyCheckNeverCancels) {
  CancelWatch watch(nullptr, absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE(watch.check()());
}

}  // namespace
}  // namespace kiln::runtime
