#include "server/prometheus.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {
namespace {

struct Family {
  const char* internal;  // the name in Metrics, without a "{device}" suffix
  const char* name;
  const char* type;      // counter, gauge or histogram
  const char* help;
  const char* label = "";  // a fixed label, `key="value"`
  double scale = 1;        // applied to the value (nanoseconds to seconds)
  const char* brace_label = "device";  // the label of a "{...}" suffix in the name
};

constexpr Family kFamilies[] = {
    {"sessions_opened", "kiln_sessions_opened_total", "counter", "Sessions opened."},
    {"handshakes_refused", "kiln_handshakes_refused_total", "counter",
     "Handshakes refused for want of a common protocol version."},
    {"auth_failures", "kiln_auth_failures_total", "counter",
     "Calls refused for a missing or unknown bearer token."},
    {"token_reloads", "kiln_token_reloads_total", "counter",
     "Times the bearer tokens file was read again (SIGHUP)."},
    {"token_reload_failures", "kiln_token_reload_failures_total", "counter",
     "Re-reads of the tokens file that failed (the old tokens stayed)."},
    {"bytes_in", "kiln_transfer_bytes_total", "counter",
     "Array bytes moved between clients and devices.", "direction=\"to_device\""},
    {"bytes_out", "kiln_transfer_bytes_total", "counter", "", "direction=\"from_device\""},
    {"transfers_to_device", "kiln_transfers_total", "counter", "Transfers of arrays.",
     "direction=\"to_device\""},
    {"transfers_from_device", "kiln_transfers_total", "counter", "", "direction=\"from_device\""},
    {"handles_released", "kiln_handles_released_total", "counter",
     "Buffer and executable handles released."},
    {"release_calls", "kiln_release_calls_total", "counter",
     "Release calls (a client sends its releases in batches)."},
    {"compile_cache_hits", "kiln_compile_cache_hits_total", "counter",
     "Compiles answered from the compile cache."},
    {"compile_cache_misses", "kiln_compile_cache_misses_total", "counter",
     "Compiles that had to compile."},
    {"compile_cache_collisions", "kiln_compile_cache_collisions_total", "counter",
     "Fingerprint collisions found by comparing modules (expected: 0)."},
    {"executes", "kiln_executions_total", "counter", "Executions."},
    {"execute_errors", "kiln_execution_errors_total", "counter", "Executions that failed."},
    {"executes_cancelled", "kiln_executions_cancelled_total", "counter",
     "Executions cancelled by their client."},
    {"replicated_executes", "kiln_replicated_executions_total", "counter",
     "Executions replicated over several devices."},
    {"infeed_values", "kiln_feed_values_total", "counter", "Values through the feed queues.",
     "queue=\"infeed\""},
    {"outfeed_values", "kiln_feed_values_total", "counter", "", "queue=\"outfeed\""},
    {"infeed_bytes", "kiln_feed_bytes_total", "counter", "Bytes through the feed queues.",
     "queue=\"infeed\""},
    {"outfeed_bytes", "kiln_feed_bytes_total", "counter", "", "queue=\"outfeed\""},
    {"tpu_simulated_nanos_matrix", "kiln_tpu_simulated_seconds_total", "counter",
     "Simulated TPU time by unit.", "unit=\"matrix\"", 1e-9},
    {"tpu_simulated_nanos_vector", "kiln_tpu_simulated_seconds_total", "counter", "",
     "unit=\"vector\"", 1e-9},
    {"tpu_simulated_nanos_hbm", "kiln_tpu_simulated_seconds_total", "counter", "",
     "unit=\"hbm\"", 1e-9},
    {"tpu_simulated_nanos_interconnect", "kiln_tpu_simulated_seconds_total", "counter", "",
     "unit=\"interconnect\"", 1e-9},
    {"tpu_simulated_nanos_infeed", "kiln_tpu_simulated_seconds_total", "counter", "",
     "unit=\"infeed\"", 1e-9},
    {"tpu_matrix_flops", "kiln_tpu_matrix_flops_total", "counter",
     "Floating-point operations on simulated matrix units."},
    {"tpu_hbm_bytes", "kiln_tpu_hbm_bytes_total", "counter", "Bytes moved in simulated HBM."},
    {"sessions_live", "kiln_sessions", "gauge", "Sessions open now."},
    {"sessions_host_bytes", "kiln_sessions_host_memory_bytes", "gauge",
     "Host memory sessions hold outside their buffers (feeds, replies)."},
    {"compile_cache_entries", "kiln_compile_cache_entries", "gauge",
     "Programs in the compile cache."},
    {"compile_cache_bytes", "kiln_compile_cache_bytes", "gauge",
     "Bytes the compile cache holds."},
    {"live_buffers", "kiln_device_buffers", "gauge", "Live buffers per device."},
    {"live_bytes", "kiln_device_memory_used_bytes", "gauge", "Device memory in use."},
    {"capacity_bytes", "kiln_device_memory_capacity_bytes", "gauge", "Device memory capacity."},
    {"persistent_cache_hits", "kiln_persistent_cache_hits_total", "counter",
     "Programs loaded from the persistent compile cache instead of compiled."},
    {"persistent_cache_misses", "kiln_persistent_cache_misses_total", "counter",
     "Persistent compile cache misses by the part of the key that differed.", "", 1, "reason"},
    {"persistent_cache_unsupported", "kiln_persistent_cache_unsupported_total", "counter",
     "Compiles whose backend keeps nothing on disk."},
    {"persistent_cache_write_errors", "kiln_persistent_cache_write_errors_total", "counter",
     "Entries the persistent compile cache could not write."},
    {"persistent_cache_bytes", "kiln_persistent_cache_bytes", "gauge",
     "Bytes in the persistent compile cache's directory."},
    {"persistent_cache_load", "kiln_persistent_cache_load_seconds", "histogram",
     "Time to load a program from the persistent compile cache."},
    {"compile", "kiln_compile_seconds", "histogram", "Time to compile a program (cache misses)."},
    {"execute", "kiln_execute_seconds", "histogram",
     "Time of an execution on the server, from request to reply."},
    {"transfer_to_device", "kiln_transfer_seconds", "histogram",
     "Time of a transfer to a device.", "direction=\"to_device\""},
    {"tpu_simulated_step", "kiln_tpu_simulated_step_seconds", "histogram",
     "Simulated TPU time of an execution."},
};

const Family* FindFamily(const std::string& internal) {
  for (const Family& f : kFamilies) {
    if (internal == f.internal) return &f;
  }
  return nullptr;
}

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Sanitized(const std::string& name) {
  std::string out = "kiln_";
  for (char c : name) out += absl::ascii_isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::string FormatValue(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v))) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrFormat("%.15g", v);
}

