// How many threads a backend's compute libraries may use (kiln-server
// --threads). One setting for the process: the host backend sizes both its
// BLAS and the OpenMP team of its oneDNN kernels from it, so that no two
// thread pools are each sized to the whole machine.
#ifndef KILN_RUNTIME_COMPUTE_THREADS_H_
#define KILN_RUNTIME_COMPUTE_THREADS_H_

namespace kiln::runtime {

// threads <= 0 means one per core.
void SetComputeThreads(int threads);
// The setting, at least 1 (one per core until set).
int ComputeThreads();

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_COMPUTE_THREADS_H_
