#include "runtime/host/host_device.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/host/host_buffer.h"

namespace kiln::host {
namespace {

// The host bytes of `buffer` for [offset, offset + size), or why not.
absl::StatusOr<const uint8_t*> HostRange(const runtime::Buffer& buffer, int64_t offset,
                                         int64_t size, const std::string& device) {
  const auto* host = dynamic_cast<const HostBuffer*>(&buffer);
  if (host == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the buffer ", buffer.shape().ToString(), " is not in ", device,
                     "'s host memory"));
  }
  if (offset < 0 || size < 0 || offset > host->size_bytes() ||
      size > host->size_bytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy of ", size, " bytes at offset ", offset, " outside the buffer ",
        buffer.shape().ToString(), " (", host->size_bytes(), " bytes)"));
  }
  return host->data() + offset;
}

}  // namespace

HostDevice::HostDevice(std::string kind, int ordinal, int64_t memory_capacity_bytes,
                       size_t feed_queue_capacity, runtime::MemoryTracker::Footprint footprint)
    : name_(absl::StrCat(kind, ":", ordinal)),
      kind_(std::move(kind)),
      ordinal_(ordinal),
      memory_(memory_capacity_bytes, std::move(footprint)),
      infeed_(feed_queue_capacity),
      outfeed_(feed_queue_capacity) {}

absl::StatusOr<runtime::BufferPtr> HostDevice::Allocate(const ir::Shape& shape) {
  if (!shape.IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device buffers hold arrays, not ", shape.ToString()));
  }
  absl::StatusOr<HostBufferPtr> buffer = HostBuffer::Allocate(shape, &memory_);
  if (!buffer.ok()) return buffer.status();
  return runtime::BufferPtr(*std::move(buffer));
}

absl::Status HostDevice::CopyToBuffer(runtime::Buffer& buffer, int64_t offset, const void* src,
                                      int64_t size) {
  absl::StatusOr<const uint8_t*> dst = HostRange(buffer, offset, size, name_);
  if (!dst.ok()) return dst.status();
  if (size > 0) std::memcpy(const_cast<uint8_t*>(*dst), src, size);
  return absl::OkStatus();
}

absl::Status HostDevice::CopyFromBuffer(const runtime::Buffer& buffer, int64_t offset, void* dst,
                                        int64_t size) {
  absl::StatusOr<const uint8_t*> src = HostRange(buffer, offset, size, name_);
  if (!src.ok()) return src.status();
  if (size > 0) std::memcpy(dst, *src, size);
  return absl::OkStatus();
}

}  // namespace kiln::host