// The labels of a sample: the family's fixed one and the name's "{...}"
// suffix as `brace_label`.
std::string Labels(const char* fixed, const std::string& device, const std::string& extra = "",
                   const char* brace_label = "device") {
  std::vector<std::string> parts;
  if (fixed[0] != '\0') parts.push_back(fixed);
  if (!device.empty()) {
    parts.push_back(absl::StrCat(brace_label, "=\"", EscapeLabel(device), "\""));
  }
  if (!extra.empty()) parts.push_back(extra);
  if (parts.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&out, i ? "," : "", parts[i]);
  return out + "}";
}

struct Output {
  std::string type, help;
  std::vector<std::string> samples;
};

// "live_bytes{cpu:0}" -> ("live_bytes", "cpu:0").
std::pair<std::string, std::string> SplitDevice(const std::string& name) {
  const size_t brace = name.find('{');
  if (brace == std::string::npos || name.back() != '}') return {name, ""};
  return {name.substr(0, brace), name.substr(brace + 1, name.size() - brace - 2)};
}

void AddProcessFamilies(std::map<std::string, Output>* out) {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  if (statm >> pages_total >> pages_resident) {
    Output& rss = (*out)["process_resident_memory_bytes"];
    rss.type = "gauge";
    rss.help = "Resident memory of kiln-server.";
    rss.samples.push_back(absl::StrCat("process_resident_memory_bytes ",
                                       pages_resident * sysconf(_SC_PAGESIZE)));
  }
  Output& info = (*out)["kiln_build_info"];
  info.type = "gauge";
  info.help = "Kiln's version; always 1.";
  info.samples.push_back(absl::StrCat("kiln_build_info{version=\"", KILN_VERSION_STRING, "\"} 1"));
}

}  // namespace

std::string PrometheusText(const std::map<std::string, int64_t>& counters,
                           const std::map<std::string, Metrics::Histogram>& histograms) {
  std::map<std::string, Output> out;
  for (const auto& [full_name, value] : counters) {
    auto [internal, device] = SplitDevice(full_name);
    const Family* f = FindFamily(internal);
    if (f == nullptr || std::string(f->type) == "histogram") {
      Output& o = out[Sanitized(internal)];
      o.type = "untyped";
      o.samples.push_back(
          absl::StrCat(Sanitized(internal), Labels("", device), " ", value));
      continue;
    }
    Output& o = out[f->name];
    o.type = f->type;
    if (f->help[0] != '\0') o.help = f->help;
    o.samples.push_back(absl::StrCat(f->name, Labels(f->label, device, "", f->brace_label), " ",
                                     FormatValue(static_cast<double>(value) * f->scale)));
  }
  const std::vector<double>& bounds = Metrics::BucketSeconds();
  for (const auto& [full_name, h] : histograms) {
    auto [internal, device] = SplitDevice(full_name);
    const Family* f = FindFamily(internal);
    const std::string name = f != nullptr && std::string(f->type) == "histogram"
                                 ? f->name
                                 : Sanitized(internal) + "_seconds";
    const char* fixed = f != nullptr ? f->label : "";
    Output& o = out[name];
    o.type = "histogram";
    if (f != nullptr && f->help[0] != '\0') o.help = f->help;
    for (size_t i = 0; i < bounds.size(); ++i) {
      o.samples.push_back(absl::StrCat(
          name, "_bucket", Labels(fixed, device, absl::StrCat("le=\"", FormatValue(bounds[i]), "\"")),
          " ", h.cumulative[i]));
    }
    o.samples.push_back(absl::StrCat(name, "_bucket", Labels(fixed, device, "le=\"+Inf\""), " ",
                                     h.count));
    o.samples.push_back(
        absl::StrCat(name, "_sum", Labels(fixed, device), " ", FormatValue(h.sum_seconds)));
    o.samples.push_back(absl::StrCat(name, "_count", Labels(fixed, device), " ", h.count));
  }
  AddProcessFamilies(&out);
  std::string text;
  for (const auto& [name, o] : out) {
    if (!o.help.empty()) absl::StrAppend(&text, "# HELP ", name, " ", o.help, "\n");
    absl::StrAppend(&text, "# TYPE ", name, " ", o.type, "\n");
    for (const std::string& sample : o.samples) absl::StrAppend(&text, sample, "\n");
  }
  return text;
}

}  // namespace kiln::server
