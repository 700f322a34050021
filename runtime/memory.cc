#include "runtime/memory.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/buffer.h"

namespace kiln::runtime {
namespace {

constexpr size_t kListedBuffers = 5;

}  // namespace

absl::Status MemoryTracker::Reserve(const Buffer* owner, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes < 0 || bytes > capacity_ - in_use_) {
    // A buffer being destroyed waits in Release for this lock, so every
    // listed owner is still alive here.
    std::vector<std::pair<int64_t, const Buffer*>> largest;
    for (const auto& [buffer, size] : live_) largest.push_back({size, buffer});
    const size_t shown = std::min(kListedBuffers, largest.size());
    std::partial_sort(largest.begin(), largest.begin() + shown, largest.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> names;
    for (size_t i = 0; i < shown; ++i) {
      names.push_back(absl::StrCat(largest[i].second->shape().ToString(), " (",
                                   largest[i].first, " bytes)"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of device memory allocating ", bytes, " bytes for ", owner->shape().ToString(),
        ": ", in_use_, " of ", capacity_, " bytes in use by ", live_.size(), " buffers",
        names.empty() ? "" : absl::StrCat("; largest: ", absl::StrJoin(names, ", "))));
  }
  in_use_ += bytes;
  live_[owner] = bytes;
  peak_ = std::max(peak_, in_use_);
  return absl::OkStatus();
}

void MemoryTracker::Release(const Buffer* owner, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= bytes;
  live_.erase(owner);
}

MemoryStats MemoryTracker::Stats() const {
  absl::MutexLock lock(&mu_);
  return {capacity_, in_use_, peak_, static_cast<int64_t>(live_.size())};
}

}  // namespace kiln::runtime
