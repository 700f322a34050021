// The GPU backend: one device per CUDA device asked for, and a compiler
// that generates, compiles (NVRTC) and loads kernels for their
// architecture.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/backend.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_executable.h"
#include "runtime/gpu/nvrtc.h"

namespace kiln::gpu {
namespace {

constexpr size_t kFeedQueueCapacity = 64;

class GpuCompiler final : public runtime::Compiler {
 public:
  explicit GpuCompiler(std::string arch) : arch_(std::move(arch)) {}
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override {
    return CompileForGpu(module, options, arch_, /*load=*/true);
  }

 private:
  const std::string arch_;
};

class GpuBackend final : public runtime::Backend {
 public:
  static absl::StatusOr<std::unique_ptr<runtime::Backend>> Create(
      const runtime::BackendSpec& spec) {
    RETURN_IF_ERROR(runtime::CheckConfigKeys(spec, {"memory_bytes"}));
    ASSIGN_OR_RETURN(int64_t memory_bytes, runtime::ConfigBytes(spec, "memory_bytes", 0));
    const GpuCount available = CountGpus();
    if (available.count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("no GPU can be used: ", available.reason));
    }
    if (spec.count > available.count) {
      return absl::InvalidArgumentError(absl::StrCat(spec.count, " GPUs asked for, the host has ",
                                                     available.count));
    }
    ASSIGN_OR_RETURN(std::string nvrtc, NvrtcVersion());
    auto backend = std::unique_ptr<GpuBackend>(new GpuBackend());
    for (int i = 0; i < spec.count; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<GpuDevice> device,
                       GpuDevice::Create(i, memory_bytes, kFeedQueueCapacity));
      backend->devices_.push_back(std::move(device));
    }
    const auto& first = static_cast<const GpuDevice&>(*backend->devices_[0]);
    for (const auto& d : backend->devices_) {
      if (static_cast<const GpuDevice&>(*d).arch() != first.arch()) {
        return absl::InvalidArgumentError("the GPUs asked for differ in architecture");
      }
    }
    backend->arch_ = first.arch();
    backend->description_ = absl::StrCat(spec.count, " x ", first.description(), ", NVRTC ",
                                         nvrtc);
    backend->compiler_ = std::make_unique<GpuCompiler>(backend->arch_);
    return backend;
  }

  const std::string& kind() const override { return kind_; }
  std::string config_key() const override { return arch_; }
  const std::vector<std::unique_ptr<runtime::Device>>& devices() const override {
    return devices_;
  }
  runtime::Compiler& compiler() override { return *compiler_; }
  std::string Describe() const override { return description_; }

 private:
  GpuBackend() = default;
  const std::string kind_ = "gpu";
  std::string arch_;
  std::string description_;
  std::vector<std::unique_ptr<runtime::Device>> devices_;
  std::unique_ptr<runtime::Compiler> compiler_;
};

}  // namespace
}  // namespace kiln::gpu

KILN_BACKEND_REGISTRATION(gpu) {
  RegisterBackend({"gpu", "CUDA GPUs: generated kernels compiled at run time by NVRTC",
                   "memory_bytes: capacity of each device (default 90% of its memory)",
                   &gpu::GpuBackend::Create, [] { return gpu::CountGpus().count; }});
}
