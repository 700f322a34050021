#include "runtime/null/null_backend.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::null_backend {
namespace {

absl::Status Unimplemented(const std::string& device, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      device, " cannot ", what, ": the null backend implements no operation (it is the "
      "template for new backends)"));
}

class NullCompiler : public runtime::Compiler {
 public:
  absl::StatusOr<std::shared_ptr<runtime::Executable>> Compile(
      const ir::Module& module, const runtime::CompileOptions& options) override {
    return Unimplemented("null", "compile");
  }
};

}  // namespace

NullDevice::NullDevice(int ordinal) : name_(absl::StrCat("null:", ordinal)), ordinal_(ordinal) {}

absl::StatusOr<runtime::BufferPtr> NullDevice::Allocate(const ir::Shape& shape) {
  return Unimplemented(name_, absl::StrCat("allocate ", shape.ToString()));
}

absl::Status NullDevice::CopyToBuffer(runtime::Buffer&, int64_t, const void*, int64_t) {
  return Unimplemented(name_, "copy to a buffer");
}

absl::Status NullDevice::CopyFromBuffer(const runtime::Buffer&, int64_t, void*, int64_t) {
  return Unimplemented(name_, "copy from a buffer");
}

NullBackend::NullBackend(int devices) : compiler_(std::make_unique<NullCompiler>()) {
  for (int i = 0; i < devices; ++i) devices_.push_back(std::make_unique<NullDevice>(i));
}

absl::StatusOr<std::unique_ptr<runtime::Backend>> NullBackend::Create(
    const runtime::BackendSpec& spec) {
  RETURN_IF_ERROR(runtime::CheckConfigKeys(spec, {}));
  return std::make_unique<NullBackend>(spec.count);
}

std::string NullBackend::Describe() const {
  return absl::StrCat(devices_.size(), " null device(s) (every operation UNIMPLEMENTED)");
}

}  // namespace kiln::null_backend

KILN_BACKEND_REGISTRATION(null) {
  RegisterBackend({"null", "the template backend: every operation is UNIMPLEMENTED", "none",
                   &null_backend::NullBackend::Create, nullptr});
}
