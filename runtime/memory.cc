#include "runtime/memory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

absl::Status MemoryTracker::Reserve(int64_t bytes, const std::string& what) {
  absl::MutexLock lock(&mu_);
  if (bytes < 0 || bytes > capacity_ - in_use_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of device memory allocating ", bytes, " bytes for ", what, ": ",
        in_use_, " of ", capacity_, " bytes in use"));
  }
  in_use_ += bytes;
  ++live_;
  peak_ = std::max(peak_, in_use_);
  return absl::OkStatus();
}

void MemoryTracker::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= bytes;
  --live_;
}

MemoryStats MemoryTracker::Stats() const {
  absl::MutexLock lock(&mu_);
  return {capacity_, in_use_, peak_, live_};
}

}  // namespace kiln::runtime
