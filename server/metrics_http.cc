#include "server/metrics_http.h"

#include <civetweb.h>
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"

// civetweb starts its threads with a fixed stack of about 100 KiB, and glibc
// carves every thread's static TLS out of its stack: kiln-server's libraries
// hold about 70 KiB of it (OpenBLAS alone 60), so a civetweb worker
// overflowed its stack in its first request. Any stack asked for in this
// process is made at least 1 MiB; larger requests are left alone.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinStack = size_t{1} << 20;
  return real(attr, std::max(size, kMinStack));
}

namespace kiln::server {
namespace {

void InitCivetweb() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

int LogMessage(const mg_connection*, const char* message) {
  logging::Debug("metrics endpoint: {}", message);
  return 1;  // handled: civetweb prints nothing itself
}

void Reply(mg_connection* conn, int code, const char* reason, const std::string& body,
           const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
            code, reason, body.size(), extra_headers);
  mg_write(conn, body.data(), body.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, std::function<std::string()> render) {
  const size_t colon = options.address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.address.substr(colon + 1), &port) ||
      port < 0 || port > 65535 || options.address.find('[') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen=", options.address, ": expected IPV4_HOST:PORT (port 0: a free one)"));
  }
  InitCivetweb();
  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  server->options_ = options;
  server->render_ = std::move(render);
  std::string host = options.address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  const std::string ports = absl::StrCat(host.empty() ? "" : host + ":", port);
  const char* opts[] = {"listening_ports", ports.c_str(), "num_threads", "2",
                        "request_timeout_ms", "10000", "enable_keep_alive", "no", nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = LogMessage;
  server->context_ = mg_start(&callbacks, server.get(), opts);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.address,
                                               " (is the port in use?)"));
  }
  mg_server_port bound[4];
  const int n = mg_get_server_ports(server->context_, 4, bound);
  server->address_ = absl::StrCat(host.empty() ? "0.0.0.0" : host, ":", n > 0 ? bound[0].port : port);
  // "**" matches every path, so that other paths get an answer (404).
  mg_set_request_handler(server->context_, "**", &MetricsHttpServer::Handle, server.get());
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

int MetricsHttpServer::Handle(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<MetricsHttpServer*>(self_ptr);
  const mg_request_info* info = mg_get_request_info(conn);
  if (self->options_.tokens != nullptr) {
    const char* header = mg_get_header(conn, "Authorization");
    absl::StatusOr<std::string> name =
        self->options_.tokens->Authenticate(header == nullptr ? "" : header);
    if (!name.ok()) {
      if (self->options_.metrics != nullptr) self->options_.metrics->Add("auth_failures");
      Reply(conn, 401, "Unauthorized", std::string(name.status().message()) + "\n",
            "WWW-Authenticate: Bearer realm=\"kiln\"\r\n");
      return 401;
    }
  }
  if (std::strcmp(info->local_uri, "/metrics") != 0) {
    Reply(conn, 404, "Not Found", "kiln-server serves /metrics only\n");
    return 404;
  }
  if (std::strcmp(info->request_method, "GET") != 0 &&
      std::strcmp(info->request_method, "HEAD") != 0) {
    Reply(conn, 405, "Method Not Allowed", "GET /metrics\n", "Allow: GET, HEAD\r\n");
    return 405;
  }
  const std::string body = self->render_();
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  if (std::strcmp(info->request_method, "GET") == 0) mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace kiln::server
