// kiln-server: the device server.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "runtime/backend.h"
#include "runtime/compute_threads.h"
#include "server/allocator.h"
#include "base/file_io.h"
#include "base/net_address.h"
#include "server/grpc_group.h"
#include "server/grpc_service.h"
#include "base/logging.h"
#include "server/exposure.h"
#include "server/metrics_http.h"
#include "server/service.h"
#include "server/tokens.h"
#include "server/trace_writer.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8470",
          "host:port to listen on; port 0 picks a free port. Loopback by default.");
ABSL_FLAG(int64_t, lease_seconds, 60,
          "a session whose client sends no call for this long is closed and its memory freed");
ABSL_FLAG(int64_t, compile_cache_entries, 256, "compiled programs kept in the cache");
ABSL_FLAG(std::string, compile_cache_bytes, "1G",
          "bytes the compile cache keeps: canonical modules and their constants (suffixes K, M, "
          "G); a program larger alone is compiled for its session but not kept");
ABSL_FLAG(std::string, session_memory_bytes, "unlimited",
          "device memory one session may hold, its buffers and its executions' temporaries "
          "over all devices (e.g. 4G; unlimited: only the devices' capacity bounds it)");
ABSL_FLAG(std::string, session_host_memory_bytes, "unlimited",
          "host memory one session may hold outside its buffers: values waiting in its feed "
          "queues or being streamed in, replies on their way out, inline arguments being "
          "decoded (e.g. 1G; unlimited: only --host_memory_bytes bounds it)");
ABSL_FLAG(std::string, host_memory_bytes, "4G",
          "host memory all sessions together may hold outside their buffers (see "
          "--session_host_memory_bytes)");
ABSL_FLAG(int32_t, session_executions, 64, "executions one session may run or queue at once");
ABSL_FLAG(std::string, max_module_bytes, "64M", "largest module a client may compile, as sent");
ABSL_FLAG(int64_t, max_instructions, 1000000, "most instructions in a module");
ABSL_FLAG(int64_t, max_computations, 10000, "most computations in a module");
ABSL_FLAG(std::string, max_literal_bytes, "64M", "most bytes of constants in a module");
ABSL_FLAG(int32_t, max_call_depth, 64, "longest chain of nested calls in a module (at most 64)");
ABSL_FLAG(int32_t, max_rank, 64, "highest rank of a shape in a module (at most 64)");
ABSL_FLAG(int32_t, threads, 0,
          "threads the compute libraries use (BLAS and oneDNN on the CPU); 0: one per core");
ABSL_FLAG(std::string, compile_cache_dir, "",
          "directory where compiled programs are kept across restarts (created if missing; "
          "several servers may share it); empty: memory only");
ABSL_FLAG(std::string, compile_cache_dir_bytes, "4G",
          "bytes --compile_cache_dir may hold; the least recently used entries go first");
ABSL_FLAG(std::string, dump_dir, "",
          "write each newly compiled module here as HLO text, named by its fingerprint");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per line (time, level, thread, message)");
ABSL_FLAG(std::string, trace_file, "",
          "write a Chrome trace-event JSON of compiles, transfers and executions here (opens "
          "in ui.perfetto.dev); empty: none");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off (KILN_LOG_LEVEL sets it for embedded use)");
ABSL_FLAG(std::string, devices, "auto",
          "the devices, as kind:count,... (cpu:2,tpu:8 gives cpu:0, cpu:1 and tpu:0..7), or "
          "auto: cpu:1 and every GPU of the host (the first GPU is then the default device); "
          "kiln-server --backends lists the kinds this build has");
ABSL_FLAG(std::string, backend_config, "",
          "backend settings, as kind.key=value,... (cpu.memory_bytes=16G, "
          "tpu.config=deploy/tpu_v3_8.cfg, tpu.hbm_bytes=1G)");
ABSL_FLAG(bool, backends, false, "list the backend kinds of this build and their settings, then exit");
ABSL_FLAG(int64_t, feed_queue_capacity, 16,
          "values each session's infeed and outfeed queue holds per device");
