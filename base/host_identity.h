// What tells whether two processes share a machine's cores: the running
// kernel's boot id (the same for every process and container on one
// kernel, different on any other machine or after a reboot) and the cores
// this process may run on.
#ifndef KILN_BASE_HOST_IDENTITY_H_
#define KILN_BASE_HOST_IDENTITY_H_

#include <string>

namespace kiln {

// /proc/sys/kernel/random/boot_id without its newline; empty where the
// kernel does not provide it.
const std::string& HostBootId();

// The cores this process may run on (its affinity mask), at least 1.
int AllowedCoreCount();

}  // namespace kiln

#endif  // KILN_BASE_HOST_IDENTITY_H_
