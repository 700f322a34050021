#include "runtime/host/threads.h"

#include <cblas.h>
#include <omp.h>

#include "runtime/compute_threads.h"

namespace kiln::host {

void UseComputeThreads() {
  const int threads = runtime::ComputeThreads();
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

}  // namespace kiln::host
