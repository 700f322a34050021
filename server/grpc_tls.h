// TLS for kiln-server: its certificate and key, and for mutual TLS the CA
// that client certificates must chain to.
#ifndef KILN_SERVER_GRPC_TLS_H_
#define KILN_SERVER_GRPC_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace kiln::server {

// PEM file paths (--tls_cert, --tls_key, --tls_client_ca).
struct TlsFiles {
  std::string cert;       // the server's certificate chain
  std::string key;        // its private key
  std::string client_ca;  // non-empty: clients must present a certificate it signed

  bool enabled() const { return !cert.empty() || !key.empty() || !client_ca.empty(); }
};

// Reads and checks the files (each parses as PEM, the key matches the
// certificate, the certificate is within its validity period) so that a
// mistake is reported by name at start instead of as failed handshakes
// later. INVALID_ARGUMENT naming the flag and file otherwise.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const TlsFiles& files);

}  // namespace kiln::server

#endif  // KILN_SERVER_GRPC_TLS_H_
