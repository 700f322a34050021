// Applies runtime::ComputeThreads() to the libraries the host kernels call.
#ifndef KILN_RUNTIME_HOST_THREADS_H_
#define KILN_RUNTIME_HOST_THREADS_H_

namespace kiln::host {

// Sizes OpenBLAS's pool (process-wide) and the calling thread's OpenMP team
// (OpenMP keeps the setting per thread; oneDNN runs on that team) to
// runtime::ComputeThreads(). Cheap when nothing changed; called before each
// library call.
void UseComputeThreads();

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_THREADS_H_
