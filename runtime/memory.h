// Per-device memory accounting: every live buffer's bytes are charged to its
// device's tracker; allocations past the capacity fail cleanly and name the
// largest buffers that hold the memory.
#ifndef KILN_RUNTIME_MEMORY_H_
#define KILN_RUNTIME_MEMORY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "compiler/ir/shape.h"

namespace kiln::runtime {

class Buffer;

struct MemoryStats {
  int64_t capacity_bytes = 0;
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t live_buffers = 0;
};

// Thread-safe.
class MemoryTracker {
 public:
  // The bytes an array occupies on the device (a backend with padded tiles
  // counts the padding); null: its byte size.
  using Footprint = std::function<int64_t(const ir::Shape&)>;
  explicit MemoryTracker(int64_t capacity_bytes, Footprint footprint = nullptr)
      : capacity_(capacity_bytes), footprint_(std::move(footprint)) {}

  int64_t FootprintOf(const ir::Shape& shape) const {
    return footprint_ ? footprint_(shape) : shape.ByteSize();
  }
  // Charges `bytes` for `owner` (borrowed; must stay alive until Release).
  // RESOURCE_EXHAUSTED when it would pass the capacity, naming the request,
  // the use, the capacity and the largest live buffers.
  absl::Status Reserve(const Buffer* owner, int64_t bytes);
  void Release(const Buffer* owner, int64_t bytes);
  MemoryStats Stats() const;

 private:
  const int64_t capacity_;
  const Footprint footprint_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<const Buffer*, int64_t> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_MEMORY_H_
