// Allocator settings for a process whose main job is serving Kiln.
#ifndef KILN_SERVER_ALLOCATOR_H_
#define KILN_SERVER_ALLOCATOR_H_

namespace kiln::server {

// With glibc's defaults every block of 128 KiB or more (each 1 MiB transfer
// chunk gRPC receives, each message a client sends) is a fresh mapping:
// page faults on the way in, an unmap on the way out, for every chunk. This
// makes blocks of up to 32 MiB come from the heap and keeps up to 512 MiB
// of freed heap mapped for the next ones; the session reaper still gives
// memory back (malloc_trim) when sessions end. It also keeps one arena per
// core, so that the freed heap of many serving threads is not held in as
// many arenas. Call once, before serving;
// kiln-server does. Not for processes that only link the client or embed
// the service: their allocator is their own.
void TuneAllocatorForServing();

}  // namespace kiln::server

#endif  // KILN_SERVER_ALLOCATOR_H_
