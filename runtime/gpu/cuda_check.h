// Turning CUDA runtime errors into statuses.
#ifndef KILN_RUNTIME_GPU_CUDA_CHECK_H_
#define KILN_RUNTIME_GPU_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::gpu {

// INTERNAL naming `what` and CUDA's message; RESOURCE_EXHAUSTED for an
// allocation the device cannot satisfy.
inline absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", cudaGetErrorString(error));
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace kiln::gpu

#define CUDA_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(::kiln::gpu::CudaStatus((expr), #expr))

#endif  // KILN_RUNTIME_GPU_CUDA_CHECK_H_
