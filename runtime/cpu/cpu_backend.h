// The CPU backend (cpu:N): host memory with a configurable capacity per
// device, and the host interpreter's programs (runtime/host) as executables.
#ifndef KILN_RUNTIME_CPU_CPU_BACKEND_H_
#define KILN_RUNTIME_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace kiln::cpu {

struct CpuBackendOptions {
  int devices = 1;
  int64_t memory_bytes = int64_t{8} << 30;  // per device
  size_t feed_queue_capacity = 64;
};

// Thread-safe.
class CpuBackend : public runtime::Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});
  // From a spec: `count` devices; config key memory_bytes (default 8G).
  static absl::StatusOr<std::unique_ptr<runtime::Backend>> Create(
      const runtime::BackendSpec& spec);

  const std::string& kind() const override { return kind_; }
  // Memory capacity does not change what is compiled.
  std::string config_key() const override { return ""; }
  const std::vector<std::unique_ptr<runtime::Device>>& devices() const override {
    return devices_;
  }
  runtime::Compiler& compiler() override { return *compiler_; }
  std::string Describe() const override;

  runtime::Device* device(int index) { return devices_[index].get(); }

 private:
  const std::string kind_ = "cpu";
  const CpuBackendOptions options_;
  std::vector<std::unique_ptr<runtime::Device>> devices_;
  std::unique_ptr<runtime::Compiler> compiler_;
};

}  // namespace kiln::cpu

#endif  // KILN_RUNTIME_CPU_CPU_BACKEND_H_
