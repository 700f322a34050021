// How a client proves who it is and checks whom it talks to: TLS (with a
// CA, and a client certificate for servers that require one) and a bearer
// token sent with every call. No gRPC types.
#ifndef KILN_CLIENT_SECURITY_H_
#define KILN_CLIENT_SECURITY_H_

#include <string>

#include "absl/status/statusor.h"

namespace kiln::client {

struct SecurityOptions {
  // TLS is used when `tls` is set or any of the files below is given.
  bool tls = false;
  std::string tls_ca_file;      // PEM CA that signed the server's certificate (empty: system roots)
  std::string tls_cert_file;    // PEM client certificate, for servers that require one
  std::string tls_key_file;     // its private key
  std::string tls_server_name;  // the name to verify in the server's certificate
                                // (empty: the host of the address)
  std::string token;            // bearer token sent with every call (empty: none);
                                // without TLS only to a loopback address

  bool uses_tls() const {
    return tls || !tls_ca_file.empty() || !tls_cert_file.empty() || !tls_key_file.empty();
  }
};

// `options` with every empty field taken from the environment:
//   KILN_TLS=1                 TLS with the system's CA roots
//   KILN_TLS_CA=FILE           TLS, verifying the server against this CA
//   KILN_TLS_CERT, KILN_TLS_KEY  client certificate and key (mutual TLS)
//   KILN_TLS_SERVER_NAME       the name to verify in the server's certificate
//   KILN_TOKEN=TOKEN, or KILN_TOKEN_FILE=FILE (its first line)
// INVALID_ARGUMENT when a token file cannot be read, a client certificate
// comes without its key (or the reverse), or the token has characters that
// cannot travel in a header.
absl::StatusOr<SecurityOptions> ResolveSecurity(const SecurityOptions& options);

}  // namespace kiln::client

#endif  // KILN_CLIENT_SECURITY_H_
