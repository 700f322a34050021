#include "runtime/host/block_cache.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "runtime/memory.h"

namespace kiln::host {
namespace {

TEST(BlockCacheTest, AFreedLargeBlockServesTheNextOfItsSize) {
  ReleaseCachedBlocks();
  const size_t bytes = size_t{1} << 20;
  uint8_t* a = AllocateBlock(bytes);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  FreeBlock(a, bytes);
  EXPECT_EQ(CachedBlockBytes(), bytes);
  uint8_t* b = AllocateBlock(bytes);
  EXPECT_EQ(b, a);  // the same memory, already mapped
  EXPECT_EQ(CachedBlockBytes(), 0u);
  uint8_t* other = AllocateBlock(bytes + 8192);  // another size: not that block
  EXPECT_NE(other, a);
  FreeBlock(b, bytes);
  FreeBlock(other, bytes + 8192);
  EXPECT_EQ(ReleaseCachedBlocks(), bytes + bytes + 8192);
  EXPECT_EQ(CachedBlockBytes(), 0u);
}

TEST(BlockCacheTest, SmallBlocksAreNotKeptAndTheCacheIsBounded) {
  ReleaseCachedBlocks();
  uint8_t* small = AllocateBlock(1000);
  FreeBlock(small, 1000);
  EXPECT_EQ(CachedBlockBytes(), 0u);
  // Freeing more than the bound keeps at most the bound.
  const size_t bytes = kMaxCachedBytes / 4 + 4096;
  std::vector<uint8_t*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(AllocateBlock(bytes));
  for (uint8_t* b : blocks) FreeBlock(b, bytes);
  EXPECT_LE(CachedBlockBytes(), kMaxCachedBytes);
  EXPECT_EQ(CachedBlockBytes(), 3 * bytes);
  runtime::ReleaseCachedMemory();  // the registered releaser empties it
  EXPECT_EQ(CachedBlockBytes(), 0u);
}

}  // namespace
}  // namespace kiln::host
