// The CPU backend's device: host memory with a configurable capacity, infeed
// and outfeed queues, and the compiler to Programs.
#ifndef KILN_RUNTIME_CPU_CPU_DEVICE_H_
#define KILN_RUNTIME_CPU_CPU_DEVICE_H_

#include <memory>
#include <string>

#include "runtime/host_device.h"

namespace kiln::cpu {

struct CpuDeviceOptions {
  int ordinal = 0;
  int64_t memory_capacity_bytes = int64_t{8} << 30;
  size_t feed_queue_capacity = 64;
};

// Thread-safe.
class CpuDevice : public runtime::HostDevice {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {})
      : HostDevice("cpu", options.ordinal, options.memory_capacity_bytes,
                   options.feed_queue_capacity) {}

  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override;
};

}  // namespace kiln::cpu

#endif  // KILN_RUNTIME_CPU_CPU_DEVICE_H_
