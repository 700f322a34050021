#include "runtime/host/compute_workers.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "gtest/gtest.h"
#include "runtime/memory.h"

namespace kiln::host {
namespace {

TEST(ComputeWorkersTest, RunsOnAnotherThreadAndReturnsAfterIt) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  bool done = false;
  RunOnComputeWorker([&] {
    ran_on = std::this_thread::get_id();
    done = true;
  });
  EXPECT_TRUE(done);
  EXPECT_NE(ran_on, caller);
}

// Back-to-back executions land on the same (most recently used) worker.
TEST(ComputeWorkersTest, ConsecutiveRunsReuseTheWarmWorker) {
  std::thread::id first, second;
  RunOnComputeWorker([&] { first = std::this_thread::get_id(); });
  RunOnComputeWorker([&] { second = std::this_thread::get_id(); });
  EXPECT_EQ(first, second);
}

TEST(ComputeWorkersTest, TheWorkerChargesTheCallersAccount) {
  auto account = std::make_shared<runtime::MemoryAccount>("session s", int64_t{1} << 20, "--limit");
  std::shared_ptr<runtime::MemoryAccount> seen;
  {
    runtime::AccountScope scope(account);
    RunOnComputeWorker([&] { seen = runtime::AccountScope::Current(); });
  }
  EXPECT_EQ(seen, account);
  // And not the next caller's, which has none.
  RunOnComputeWorker([&] { seen = runtime::AccountScope::Current(); });
  EXPECT_EQ(seen, nullptr);
}

TEST(ComputeWorkersTest, ARunOnAWorkerRunsNestedCallsInPlace) {
  std::thread::id outer, inner;
  RunOnComputeWorker([&] {
    outer = std::this_thread::get_id();
    RunOnComputeWorker([&] { inner = std::this_thread::get_id(); });
  });
  EXPECT_EQ(outer, inner);
}

// Runs from several threads at once proceed together: each waits at a
// barrier for all the others, which would hang if they were queued.
TEST(ComputeWorkersTest, ConcurrentRunsDoNotWaitForEachOther) {
  constexpr int kRuns = 12;
  absl::Barrier* barrier = new absl::Barrier(kRuns);
  std::atomic<int> finished{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kRuns; ++i) {
    callers.emplace_back([&] {
      RunOnComputeWorker([&] {
        if (barrier->Block()) delete barrier;
        finished.fetch_add(1);
      });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(finished.load(), kRuns);
  // The burst's workers are not all kept.
  EXPECT_LE(IdleComputeWorkers(),
            static_cast<int>(std::max(4u, 2 * std::thread::hardware_concurrency())));
  EXPECT_GE(IdleComputeWorkers(), 1);
}

}  // namespace
}  // namespace kiln::host
