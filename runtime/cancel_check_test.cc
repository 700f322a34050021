#include "runtime/cancel_check.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// A check that counts how often it is asked and answers `gave_up`,
// throttled to `period`.
CancelCheck Counting(std::atomic<int>& asked, std::atomic<bool>& gave_up,
                     absl::Duration period) {
  return Throttled(
      [&asked, &gave_up] {
        asked.fetch_add(1);
        return gave_up.load();
      },
      period);
}

TEST(ThrottledTest, AsksAtMostOncePerPeriodAndKeepsTheAnswer) {
  std::atomic<int> asked{0};
  std::atomic<bool> gave_up{false};
  CancelCheck check = Counting(asked, gave_up, absl::Seconds(3600));
  EXPECT_FALSE(check());
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(check());
  EXPECT_EQ(asked.load(), 1);
  // Within the period a cancellation is not seen yet.
  gave_up = true;
  EXPECT_FALSE(check());
  EXPECT_EQ(asked.load(), 1);
}

TEST(ThrottledTest, SeesACancellationAfterThePeriodAndStaysCancelled) {
  std::atomic<int> asked{0};
  std::atomic<bool> gave_up{false};
  CancelCheck check = Counting(asked, gave_up, absl::Milliseconds(1));
  EXPECT_FALSE(check());
  gave_up = true;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!check() && absl::Now() < deadline) absl::SleepFor(absl::Microseconds(200));
  EXPECT_TRUE(check());
  const int after = asked.load();
  gave_up = false;  // a true answer stays true without asking again
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(check());
  EXPECT_EQ(asked.load(), after);
}

TEST(ThrottledTest, CopiesShareTheThrottleAcrossThreads) {
  std::atomic<int> asked{0};
  std::atomic<bool> gave_up{false};
  CancelCheck check = Counting(asked, gave_up, absl::Seconds(3600));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    CancelCheck copy = check;
    threads.emplace_back([copy] {
      for (int i = 0; i < 10000; ++i) copy();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(asked.load(), 1);
}

TEST(ThrottledTest, AnEmptyCheckNeverCancels) {
  CancelCheck check = Throttled(nullptr, absl::Milliseconds(1));
  EXPECT_FALSE(check());
}

}  // namespace
}  // namespace kiln::runtime
