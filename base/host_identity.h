// What tells whether two processes share a machine's cores: the running
// kernel (the same for every process and container on one kernel,
// different on any other machine or after a reboot) and the cores each
// process may run on.
#ifndef KILN_BASE_HOST_IDENTITY_H_
#define KILN_BASE_HOST_IDENTITY_H_

#include <string>
#include <vector>

namespace kiln {

// The running kernel, as 16 hex digits hashed from its boot id
// (/proc/sys/kernel/random/boot_id), so that the id itself is not shown to
// peers; empty where the kernel has no boot id. Read once; the reference
// lives as long as the process. Thread-safe.
const std::string& HostId();

// The cores this process may run on now (its affinity mask), in order; at
// least one. Thread-safe.
std::vector<int> AllowedCpus();

}  // namespace kiln

#endif  // KILN_BASE_HOST_IDENTITY_H_
