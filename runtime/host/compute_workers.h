// Long-lived threads that host executions run on.
//
// An execution arrives on whichever thread received it (a server's RPC
// threads come and go); run there, it starts on a core whose caches hold
// someone else's data, with an OpenMP team of its own to create. Handed to
// these workers instead, it runs on the worker that finished most recently,
// so a training loop's steps follow each other on one warm thread and one
// warm team. When every worker is busy another starts: executions never wait
// for each other here, and the number of idle workers kept is bounded.
#ifndef KILN_RUNTIME_HOST_COMPUTE_WORKERS_H_
#define KILN_RUNTIME_HOST_COMPUTE_WORKERS_H_

#include "absl/functional/function_ref.h"

namespace kiln::host {

// Runs `fn` on a compute worker and returns when it has returned; on a
// compute worker already, runs it in place. The worker starts with the
// caller's memory account (runtime::AccountScope); other thread-local state
// is `fn`'s to set up.
void RunOnComputeWorker(absl::FunctionRef<void()> fn);

// How many workers are idle now (for tests).
int IdleComputeWorkers();

// The number of the compute worker this thread is (0, 1, 2, ... in the
// order they started), -1 on other threads.
int ComputeWorkerIndex();

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_COMPUTE_WORKERS_H_
