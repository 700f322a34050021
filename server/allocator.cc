#include "server/allocator.h"

#include <malloc.h>

namespace kiln::server {

void TuneAllocatorForServing() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

}  // namespace kiln::server
