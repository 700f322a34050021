// The null backend (null:N): devices whose every operation returns
// UNIMPLEMENTED. It is the template a new backend starts from: copy this
// folder, rename the kind, and fill in each method (docs/architecture.md
// lists what a backend provides); the service runs with it unchanged.
#ifndef KILN_RUNTIME_NULL_NULL_BACKEND_H_
#define KILN_RUNTIME_NULL_NULL_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace kiln::null_backend {

// A device with no memory: allocation, copies and compiles are refused.
// Thread-safe.
class NullDevice : public runtime::Device {
 public:
  explicit NullDevice(int ordinal);

  const std::string& name() const override { return name_; }
  const std::string& kind() const override { return kind_; }
  int ordinal() const override { return ordinal_; }
  runtime::MemoryTracker* memory() override { return &memory_; }
  // UNIMPLEMENTED, naming the device and the operation.
  absl::StatusOr<runtime::BufferPtr> Allocate(const ir::Shape& shape) override;
  absl::Status CopyToBuffer(runtime::Buffer& buffer, int64_t offset, const void* src,
                            int64_t size) override;
  absl::Status CopyFromBuffer(const runtime::Buffer& buffer, int64_t offset, void* dst,
                              int64_t size) override;
  runtime::FeedQueue& infeed() override { return infeed_; }
  runtime::FeedQueue& outfeed() override { return outfeed_; }

 private:
  const std::string kind_ = "null";
  const std::string name_;
  const int ordinal_;
  runtime::MemoryTracker memory_{0};
  runtime::FeedQueue infeed_{1};
  runtime::FeedQueue outfeed_{1};
};

// Thread-safe.
class NullBackend : public runtime::Backend {
 public:
  explicit NullBackend(int devices);
  // From a spec: `count` devices; no config keys.
  static absl::StatusOr<std::unique_ptr<runtime::Backend>> Create(
      const runtime::BackendSpec& spec);

  const std::string& kind() const override { return kind_; }
  std::string config_key() const override { return ""; }
  const std::vector<std::unique_ptr<runtime::Device>>& devices() const override {
    return devices_;
  }
  runtime::Compiler& compiler() override { return *compiler_; }
  std::string Describe() const override;

 private:
  const std::string kind_ = "null";
  std::vector<std::unique_ptr<runtime::Device>> devices_;
  std::unique_ptr<runtime::Compiler> compiler_;
};

}  // namespace kiln::null_backend

#endif  // KILN_RUNTIME_NULL_NULL_BACKEND_H_
