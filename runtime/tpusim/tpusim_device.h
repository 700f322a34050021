// The TPU simulator's device (tpu:N): one core of the configured chip. It
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

#include "runtime/host_device.h"
#include "runtime/tpusim/chip_config.h"
#include "runtime/tpusim/cost_model.h"

namespace kiln::tpusim {

struct TpuSimDeviceOptions {
  int ordinal = 0;  // the core
  ChipConfig chip;
  size_t feed_queue_capacity = 64;
};

// Thread-safe.
class TpuSimDevice : public runtime::HostDevice {
 public:
  explicit TpuSimDevice(const TpuSimDeviceOptions& options);

  // Errors: INVALID_ARGUMENT naming the first instruction with a type a TPU
  // lacks; whatever the kernels refuse.
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override;

  const CostModel& cost_model() const { return *cost_model_; }

 private:
  std::shared_ptr<const CostModel> cost_model_;
};

// f32 values as the matrix unit sees them: rounded to the nearest bf16
// (ties to even), still stored as f32.
void RoundToBf16(const float* in, float* out, int64_t count);

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_TPUSIM_DEVICE_H_
