// Listening and connecting addresses: which reach other machines.
#ifndef KILN_BASE_NET_ADDRESS_H_
#define KILN_BASE_NET_ADDRESS_H_

#include "absl/strings/string_view.h"

namespace kiln {

// True when `host` (the part of host:port before the port) is reachable from
// this machine only: localhost, 127.0.0.0/8, ::1, or a unix: socket path.
// An empty host or a wildcard (0.0.0.0, ::) is every interface.
bool IsLoopbackHost(absl::string_view host);

// The host of "host:port", "[v6]:port" or "unix:PATH" (returned whole).
absl::string_view HostOf(absl::string_view address);

}  // namespace kiln

#endif  // KILN_BASE_NET_ADDRESS_H_
