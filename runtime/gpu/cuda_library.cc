#include "runtime/gpu/cuda_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::gpu {

absl::StatusOr<void*> OpenCudaLibrary(const std::string& soname) {
  std::vector<std::string> tried = {soname};
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != 0) {
    tried.push_back(absl::StrCat(home, "/lib64/", soname));
  }
  tried.push_back(absl::StrCat(KILN_CUDA_LIBRARY_DIR, "/", soname));
  std::vector<std::string> errors;
  for (const std::string& path : tried) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* error = dlerror();
    errors.push_back(error != nullptr ? error : path);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load ", soname, ": ", absl::StrJoin(errors, "; ")));
}

absl::StatusOr<void*> FindSymbol(void* library, const std::string& soname,
                                 const std::string& symbol) {
  if (void* address = dlsym(library, symbol.c_str())) return address;
  return absl::FailedPreconditionError(absl::StrCat(soname, " has no ", symbol));
}

}  // namespace kiln::gpu
