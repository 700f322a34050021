#include "runtime/gpu/nvrtc.h"

#include <nvrtc.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/gpu/cuda_library.h"

namespace kiln::gpu {
namespace {

constexpr char kSoname[] = "libnvrtc.so." KILN_CUDA_MAJOR;

struct Nvrtc {
  decltype(&nvrtcVersion) version;
  decltype(&nvrtcGetErrorString) error_string;
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcDestroyProgram) destroy;
};

absl::StatusOr<Nvrtc> Load() {
  ASSIGN_OR_RETURN(void* lib, OpenCudaLibrary(kSoname));
  Nvrtc n;
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcVersion", &n.version));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcGetErrorString", &n.error_string));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcCreateProgram", &n.create));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcCompileProgram", &n.compile));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcGetProgramLogSize", &n.log_size));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcGetProgramLog", &n.log));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcGetCUBINSize", &n.cubin_size));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcGetCUBIN", &n.cubin));
  RETURN_IF_ERROR(Bind(lib, kSoname, "nvrtcDestroyProgram", &n.destroy));
  return n;
}

absl::StatusOr<const Nvrtc*> Get() {
  static const absl::StatusOr<Nvrtc>* const nvrtc = new absl::StatusOr<Nvrtc>(Load());
  if (!nvrtc->ok()) return nvrtc->status();
  return &**nvrtc;
}

absl::Status Check(const Nvrtc& n, nvrtcResult result, const char* what) {
  if (result == NVRTC_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", n.error_string(result)));
}

}  // namespace

absl::StatusOr<std::string> CompileToCubin(const std::string& source, const std::string& arch) {
  ASSIGN_OR_RETURN(const Nvrtc* n, Get());
  nvrtcProgram program;
  RETURN_IF_ERROR(
      Check(*n, n->create(&program, source.c_str(), "kiln.cu", 0, nullptr, nullptr),
            "nvrtcCreateProgram"));
  const std::string arch_option = absl::StrCat("--gpu-architecture=", arch);
  // No contraction of a * b + c into one rounding: the results stay those
  // of the host interpreter, operation by operation.
  const std::vector<const char*> options = {arch_option.c_str(), "--std=c++17",
                                            "--device-as-default-execution-space",
                                            "--fmad=false"};
  const nvrtcResult compiled = n->compile(program, static_cast<int>(options.size()),
                                          options.data());
  absl::StatusOr<std::string> result;
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    n->log_size(program, &size);
    std::string log(size, '\0');
    if (size > 0) n->log(program, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    result = absl::InvalidArgumentError(
        absl::StrCat("NVRTC could not compile the generated kernels for ", arch, ": ", log));
  } else {
    size_t size = 0;
    absl::Status status = Check(*n, n->cubin_size(program, &size), "nvrtcGetCUBINSize");
    std::string cubin(size, '\0');
    if (status.ok()) status = Check(*n, n->cubin(program, cubin.data()), "nvrtcGetCUBIN");
    if (status.ok()) result = std::move(cubin);
    else result = status;
  }
  n->destroy(&program);
  return result;
}

absl::StatusOr<std::string> NvrtcVersion() {
  ASSIGN_OR_RETURN(const Nvrtc* n, Get());
  int major = 0, minor = 0;
  RETURN_IF_ERROR(Check(*n, n->version(&major, &minor), "nvrtcVersion"));
  return absl::StrCat(major, ".", minor);
}

}  // namespace kiln::gpu
