// Backends as plug-ins. A backend is one folder under runtime/ (null/ is the
// template) that provides devices of one kind and a compiler for them, and
// registers a factory under its kind. The service and the embedded mode
// build their devices from a list of BackendSpecs and never name a backend.
#ifndef KILN_RUNTIME_BACKEND_H_
#define KILN_RUNTIME_BACKEND_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/device.h"

namespace kiln::runtime {

// What to build: `count` devices of `kind`, with backend-specific settings.
struct BackendSpec {
  std::string kind;
  int count = 1;
  std::map<std::string, std::string> config;
};

// The devices of one kind and their compiler. Thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const std::string& kind() const = 0;
  // Everything in the backend's settings that changes what it compiles, in
  // a canonical form: part of the compile-cache key, so that programs are
  // shared by every device of the kind and by equal configs only.
  virtual std::string config_key() const = 0;
  // Owned by the backend; stable for its life.
  virtual const std::vector<std::unique_ptr<Device>>& devices() const = 0;
  virtual Compiler& compiler() = 0;
  // One line for the server's log ("8 cores of a TPU v3-8").
  virtual std::string Describe() const = 0;
};

using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendSpec& spec)>;

struct BackendInfo {
  std::string kind;
  std::string summary;      // one line for --help and errors
  std::string config_help;  // the config keys the backend takes, with defaults
  BackendFactory factory;
  // For backends of real accelerators: how many devices the host has (0
  // where none can be used). Null for the host and simulated backends.
  std::function<int()> count_devices;
};

// Makes `info` available under its kind. Called by each backend's
// registration function (see RegisterBuiltinBackends); a second
// registration of a kind replaces the first.
void RegisterBackend(BackendInfo info);
// Every registered backend, by kind.
std::vector<BackendInfo> RegisteredBackends();
// Builds the backend `spec` names. NOT_FOUND for an unregistered kind
// (naming the registered ones); INVALID_ARGUMENT for a bad count or config,
// from the backend.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendSpec& spec);

// Registers every backend this build includes. Defined in the generated
// registration file of the kiln_backends library (one call per folder that
// declares itself a backend in CMake); safe to call more than once.
void RegisterBuiltinBackends();

// The devices a server takes by default: "cpu:1" and every device of the
// registered accelerator backends that the host can use ("cpu:1,gpu:2").
std::string AutoDevices();

// Parses backend specs from their flag form: `devices` is "kind:count,..."
// ("cpu:1,tpu:8"; a kind without a count means 1), or "auto" for
// AutoDevices(), and `config` is
// "kind.key=value,..." ("tpu.hbm_bytes=1G"). Each kind may appear once;
// config must name a kind of `devices`. Errors say which item is wrong.
absl::StatusOr<std::vector<BackendSpec>> ParseBackendSpecs(const std::string& devices,
                                                           const std::string& config);

// A byte count as flags and configs write it: a number, optionally with K,
// M, G or T (powers of 1024). INVALID_ARGUMENT naming `what` otherwise.
absl::StatusOr<int64_t> ParseBytes(absl::string_view text, absl::string_view what);

// Reads a config value of `spec` as a byte count ("1048576", "64M", "8G";
// K/M/G/T are powers of 1024), or `fallback` when absent.
absl::StatusOr<int64_t> ConfigBytes(const BackendSpec& spec, const std::string& key,
                                    int64_t fallback);
// INVALID_ARGUMENT naming the first config key of `spec` not in `known`.
absl::Status CheckConfigKeys(const BackendSpec& spec, const std::vector<std::string>& known);

}  // namespace kiln::runtime

// Defines a backend folder's registration function, which the generated
// RegisterBuiltinBackends calls; `kind` is the name given to
// kiln_add_backend in the folder's CMakeLists.txt. The body calls
// RegisterBackend.
#define KILN_BACKEND_REGISTRATION(kind)            \
  namespace kiln::runtime::backends {             \
  void Register_##kind();                         \
  }                                               \
  void kiln::runtime::backends::Register_##kind()

#endif  // KILN_RUNTIME_BACKEND_H_
