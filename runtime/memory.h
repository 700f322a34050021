// Per-device memory accounting: every live buffer's bytes are charged to its
// device's tracker; allocations past the capacity fail cleanly.
#ifndef KILN_RUNTIME_MEMORY_H_
#define KILN_RUNTIME_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kiln::runtime {

struct MemoryStats {
  int64_t capacity_bytes = 0;
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t live_buffers = 0;
};

// Thread-safe.
class MemoryTracker {
 public:
  explicit MemoryTracker(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Charges `bytes`; RESOURCE_EXHAUSTED (naming the request, the use and the
  // capacity) when it would pass the capacity.
  absl::Status Reserve(int64_t bytes, const std::string& what);
  void Release(int64_t bytes);
  MemoryStats Stats() const;

 private:
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_MEMORY_H_