ABSL_FLAG(int64_t, infeed_timeout_seconds, 30,
          "how long a program's infeed waits for data before failing");
ABSL_FLAG(int64_t, collective_timeout_seconds, 60,
          "how long a replica waits for the others at an all-reduce");
ABSL_FLAG(std::string, group_host, "",
          "host name or IP that this server's collectives with other servers (groups, over "
          "Gloo's TCP transport) bind to and the other servers reach; empty: the host of "
          "--listen, or this machine's host name when --listen is a wildcard");
ABSL_FLAG(std::string, group_peers, "",
          "comma-separated hosts (names or IPs, as the members' addresses give them) that the "
          "members of a group may be on, or * for any; empty: any while --listen is on "
          "loopback, no groups otherwise (docs/groups.md)");
ABSL_FLAG(std::string, group_tls_ca, "",
          "PEM CA certificate(s) of the other servers of a group: this server then reaches "
          "member 0's group store over TLS, presenting --tls_cert/--tls_key; empty: plain TCP");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the server: turns on TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s): clients must present a certificate signed by one (mutual TLS)");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "file of bearer tokens, one 'NAME TOKEN' per line, mode 600: every call must carry "
          "one (re-read on SIGHUP)");
ABSL_FLAG(bool, insecure, false,
          "allow listening on an address other machines can reach without TLS and client "
          "authentication (warned at start and to every client)");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port of a Prometheus endpoint (plain HTTP GET /metrics; port 0 picks a free "
          "port); the bearer tokens apply; empty: none");
ABSL_FLAG(int64_t, shutdown_grace_seconds, 5,
          "on SIGTERM/SIGINT, how long in-flight calls may take before they are cancelled");

namespace {
int g_signal_pipe[2] = {-1, -1};
void OnStopSignal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
}
}  // namespace

