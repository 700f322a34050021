#include "runtime/cpu/cpu_device.h"

#include <atomic>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"
#include "runtime/cpu/program.h"

namespace kiln::cpu {
namespace {

class CpuExecutable : public runtime::Executable {
 public:
  CpuExecutable(std::shared_ptr<const Program> entry, ir::Shape result,
                std::vector<ir::Shape> params, uint64_t seed,
                CpuDevice* device)
      : entry_(std::move(entry)),
        result_shape_(std::move(result)),
        parameter_shapes_(std::move(params)),
        seed_(seed),
        device_(device) {}

  absl::StatusOr<runtime::BufferPtr> Execute(
      const std::vector<runtime::BufferPtr>& args,
      const runtime::ExecuteOptions& options) override {
    if (args.size() != parameter_shapes_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "program takes ", parameter_shapes_.size(), " arguments, got ",
          args.size()));
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == nullptr || args[i]->shape() != parameter_shapes_[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "argument ", i, " has shape ",
            args[i] ? args[i]->shape().ToString() : "null", ", the program expects ",
            parameter_shapes_[i].ToString()));
      }
    }
    // Every execution draws from its own stream so runs are reproducible
    // for a given seed and execution count.
    std::mt19937_64 rng(seed_ + 0x9e3779b97f4a7c15ULL * executions_.fetch_add(1));
    ExecState state;
    state.memory = device_->memory();
    state.infeed = options.infeed != nullptr ? options.infeed : &device_->infeed();
    state.outfeed = options.outfeed != nullptr ? options.outfeed : &device_->outfeed();
    state.options = &options;
    state.rng = &rng;
    return entry_->Run(state, args);
  }
  const ir::Shape& result_shape() const override { return result_shape_; }
  const std::vector<ir::Shape>& parameter_shapes() const override {
    return parameter_shapes_;
  }

 private:
  std::shared_ptr<const Program> entry_;
  ir::Shape result_shape_;
  std::vector<ir::Shape> parameter_shapes_;
  uint64_t seed_;
  std::atomic<uint64_t> executions_{0};
  CpuDevice* device_;
};

}  // namespace

CpuDevice::CpuDevice(const CpuDeviceOptions& options)
    : name_(absl::StrCat("cpu:", options.ordinal)),
      ordinal_(options.ordinal),
      memory_(options.memory_capacity_bytes),
      infeed_(options.feed_queue_capacity),
      outfeed_(options.feed_queue_capacity) {}

absl::StatusOr<std::shared_ptr<runtime::Executable>> CpuDevice::Compile(
    const ir::Module& module, const runtime::CompileOptions& options) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  ProgramCache programs;
  ASSIGN_OR_RETURN(std::shared_ptr<const Program> entry,
                   programs.Get(module.entry()));
  return std::make_shared<CpuExecutable>(
      entry, module.entry()->root()->shape(), module.entry()->ParameterShapes(),
      options.rng_seed, this);
}

}  // namespace kiln::cpu
