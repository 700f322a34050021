// The embedded service: the same service kiln-server runs, in this process,
// behind the ordinary client interface (no sockets). For tests, the CLI and
// programs that want no server. Link the kiln_embedded library
// (Kiln::embedded in the installed package).
#ifndef KILN_EMBEDDED_EMBEDDED_H_
#define KILN_EMBEDDED_EMBEDDED_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"

namespace kiln::embedded {

struct Options {
  std::string client_name = "kiln-embedded";
  // The devices, in kiln-server's flag forms: "kind:count,..." and
  // "kind.key=value,..." (docs/architecture.md lists the backends).
  std::string devices = "cpu:1";
  std::string backend_config;
};

// Starts the service with the devices `options` names and returns a client
// connected to it; the service lives as long as the client. Errors: an
// unknown backend kind or a bad config, from the backend.
absl::StatusOr<std::unique_ptr<client::Client>> Connect(const Options& options = {});

}  // namespace kiln::embedded

#endif  // KILN_EMBEDDED_EMBEDDED_H_
