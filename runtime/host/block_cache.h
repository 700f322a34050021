// Freed host buffers' memory, kept for the next buffer of the same size.
//
// A training step allocates the same shapes every step. Fresh memory from
// the system costs a page fault per 4 KiB on first touch (several times the
// arithmetic of an elementwise op, and more under virtualization); blocks
// that go back here are handed out again already mapped. Blocks of at least
// kMinCachedBytes are cached, by exact page-rounded size, up to
// kMaxCachedBytes in all; ReleaseCachedMemory (registered with
// runtime::RegisterMemoryReleaser) returns them to the system, as the server
// does when sessions end. Cached blocks belong to no device or session: a
// device's tracker charges a buffer while it lives.
#ifndef KILN_RUNTIME_HOST_BLOCK_CACHE_H_
#define KILN_RUNTIME_HOST_BLOCK_CACHE_H_

#include <cstddef>
#include <cstdint>

namespace kiln::host {

inline constexpr size_t kMinCachedBytes = size_t{64} << 10;
inline constexpr size_t kMaxCachedBytes = size_t{1} << 30;

// 64-byte aligned memory of at least `bytes` (null when the system has none).
uint8_t* AllocateBlock(size_t bytes);
// Gives back a block from AllocateBlock(bytes).
void FreeBlock(uint8_t* block, size_t bytes);
// Returns every cached block to the system; the bytes it freed.
size_t ReleaseCachedBlocks();
size_t CachedBlockBytes();

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_BLOCK_CACHE_H_
