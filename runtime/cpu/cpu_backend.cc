#include "runtime/cpu/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/passes/cpu_pipeline.h"
#include "runtime/host/artifact.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_device.h"

namespace kiln::cpu {
namespace {

class CpuCompiler : public runtime::Compiler {
 public:
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override {
    ASSIGN_OR_RETURN(Compiled compiled, CompileForCache(module, options));
    return compiled.executable;
  }

  absl::StatusOr<Compiled> CompileForCache(const ir::Module& module,
                                           const runtime::CompileOptions& options) override {
    return host::CompileOptimized(module, *passes::CpuPipeline(), [&](const ir::Module& optimized) {
      return host::CompileProgram("cpu", optimized, options);
    });
  }

  absl::StatusOr<std::shared_ptr<runtime::Executable>> Load(
      const std::string& artifact, const runtime::CompileOptions& options) override {
    ASSIGN_OR_RETURN(host::DecodedArtifact decoded, host::DecodeArtifact(artifact));
    host::TuningScope scope(&decoded.tuning);
    return host::CompileProgram("cpu", *decoded.module, options);
  }

  // An artifact holds the module as the pipeline left it: another pipeline
  // compiles it again.
  std::string ArtifactDependencies() const override {
    static const std::string dependencies = absl::StrCat(
        host::HostArtifactDependencies(), "; passes ", passes::CpuPipeline(false)->Describe());
    return dependencies;
  }
};

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), compiler_(std::make_unique<CpuCompiler>()) {
  for (int i = 0; i < options.devices; ++i) {
    devices_.push_back(std::make_unique<host::HostDevice>(kind_, i, options.memory_bytes,
                                                          options.feed_queue_capacity));
  }
}

absl::StatusOr<std::unique_ptr<runtime::Backend>> CpuBackend::Create(
    const runtime::BackendSpec& spec) {
  RETURN_IF_ERROR(runtime::CheckConfigKeys(spec, {"memory_bytes"}));
  CpuBackendOptions options;
  options.devices = spec.count;
  ASSIGN_OR_RETURN(options.memory_bytes,
                   runtime::ConfigBytes(spec, "memory_bytes", options.memory_bytes));
  return std::make_unique<CpuBackend>(options);
}

std::string CpuBackend::Describe() const {
  return absl::StrCat(options_.devices, " CPU device(s) of ", options_.memory_bytes,
                      " bytes each");
}

}  // namespace kiln::cpu

KILN_BACKEND_REGISTRATION(cpu) {
  RegisterBackend({"cpu", "the host's CPU, running the host interpreter",
                   "memory_bytes: capacity of each device (default 8G)",
                   &cpu::CpuBackend::Create, nullptr});
}
