#include "runtime/host/block_cache.h"

#include <cstdlib>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "runtime/memory.h"

namespace kiln::host {
namespace {

constexpr size_t kPage = 4096;

size_t Rounded(size_t bytes) {
  return bytes >= kMinCachedBytes ? (bytes + kPage - 1) & ~(kPage - 1) : (bytes + 63) & ~size_t{63};
}

class BlockCache {
 public:
  uint8_t* Take(size_t rounded) {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(rounded);
    if (it == free_.end() || it->second.empty()) return nullptr;
    uint8_t* block = it->second.back();
    it->second.pop_back();
    cached_ -= rounded;
    return block;
  }
  // False when the cache is full (the caller frees the block).
  bool Keep(uint8_t* block, size_t rounded) {
    absl::MutexLock lock(&mu_);
    if (cached_ + rounded > kMaxCachedBytes) return false;
    free_[rounded].push_back(block);
    cached_ += rounded;
    return true;
  }
  size_t Release() {
    absl::flat_hash_map<size_t, std::vector<uint8_t*>> blocks;
    size_t freed = 0;
    {
      absl::MutexLock lock(&mu_);
      blocks.swap(free_);
      freed = cached_;
      cached_ = 0;
    }
    for (auto& [size, list] : blocks) {
      for (uint8_t* b : list) std::free(b);
    }
    return freed;
  }
  size_t cached() {
    absl::MutexLock lock(&mu_);
    return cached_;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<size_t, std::vector<uint8_t*>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

BlockCache& Cache() {
  static BlockCache* cache = [] {
    auto* c = new BlockCache();
    runtime::RegisterMemoryReleaser([] { ReleaseCachedBlocks(); });
    return c;
  }();
  return *cache;
}

}  // namespace

uint8_t* AllocateBlock(size_t bytes) {
  const size_t rounded = Rounded(bytes);
  if (rounded >= kMinCachedBytes) {
    if (uint8_t* block = Cache().Take(rounded)) return block;
  }
  return static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
}

void FreeBlock(uint8_t* block, size_t bytes) {
  if (block == nullptr) return;
  const size_t rounded = Rounded(bytes);
  if (rounded >= kMinCachedBytes && Cache().Keep(block, rounded)) return;
  std::free(block);
}

size_t ReleaseCachedBlocks() { return Cache().Release(); }

size_t CachedBlockBytes() { return Cache().cached(); }

}  // namespace kiln::host
