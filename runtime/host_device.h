// What the devices that live in host memory share (the CPU's, the TPU
// simulator's cores): a name of kind and ordinal, a memory tracker with a
// capacity, and the device's own infeed and outfeed queues.
#ifndef KILN_RUNTIME_HOST_DEVICE_H_
#define KILN_RUNTIME_HOST_DEVICE_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/device.h"

namespace kiln::runtime {

// Thread-safe; subclasses add Compile.
class HostDevice : public Device {
 public:
  // Named "kind:ordinal"; `footprint` as for MemoryTracker.
  HostDevice(std::string kind, int ordinal, int64_t memory_capacity_bytes,
             size_t feed_queue_capacity, MemoryTracker::Footprint footprint = nullptr)
      : name_(absl::StrCat(kind, ":", ordinal)),
        kind_(std::move(kind)),
        ordinal_(ordinal),
        memory_(memory_capacity_bytes, std::move(footprint)),
        infeed_(feed_queue_capacity),
        outfeed_(feed_queue_capacity) {}

  const std::string& name() const override { return name_; }
  const std::string& kind() const override { return kind_; }
  int ordinal() const override { return ordinal_; }
  MemoryTracker* memory() override { return &memory_; }
  FeedQueue& infeed() override { return infeed_; }
  FeedQueue& outfeed() override { return outfeed_; }

 private:
  const std::string name_;
  const std::string kind_;
  const int ordinal_;
  MemoryTracker memory_;
  FeedQueue infeed_;
  FeedQueue outfeed_;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_HOST_DEVICE_H_
