// The TPU simulator's backend (tpu:N): the cores of the configured chip. It
// runs programs on the host with the CPU backend's kernels, but behaves like
// a TPU core where a user would notice: dot and convolution round their f32
// inputs to bf16 (unless an operand's precision is HIGHEST) and accumulate
// in f32; types a TPU lacks are compile errors; arrays occupy padded tiles
// in an HBM of the configured size; every execution reports its simulated
// cost (cost_model.h).
#ifndef KILN_RUNTIME_TPUSIM_TPUSIM_DEVICE_H_
#define KILN_RUNTIME_TPUSIM_TPUSIM_DEVICE_H_

#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/host/host_device.h"
#include "runtime/tpusim/chip_config.h"
#include "runtime/tpusim/cost_model.h"

namespace kiln::tpusim {

struct TpuSimDeviceOptions {
  int ordinal = 0;  // the core
  ChipConfig chip;
  size_t feed_queue_capacity = 64;
};

// One core: HBM of the chip's size holding padded tiles. Thread-safe.
class TpuSimDevice : public host::HostDevice {
 public:
  explicit TpuSimDevice(const TpuSimDeviceOptions& options);
};

// Compiles for every core of one chip config. Errors: INVALID_ARGUMENT
// naming the first instruction with a type a TPU lacks; whatever the kernels
// refuse. Thread-safe.
class TpuSimCompiler : public runtime::Compiler {
 public:
  explicit TpuSimCompiler(const ChipConfig& chip);
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override;
  // The module (the simulator runs no passes) and the kernels chosen by
  // timing (runtime/host/artifact.h). The chip config is part of the
  // backend's config key, so an artifact never meets another chip.
  absl::StatusOr<Compiled> CompileForCache(const ir::Module& module,
                                           const runtime::CompileOptions& options) override;
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Load(
      const std::string& artifact, const runtime::CompileOptions& options) override;
  std::string ArtifactDependencies() const override;
  const CostModel& cost_model() const { return *cost_model_; }

 private:
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Build(
      const ir::Module& module, const runtime::CompileOptions& options) const;

  std::shared_ptr<const CostModel> cost_model_;
};

// The simulated chip's cores tpu:0..cores-1. Thread-safe.
class TpuSimBackend : public runtime::Backend {
 public:
  // `cores` at most the chip's.
  TpuSimBackend(const ChipConfig& chip, int cores, size_t feed_queue_capacity = 64);
  // From a spec: `count` cores; config keys `config` (a chip config file,
  // docs/tpusim.md) and any chip field (hbm_bytes=16G, clock_hz=940e6, ...),
  // applied over the file.
  static absl::StatusOr<std::unique_ptr<runtime::Backend>> Create(
      const runtime::BackendSpec& spec);

  const std::string& kind() const override { return kind_; }
  std::string config_key() const override { return chip_.ToString(); }
  const std::vector<std::unique_ptr<runtime::Device>>& devices() const override {
    return devices_;
  }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string Describe() const override;

  runtime::Device* device(int index) { return devices_[index].get(); }
  const ChipConfig& chip() const { return chip_; }

 private:
  const std::string kind_ = "tpu";
  const ChipConfig chip_;
  std::vector<std::unique_ptr<runtime::Device>> devices_;
  TpuSimCompiler compiler_;
};

// f32 values as the matrix unit sees them: rounded to the nearest bf16
// (ties to even), still stored as f32.
void RoundToBf16(const float* in, float* out, int64_t count);

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_TPUSIM_DEVICE_H_
