// Loading a CUDA library at run time: the toolkit's libraries are looked
// up by soname, then under $CUDA_HOME/lib64 and the toolkit the build used.
#ifndef KILN_RUNTIME_GPU_CUDA_LIBRARY_H_
#define KILN_RUNTIME_GPU_CUDA_LIBRARY_H_

#include <string>

#include "absl/status/statusor.h"

namespace kiln::gpu {

// A handle of dlopen for `soname` ("libnvrtc.so.13"); never closed.
// FAILED_PRECONDITION naming every place tried.
absl::StatusOr<void*> OpenCudaLibrary(const std::string& soname);

// The address of `symbol` in `library`; FAILED_PRECONDITION when absent.
absl::StatusOr<void*> FindSymbol(void* library, const std::string& soname,
                                 const std::string& symbol);

// Binds `fn` (a function pointer) to `symbol` of `library`.
template <typename Fn>
absl::Status Bind(void* library, const std::string& soname, const char* symbol, Fn* fn) {
  absl::StatusOr<void*> address = FindSymbol(library, soname, symbol);
  if (!address.ok()) return address.status();
  *fn = reinterpret_cast<Fn>(*address);
  return absl::OkStatus();
}

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_CUDA_LIBRARY_H_
