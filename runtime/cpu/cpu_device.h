// The CPU backend's device: host memory with a configurable capacity, infeed
// and outfeed queues, and the compiler to Programs.
#ifndef KILN_RUNTIME_CPU_CPU_DEVICE_H_
#define KILN_RUNTIME_CPU_CPU_DEVICE_H_

#include <memory>
#include <string>

#include "runtime/device.h"

namespace kiln::cpu {

struct CpuDeviceOptions {
  int ordinal = 0;
  int64_t memory_capacity_bytes = int64_t{8} << 30;
  size_t feed_queue_capacity = 64;
};

// Thread-safe.
class CpuDevice : public runtime::Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {});

  const std::string& name() const override { return name_; }
  const std::string& kind() const override { return kind_; }
  int ordinal() const override { return ordinal_; }
  runtime::MemoryTracker* memory() override { return &memory_; }
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override;
  runtime::FeedQueue& infeed() override { return infeed_; }
  runtime::FeedQueue& outfeed() override { return outfeed_; }

 private:
  std::string name_;
  std::string kind_ = "cpu";
  int ordinal_;
  runtime::MemoryTracker memory_;
  runtime::FeedQueue infeed_;
  runtime::FeedQueue outfeed_;
};

}  // namespace kiln::cpu

#endif  // KILN_RUNTIME_CPU_CPU_DEVICE_H_
