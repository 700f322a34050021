// Whether a listening address may be used with the security it has: the
// default is loopback only, and an address other machines can reach needs
// TLS and client authentication (bearer tokens or client certificates)
// unless the operator says --insecure.
#ifndef KILN_SERVER_EXPOSURE_H_
#define KILN_SERVER_EXPOSURE_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "base/net_address.h"

namespace kiln::server {

using ::kiln::HostOf;
using ::kiln::IsLoopbackHost;

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
