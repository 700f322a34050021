// Whether a listening address may be used with the security it has: the
// default is loopback only, and an address other machines can reach needs
// TLS and client authentication (bearer tokens or client certificates)
// unless the operator says --insecure.
#ifndef KILN_SERVER_EXPOSURE_H_
#define KILN_SERVER_EXPOSURE_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace kiln::server {

// True when `host` (the part of host:port before the port) is reachable from
// this machine only: localhost, 127.0.0.0/8, ::1, or a unix: socket path.
// An empty host or a wildcard (0.0.0.0, ::) is every interface.
bool IsLoopbackHost(absl::string_view host);

// The host of "host:port", "[v6]:port" or "unix:PATH" (returned whole).
absl::string_view HostOf(absl::string_view address);

struct Exposure {
  bool tls = false;             // the server presents a certificate
  bool authenticated = false;   // bearer tokens or verified client certificates
  bool insecure = false;        // --insecure
};

// What the operator is told: empty when `address` is safe as configured; a
// warning (to log at start and show clients) when it is not but --insecure
// allows it; FAILED_PRECONDITION saying what is missing when it is refused.
absl::StatusOr<std::string> CheckExposure(absl::string_view address, const Exposure& exposure);

}  // namespace kiln::server

#endif  // KILN_SERVER_EXPOSURE_H_
