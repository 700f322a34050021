#include "runtime/host/threads.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>

#include "base/host_identity.h"
#include "runtime/compute_threads.h"
#include "runtime/host/compute_workers.h"

namespace kiln::host {
namespace {

// The cores the process may run on, in order, taken from the main thread
// (compute workers are never the main thread, so their binding never
// narrows this).
const std::vector<int>& AllowedCores() {
  static const std::vector<int>* const cores = new std::vector<int>(AllowedCpus());
  return *cores;
}

bool BindingWanted() {
  static const bool wanted = [] {
    const char* off = std::getenv("KILN_BIND_THREADS");
    if (off != nullptr && std::strcmp(off, "0") == 0) return false;
    for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"}) {
      if (std::getenv(name) != nullptr) return false;
    }
    return true;
  }();
  return wanted;
}

void SetAffinity(const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cores) CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// The team size this compute worker's threads are bound for (0: unbound).
thread_local int bound_threads = 0;

void BindTeam(int threads) {
  const std::vector<int> cores = ComputeThreadCores(threads);
  if (cores.empty()) {
    // A smaller team now: every thread of the bound one runs wherever the
    // scheduler puts it again.
    if (bound_threads != 0) {
#pragma omp parallel num_threads(bound_threads)
      SetAffinity(AllowedCores());
    }
    bound_threads = 0;
    return;
  }
  // The worker itself (thread 0) keeps every core: threads it starts later
  // (OpenMP replaces pool threads after a smaller region; OpenBLAS starts
  // its own) inherit its mask and must not all land on one core.
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    if (t > 0) SetAffinity({cores[t % cores.size()]});
  }
  bound_threads = threads;
}

}  // namespace

std::vector<int> ComputeThreadCores(int threads) {
  const int worker = ComputeWorkerIndex();
  const std::vector<int>& allowed = AllowedCores();
  if (threads < 2 || threads != static_cast<int>(allowed.size()) || worker < 0 ||
      !BindingWanted()) {
    return {};
  }
  std::vector<int> cores;
  for (int i = 0; i < threads; ++i) {
    cores.push_back(allowed[(static_cast<size_t>(worker) + i) % allowed.size()]);
  }
  return cores;
}

void UseComputeThreads() {
  const int threads = runtime::ComputeThreads();
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  // Inside a parallel region a team of its own would be one thread.
  if (bound_threads != threads && (bound_threads != 0 || threads >= 2) &&
      ComputeWorkerIndex() >= 0 && !omp_in_parallel()) {
    BindTeam(threads);
  }
}

}  // namespace kiln::host
