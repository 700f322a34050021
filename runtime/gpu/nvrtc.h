// Run-time compilation of generated CUDA C++ through NVRTC. The library is
// loaded when first needed, so binaries built with the GPU backend start on
// hosts without the CUDA toolkit (the backend then reports why it is off).
#ifndef KILN_RUNTIME_GPU_NVRTC_H_
#define KILN_RUNTIME_GPU_NVRTC_H_

#include <string>

#include "absl/status/statusor.h"

namespace kiln::gpu {

// Compiles `source` to a cubin for `arch` ("sm_90"). INVALID_ARGUMENT with
// NVRTC's log when the source does not compile; FAILED_PRECONDITION when
// NVRTC cannot be loaded. Thread-safe.
absl::StatusOr<std::string> CompileToCubin(const std::string& source, const std::string& arch);

// NVRTC's version ("13.0"), or why it cannot be loaded.
absl::StatusOr<std::string> NvrtcVersion();

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_NVRTC_H_
