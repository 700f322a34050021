// Applies runtime::ComputeThreads() to the libraries the host kernels call.
#ifndef KILN_RUNTIME_HOST_THREADS_H_
#define KILN_RUNTIME_HOST_THREADS_H_

#include <vector>

namespace kiln::host {

// Sizes OpenBLAS's pool (process-wide) and the calling thread's OpenMP team
// (OpenMP keeps the setting per thread; oneDNN runs on that team) to
// runtime::ComputeThreads(). Cheap when nothing changed; called before each
// library call.
//
// On a compute worker (compute_workers.h) whose team has exactly a thread
// for each core the process may use (two at least), it also binds the
// team's threads to cores, thread i > 0 of worker k to the process's
// (k + i)-th allowed core (wrapping around). The worker itself, thread 0,
// keeps every core: threads it starts later inherit its mask. A
// product's or a loop's share of each step then runs on the same core
// every step, whose caches still hold that share's operands (an MLP's
// weights are split between the cores' L2), and no thread of the team is
// moved onto the core of another. Measured: about 3% shorter MLP and LeNet-5 training steps at
// two threads on two cores (docs/benchmarks.md). Not done for smaller
// teams, where the scheduler is better left free to move the threads off
// cores that other work needs; nor when the OpenMP environment binds
// threads itself (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY), nor with
// KILN_BIND_THREADS=0.
void UseComputeThreads();

// The core of team thread i of the calling compute worker at `threads`
// threads (entry 0, the worker's own, is left unbound): empty where
// UseComputeThreads binds none.
std::vector<int> ComputeThreadCores(int threads);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_THREADS_H_
