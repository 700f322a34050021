// Executables of the GPU backend: a module's computations as programs of
// steps over value slots. A step launches generated kernels, views or
// groups buffers, loops on the host around device work (while,
// conditional, call), or runs a host kernel on copies (feeds, rng,
// collectives, sort, scatter, custom calls).
#ifndef KILN_RUNTIME_GPU_GPU_EXECUTABLE_H_
#define KILN_RUNTIME_GPU_GPU_EXECUTABLE_H_

#include <memory>

#include "runtime/device.h"

namespace kiln::gpu {

// What compiling a module for the GPU produced, for tests and tools.
struct GpuCompileReport {
  int kernels = 0;             // generated kernels
  int host_steps = 0;          // instructions run on the host
  int gemms = 0;               // dots run by cuBLASLt
  std::string source;          // the generated CUDA C++
};

// Compiles `module` for devices of architecture `arch` ("sm_90"): generates
// its kernels, compiles them with NVRTC and, when `load` is set, loads them
// (which needs a GPU). Errors name the instruction the backend cannot run.
absl::StatusOr<std::shared_ptr<runtime::Executable>> CompileForGpu(
    const ir::Module& module, const runtime::CompileOptions& options, const std::string& arch,
    bool load, GpuCompileReport* report = nullptr);

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_GPU_EXECUTABLE_H_
