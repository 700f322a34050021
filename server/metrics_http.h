// The Prometheus endpoint of kiln-server (--metrics_listen): GET /metrics
// over plain HTTP, served by civetweb. With bearer tokens configured, a
// scrape needs one too (`Authorization: Bearer TOKEN`, Prometheus'
// `authorization` setting). There is no HTTPS: Debian 12's civetweb loads
// OpenSSL 3 through the OpenSSL 1.1 interface and crashes in its first
// handshake, so an address other machines reach is refused unless
// --insecure, like an unencrypted gRPC port.
#ifndef KILN_SERVER_METRICS_HTTP_H_
#define KILN_SERVER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/metrics.h"
#include "server/tokens.h"

struct mg_context;
struct mg_connection;

namespace kiln::server {

struct MetricsHttpOptions {
  std::string address = "127.0.0.1:0";  // host:port; port 0 picks a free port (IPv4 only)
  const TokenStore* tokens = nullptr;   // borrowed, must outlive the server; null: no token needed
  Metrics* metrics = nullptr;           // borrowed; counts auth_failures
};

// Thread-safe. Serves until destroyed.
class MetricsHttpServer {
 public:
  // `render` produces the page; it is called on civetweb's threads.
  // UNAVAILABLE when the address cannot be bound, INVALID_ARGUMENT for an
  // address that is not host:port or unusable TLS files.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpOptions& options, std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // "host:port" as bound.
  const std::string& address() const { return address_; }

 private:
  MetricsHttpServer() = default;
  static int Handle(::mg_connection* conn, void* self);

  MetricsHttpOptions options_;
  std::function<std::string()> render_;
  mg_context* context_ = nullptr;
  std::string address_;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_METRICS_HTTP_H_
