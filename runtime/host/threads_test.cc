#include "runtime/host/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compute_threads.h"
#include "runtime/host/compute_workers.h"

namespace kiln::host {
namespace {

std::vector<int> CoresOf(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) return cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cores.push_back(cpu);
  }
  return cores;
}

// Restores the thread count the other tests run with.
class ThreadsTest : public testing::Test {
 protected:
  void SetUp() override { saved_ = runtime::ComputeThreads(); }
  void TearDown() override { runtime::SetComputeThreads(saved_); }
  int saved_ = 0;
};

TEST_F(ThreadsTest, AFullTeamOnAComputeWorkerIsBoundOneThreadPerCore) {
  const std::vector<int> allowed = CoresOf(getpid());
  if (allowed.size() < 2) GTEST_SKIP() << "one core";
  const int threads = static_cast<int>(allowed.size());
  runtime::SetComputeThreads(threads);
  std::vector<std::vector<int>> seen(threads);
  std::vector<int> wanted, master_after_one;
  RunOnComputeWorker([&] {
    wanted = ComputeThreadCores(threads);
    UseComputeThreads();
#pragma omp parallel num_threads(threads)
    seen[omp_get_thread_num()] = CoresOf(0);
    // Back to one thread: the worker may run anywhere again.
    runtime::SetComputeThreads(1);
    UseComputeThreads();
    master_after_one = CoresOf(0);
  });
  ASSERT_EQ(wanted.size(), allowed.size());
  std::vector<int> used;
  for (int i = 0; i < threads; ++i) {
    EXPECT_EQ(seen[i], std::vector<int>{wanted[i]}) << "thread " << i;
    used.push_back(wanted[i]);
  }
  // Every allowed core once.
  std::sort(used.begin(), used.end());
  EXPECT_EQ(used, allowed);
  EXPECT_EQ(master_after_one, allowed);
}

TEST_F(ThreadsTest, NothingIsBoundOffTheWorkersOrBelowAFullTeam) {
  const std::vector<int> allowed = CoresOf(getpid());
  EXPECT_TRUE(ComputeThreadCores(static_cast<int>(allowed.size()) + 1).empty());
  std::vector<int> one, partial;
  RunOnComputeWorker([&] {
    one = ComputeThreadCores(1);
    partial = ComputeThreadCores(static_cast<int>(allowed.size()) - 1);
  });
  EXPECT_TRUE(one.empty());
  EXPECT_TRUE(partial.empty());
}

}  // namespace
}  // namespace kiln::host
