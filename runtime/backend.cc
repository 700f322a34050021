#include "runtime/backend.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace kiln::runtime {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, BackendInfo> backends ABSL_GUARDED_BY(mu);
};

Registry& GlobalRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

void RegisterBackend(BackendInfo info) {
  Registry& r = GlobalRegistry();
  absl::MutexLock lock(&r.mu);
  std::string kind = info.kind;
  r.backends[kind] = std::move(info);
}

std::vector<BackendInfo> RegisteredBackends() {
  Registry& r = GlobalRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<BackendInfo> out;
  for (const auto& [kind, info] : r.backends) out.push_back(info);
  return out;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendSpec& spec) {
  BackendFactory factory;
  std::vector<std::string> kinds;
  {
    Registry& r = GlobalRegistry();
    absl::MutexLock lock(&r.mu);
    auto it = r.backends.find(spec.kind);
    if (it != r.backends.end()) factory = it->second.factory;
    for (const auto& [kind, info] : r.backends) kinds.push_back(kind);
  }
  if (!factory) {
    return absl::NotFoundError(absl::StrCat("no backend of kind '", spec.kind,
                                            "' (this build has ", absl::StrJoin(kinds, ", "),
                                            ")"));
  }
  if (spec.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.kind, ": the device count must be at least 1, not ", spec.count));
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = factory(spec);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat(spec.kind, " backend: ", backend.status().message()));
  }
  return backend;
}

std::string AutoDevices() {
  std::string devices = "cpu:1";
  for (const BackendInfo& info : RegisteredBackends()) {
    if (!info.count_devices) continue;
    if (const int n = info.count_devices(); n > 0) absl::StrAppend(&devices, ",", info.kind, ":", n);
  }
  return devices;
}

absl::StatusOr<std::vector<BackendSpec>> ParseBackendSpecs(const std::string& devices_flag,
                                                           const std::string& config) {
  const std::string devices =
      absl::StripAsciiWhitespace(devices_flag) == "auto" ? AutoDevices() : devices_flag;
  std::vector<BackendSpec> specs;
  auto find = [&](absl::string_view kind) -> BackendSpec* {
    for (BackendSpec& s : specs) {
      if (s.kind == kind) return &s;
    }
    return nullptr;
  };
  for (absl::string_view item : absl::StrSplit(devices, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::vector<absl::string_view> parts = absl::StrSplit(item, absl::MaxSplits(':', 1));
    BackendSpec spec;
    spec.kind = std::string(absl::StripAsciiWhitespace(parts[0]));
    if (spec.kind.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("devices: '", item, "' has no kind"));
    }
    if (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &spec.count) || spec.count < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices: '", item, "': the count must be a positive integer (kind:count)"));
    }
    if (find(spec.kind) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices: '", spec.kind, "' appears twice"));
    }
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return absl::InvalidArgumentError("devices: no backend named");
  for (absl::string_view item : absl::StrSplit(config, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t dot = item.find('.');
    const size_t eq = item.find('=');
    if (dot == absl::string_view::npos || eq == absl::string_view::npos || dot > eq ||
        dot == 0 || eq == dot + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("backend config: '", item, "' is not kind.key=value"));
    }
    const absl::string_view kind = item.substr(0, dot);
    BackendSpec* spec = find(kind);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backend config: '", item, "' configures '", kind, "', which devices does not name"));
    }
    spec->config[std::string(item.substr(dot + 1, eq - dot - 1))] =
        std::string(item.substr(eq + 1));
  }
  return specs;
}

absl::StatusOr<int64_t> ParseBytes(absl::string_view original, absl::string_view what) {
  absl::string_view text = absl::StripAsciiWhitespace(original);
  int shift = 0;
  if (!text.empty()) {
    switch (absl::ascii_toupper(text.back())) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: break;
    }
    if (shift > 0) text.remove_suffix(1);
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0 || value > (int64_t{1} << (62 - shift))) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "='", original, "' is not a byte count (a number, optionally with K, M, G or T)"));
  }
  return value << shift;
}

absl::StatusOr<int64_t> ConfigBytes(const BackendSpec& spec, const std::string& key,
                                    int64_t fallback) {
  auto it = spec.config.find(key);
  if (it == spec.config.end()) return fallback;
  return ParseBytes(it->second, key);
}

absl::Status CheckConfigKeys(const BackendSpec& spec, const std::vector<std::string>& known) {
  for (const auto& [key, value] : spec.config) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown config key '", key, "' (", spec.kind, " takes ",
          known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
