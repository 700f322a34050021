#include "server/allocator.h"

#include <malloc.h>

#include <algorithm>
#include <thread>

namespace kiln::server {

void TuneAllocatorForServing() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // One arena per core: gRPC serves concurrent calls on as many threads,
  // and with glibc's default (eight arenas per core) each keeps its own
  // freed heap, which no session owns and the server never gets back.
  mallopt(M_ARENA_MAX, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
#endif
}

}  // namespace kiln::server