int main(int argc, char** argv) {
  kiln::ParseFlags(argc, argv,
                   "kiln-server: the Kiln device server. Usage: kiln-server [--flag=value ...]");
  kiln::runtime::SetComputeThreads(absl::GetFlag(FLAGS_threads));
  if (absl::GetFlag(FLAGS_backends)) {
    kiln::runtime::RegisterBuiltinBackends();
    for (const kiln::runtime::BackendInfo& b : kiln::runtime::RegisteredBackends()) {
      std::printf("%s: %s\n  config: %s\n", b.kind.c_str(), b.summary.c_str(),
                  b.config_help.c_str());
    }
    return 0;
  }
  // The handler only writes the signal number to a pipe; a thread reads it
  // and shuts the server down outside signal context.
  if (pipe(g_signal_pipe) != 0) {
    std::perror("kiln-server: pipe");
    return 1;
  }
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);

  if (absl::Status st = kiln::logging::SetFormat(absl::GetFlag(FLAGS_log_format)); !st.ok()) {
    std::fprintf(stderr, "kiln-server: --log_format: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (absl::Status st = kiln::logging::SetLevel(absl::GetFlag(FLAGS_log_level)); !st.ok()) {
    std::fprintf(stderr, "kiln-server: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  kiln::server::TuneAllocatorForServing();
  kiln::server::ServiceOptions options;
  options.lease = absl::Seconds(absl::GetFlag(FLAGS_lease_seconds));
  options.compile_cache_entries = static_cast<size_t>(absl::GetFlag(FLAGS_compile_cache_entries));
  kiln::runtime::RegisterBuiltinBackends();  // "auto" asks them for their devices
  auto backends = kiln::runtime::ParseBackendSpecs(absl::GetFlag(FLAGS_devices),
                                                   absl::GetFlag(FLAGS_backend_config));
  if (!backends.ok()) {
    std::fprintf(stderr, "kiln-server: %s\n", std::string(backends.status().message()).c_str());
    return 2;
  }
  options.backends = *std::move(backends);
  options.infeed_timeout = absl::Seconds(absl::GetFlag(FLAGS_infeed_timeout_seconds));
  if (absl::GetFlag(FLAGS_feed_queue_capacity) < 1) {
    std::fprintf(stderr, "kiln-server: --feed_queue_capacity must be at least 1\n");
    return 2;
  }
  options.feed_queue_capacity = static_cast<size_t>(absl::GetFlag(FLAGS_feed_queue_capacity));
  options.collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_seconds));
  options.dump_dir = absl::GetFlag(FLAGS_dump_dir);
  options.compile_cache_dir = absl::GetFlag(FLAGS_compile_cache_dir);
  {
    absl::StatusOr<int64_t> bytes = kiln::runtime::ParseBytes(
        absl::GetFlag(FLAGS_compile_cache_dir_bytes), "--compile_cache_dir_bytes");
    if (!bytes.ok() || *bytes <= 0) {
      std::fprintf(stderr, "kiln-server: %s\n",
                   bytes.ok() ? "--compile_cache_dir_bytes must be positive"
                              : std::string(bytes.status().message()).c_str());
      return 2;
    }
    options.compile_cache_dir_bytes = *bytes;
  }
  {
    absl::StatusOr<int64_t> bytes =
        kiln::runtime::ParseBytes(absl::GetFlag(FLAGS_compile_cache_bytes), "--compile_cache_bytes");
    if (!bytes.ok() || *bytes < 0) {
      std::fprintf(stderr, "kiln-server: %s\n",
                   bytes.ok() ? "--compile_cache_bytes must not be negative"
                              : std::string(bytes.status().message()).c_str());
      return 2;
    }
    options.compile_cache_bytes = *bytes;
  }
  // A quota flag: "unlimited" or a positive size; false after saying why.
  auto parse_quota = [](const std::string& value, const std::string& flag, int64_t* out) {
    if (value == "unlimited") return true;
    absl::StatusOr<int64_t> bytes = kiln::runtime::ParseBytes(value, flag);
    if (!bytes.ok() || *bytes <= 0) {
      std::fprintf(stderr, "kiln-server: %s\n",
                   bytes.ok() ? (flag + " must be positive").c_str()
                              : std::string(bytes.status().message()).c_str());
      return false;
    }
    *out = *bytes;
    return true;
  };
  kiln::server::SessionLimits& quotas = options.session_limits;
  if (!parse_quota(absl::GetFlag(FLAGS_session_memory_bytes), "--session_memory_bytes",
                   &quotas.memory_bytes) ||
      !parse_quota(absl::GetFlag(FLAGS_session_host_memory_bytes), "--session_host_memory_bytes",
                   &quotas.host_memory_bytes) ||
      !parse_quota(absl::GetFlag(FLAGS_host_memory_bytes), "--host_memory_bytes",
                   &quotas.all_sessions_host_memory_bytes)) {
    return 2;
  }
  if (absl::GetFlag(FLAGS_session_executions) < 1) {
    std::fprintf(stderr, "kiln-server: --session_executions must be at least 1\n");
    return 2;
  }
  options.session_limits.executions = absl::GetFlag(FLAGS_session_executions);
  {
    kiln::server::ModuleLimits& limits = options.module_limits;
    absl::StatusOr<int64_t> module_bytes =
        kiln::runtime::ParseBytes(absl::GetFlag(FLAGS_max_module_bytes), "--max_module_bytes");
    absl::StatusOr<int64_t> literal_bytes =
        kiln::runtime::ParseBytes(absl::GetFlag(FLAGS_max_literal_bytes), "--max_literal_bytes");
    for (const absl::Status& st : {module_bytes.status(), literal_bytes.status()}) {
      if (!st.ok()) {
        std::fprintf(stderr, "kiln-server: %s\n", std::string(st.message()).c_str());
        return 2;
      }
    }
    limits.module_bytes = *module_bytes;
    limits.literal_bytes = *literal_bytes;
    limits.instructions = absl::GetFlag(FLAGS_max_instructions);
    limits.computations = absl::GetFlag(FLAGS_max_computations);
    limits.call_depth = absl::GetFlag(FLAGS_max_call_depth);
    limits.rank = absl::GetFlag(FLAGS_max_rank);
    if (limits.call_depth < 1 || limits.call_depth > kiln::ir::kMaxCallDepth ||
        limits.rank < 0 || limits.rank > kiln::ir::kMaxRank || limits.instructions < 1 ||
        limits.computations < 1) {
      std::fprintf(stderr,
                   "kiln-server: --max_call_depth must be 1..%d, --max_rank 0..%d, "
                   "--max_instructions and --max_computations at least 1\n",
                   kiln::ir::kMaxCallDepth, kiln::ir::kMaxRank);
      return 2;
    }
  }
  if (!options.dump_dir.empty() && !std::filesystem::is_directory(options.dump_dir)) {
    std::fprintf(stderr, "kiln-server: --dump_dir %s is not a directory\n",
                 options.dump_dir.c_str());
    return 2;
  }
  std::unique_ptr<kiln::server::TraceWriter> trace;
  if (!absl::GetFlag(FLAGS_trace_file).empty()) {
    auto opened = kiln::server::TraceWriter::Open(absl::GetFlag(FLAGS_trace_file));
    if (!opened.ok()) {
      std::fprintf(stderr, "kiln-server: %s\n", std::string(opened.status().message()).c_str());
      return 2;
    }
    trace = *std::move(opened);
    options.trace = trace.get();
  }
  {
    std::string group_host = absl::GetFlag(FLAGS_group_host);
    if (group_host.empty()) {
      group_host = std::string(kiln::HostOf(absl::GetFlag(FLAGS_listen)));
      if (group_host.empty() || group_host == "0.0.0.0" || group_host == "::" ||
          group_host == "[::]") {
        char name[256] = {};
        group_host = gethostname(name, sizeof(name) - 1) == 0 ? name : "127.0.0.1";
      }
    }
    options.group_bind_host = group_host;
    options.group_peers =
        absl::StrSplit(absl::GetFlag(FLAGS_group_peers), ',', absl::SkipEmpty());
    options.group_peers_required = !kiln::IsLoopbackHost(kiln::HostOf(absl::GetFlag(FLAGS_listen)));
  }
  if (!absl::GetFlag(FLAGS_group_tls_ca).empty()) {
    kiln::server::GroupChannelOptions group_channel;
    auto read = [](const std::string& path, const char* flag, std::string* out) {
      if (path.empty()) return true;
      std::optional<std::string> text = kiln::ReadFileToString(path);
      if (!text.has_value()) {
        std::fprintf(stderr, "kiln-server: cannot read %s %s\n", flag, path.c_str());
        return false;
      }
      *out = *std::move(text);
      return true;
    };
    if (!read(absl::GetFlag(FLAGS_group_tls_ca), "--group_tls_ca", &group_channel.ca_pem) ||
        !read(absl::GetFlag(FLAGS_tls_cert), "--tls_cert", &group_channel.cert_pem) ||
        !read(absl::GetFlag(FLAGS_tls_key), "--tls_key", &group_channel.key_pem)) {
      return 2;
    }
    kiln::server::SetGroupChannelOptions(group_channel);
  }
  options.remote_group_store = kiln::server::RemoteGroupStore;
  options.probe_member = kiln::server::ProbeServer;
  auto service = kiln::server::Service::Create(options);
  if (!service.ok()) {
    std::fprintf(stderr, "kiln-server: %s\n", std::string(service.status().message()).c_str());
    return 1;
  }
  kiln::server::GrpcServerOptions grpc_options;
  grpc_options.address = absl::GetFlag(FLAGS_listen);
  grpc_options.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                      absl::GetFlag(FLAGS_tls_client_ca)};
  std::unique_ptr<kiln::server::TokenStore> tokens;
  if (!absl::GetFlag(FLAGS_auth_tokens_file).empty()) {
    auto loaded = kiln::server::TokenStore::Load(absl::GetFlag(FLAGS_auth_tokens_file));
    if (!loaded.ok()) {
      std::fprintf(stderr, "kiln-server: --auth_tokens_file: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    tokens = *std::move(loaded);
    grpc_options.tokens = tokens.get();
  }
  {
    kiln::server::Exposure exposure;
    exposure.tls = grpc_options.tls.enabled();
    exposure.authenticated = tokens != nullptr || !grpc_options.tls.client_ca.empty();
    exposure.insecure = absl::GetFlag(FLAGS_insecure);
    absl::StatusOr<std::string> warning =
        kiln::server::CheckExposure(grpc_options.address, exposure);
    if (!warning.ok()) {
      std::fprintf(stderr, "kiln-server: %s\n", std::string(warning.status().message()).c_str());
      return 2;
    }
    grpc_options.security_warning = *warning;
    if (!warning->empty()) {
      std::fprintf(stderr, "kiln-server: %s\n", warning->c_str());
      kiln::logging::Warn("{}", *warning);
    }
  }
  auto server = kiln::server::GrpcServer::Start(service->get(), grpc_options);
  if (!server.ok()) {
    std::fprintf(stderr, "kiln-server: %s\n", std::string(server.status().message()).c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("listening on %s\n", (*server)->address().c_str());
  std::unique_ptr<kiln::server::MetricsHttpServer> metrics_http;
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    kiln::server::MetricsHttpOptions metrics_options;
    metrics_options.address = absl::GetFlag(FLAGS_metrics_listen);
    metrics_options.tokens = tokens.get();
    metrics_options.metrics = &(*service)->metrics();
    if (!kiln::server::IsLoopbackHost(kiln::server::HostOf(metrics_options.address))) {
      if (!absl::GetFlag(FLAGS_insecure)) {
        std::fprintf(stderr,
                     "kiln-server: --metrics_listen=%s is reachable from other machines, and the "
                     "metrics endpoint serves plain HTTP; listen on loopback, or pass --insecure "
                     "(with --auth_tokens_file, scrapes still need a token)\n",
                     metrics_options.address.c_str());
        return 2;
      }
      std::fprintf(stderr, "kiln-server: INSECURE: metrics are served over plain HTTP on %s%s\n",
                   metrics_options.address.c_str(),
                   tokens == nullptr ? " to anyone who reaches it" : "");
    }
    kiln::server::Service* svc = service->get();
    auto started = kiln::server::MetricsHttpServer::Start(
        metrics_options, [svc] { return svc->PrometheusMetrics(); });
    if (!started.ok()) {
      std::fprintf(stderr, "kiln-server: %s\n", std::string(started.status().message()).c_str());
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    metrics_http = *std::move(started);
    std::printf("metrics on http://%s/metrics\n", metrics_http->address().c_str());
  }
  std::fflush(stdout);
  kiln::logging::Info("kiln-server listening on {} with {} device(s), lease {}s{}{}",
                      (*server)->address(), (*service)->devices().size(),
                      absl::GetFlag(FLAGS_lease_seconds),
                      grpc_options.tls.enabled()
                          ? (grpc_options.tls.client_ca.empty() ? ", TLS" : ", mutual TLS")
                          : "",
                      tokens != nullptr ? ", bearer tokens" : "");
  std::thread waiter([&] {
    for (;;) {
      unsigned char sig = 0;
      if (read(g_signal_pipe[0], &sig, 1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (sig == SIGHUP) {
        if (tokens == nullptr) {
          kiln::logging::Info("SIGHUP: no --auth_tokens_file to re-read");
          continue;
        }
        absl::StatusOr<size_t> n = tokens->Reload();
        (*service)->metrics().Add(n.ok() ? "token_reloads" : "token_reload_failures");
        if (n.ok()) {
          kiln::logging::Info("SIGHUP: {} bearer token(s) in force from {}", *n, tokens->path());
        } else {
          kiln::logging::Error("SIGHUP: {}; the previous tokens stay in force",
                               std::string(n.status().message()));
        }
        continue;
      }
      kiln::logging::Info("signal {} received; shutting down", static_cast<int>(sig));
      break;
    }
    (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds)));
  });
  (*server)->Wait();
  waiter.join();
  kiln::logging::Info("kiln-server stopped");
  return 0;
}
