// What the devices that live in host memory share (the CPU's, the TPU
// simulator's cores): a name of kind and ordinal, a memory tracker with a
// capacity, host buffers, and the device's own infeed and outfeed queues.
#ifndef KILN_RUNTIME_HOST_HOST_DEVICE_H_
#define KILN_RUNTIME_HOST_HOST_DEVICE_H_

#include <string>

#include "runtime/device.h"

namespace kiln::host {

// Thread-safe.
class HostDevice : public runtime::Device {
 public:
  // Named "kind:ordinal"; `footprint` as for MemoryTracker.
  HostDevice(std::string kind, int ordinal, int64_t memory_capacity_bytes,
             size_t feed_queue_capacity, runtime::MemoryTracker::Footprint footprint = nullptr);

  const std::string& name() const override { return name_; }
  const std::string& kind() const override { return kind_; }
  int ordinal() const override { return ordinal_; }
  runtime::MemoryTracker* memory() override { return &memory_; }
  runtime::FeedQueue& infeed() override { return infeed_; }
  runtime::FeedQueue& outfeed() override { return outfeed_; }

  absl::StatusOr<runtime::BufferPtr> Allocate(const ir::Shape& shape) override;
  absl::Status CopyToBuffer(runtime::Buffer& buffer, int64_t offset, const void* src,
                            int64_t size) override;
  absl::Status CopyFromBuffer(const runtime::Buffer& buffer, int64_t offset, void* dst,
                              int64_t size) override;

 private:
  const std::string name_;
  const std::string kind_;
  const int ordinal_;
  runtime::MemoryTracker memory_;
  runtime::FeedQueue infeed_;
  runtime::FeedQueue outfeed_;
};

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_HOST_DEVICE_H_
