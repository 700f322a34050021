#include "runtime/host/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
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
  for (const char* name : {"KILN_BIND_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY",
                           "OMP_THREAD_LIMIT", "OMP_DYNAMIC"}) {
    if (std::getenv(name) != nullptr) GTEST_SKIP() << name << " is set";
  }
  const int threads = static_cast<int>(allowed.size());
  runtime::SetComputeThreads(threads);
  std::vector<std::vector<int>> seen(threads), after_smaller(threads), after_one(threads);
  std::vector<int> wanted;
  RunOnComputeWorker([&] {
    wanted = ComputeThreadCores(threads);
    UseComputeThreads();
#pragma omp parallel num_threads(threads)
    seen[omp_get_thread_num()] = CoresOf(0);
    // A smaller region may end pool threads; the full team started again
    // afterwards must not inherit one core from the worker.
#pragma omp parallel num_threads(threads - 1)
    (void)omp_get_thread_num();
    UseComputeThreads();
#pragma omp parallel num_threads(threads)
    after_smaller[omp_get_thread_num()] = CoresOf(0);
    // Back to one thread: the whole team may run anywhere again.
    runtime::SetComputeThreads(1);
    UseComputeThreads();
#pragma omp parallel num_threads(threads)
    after_one[omp_get_thread_num()] = CoresOf(0);
  });
  ASSERT_EQ(wanted.size(), allowed.size());
  // The worker keeps every core; the others are one to a core, all
  // different.
  EXPECT_EQ(seen[0], allowed);
  EXPECT_EQ(after_smaller[0], allowed);
  std::vector<int> used;
  for (int i = 1; i < threads; ++i) {
    EXPECT_EQ(seen[i], std::vector<int>{wanted[i]}) << "thread " << i;
    EXPECT_TRUE(after_smaller[i] == std::vector<int>{wanted[i]} || after_smaller[i] == allowed)
        << "thread " << i << " after a smaller region";
    used.push_back(wanted[i]);
  }
  std::sort(used.begin(), used.end());
  EXPECT_EQ(std::adjacent_find(used.begin(), used.end()), used.end());
  for (int i = 0; i < threads; ++i) EXPECT_EQ(after_one[i], allowed) << "thread " << i;
}

TEST_F(ThreadsTest, NothingIsBoundOffTheWorkersNorForOtherTeamSizes) {
  const std::vector<int> allowed = CoresOf(getpid());
  const int cores = static_cast<int>(allowed.size());
  EXPECT_TRUE(ComputeThreadCores(cores).empty());  // not a worker
  std::vector<int> one, partial, more;
  RunOnComputeWorker([&] {
    one = ComputeThreadCores(1);
    partial = ComputeThreadCores(cores - 1);
    more = ComputeThreadCores(cores + 1);  // more threads than cores
  });
  EXPECT_TRUE(one.empty());
  EXPECT_TRUE(partial.empty());
  EXPECT_TRUE(more.empty());
}

}  // namespace
}  // namespace kiln::host
