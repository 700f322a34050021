#include "runtime/device.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/literal.h"
#include "base/chunks.h"

namespace kiln::runtime {

absl::StatusOr<BufferPtr> Device::TransferToDevice(const ir::Literal& value) {
  if (!value.shape().IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfers carry arrays, not ", value.shape().ToString()));
  }
  ASSIGN_OR_RETURN(BufferPtr buffer, Allocate(value.shape()));
  const uint8_t* bytes = value.bytes().data();
  absl::Status copied = absl::OkStatus();
  ForEachChunk(buffer->size_bytes(), kTransferChunkBytes, [&](int64_t offset, int64_t n) {
    copied = CopyToBuffer(*buffer, offset, bytes + offset, n);
    return copied.ok();
  });
  RETURN_IF_ERROR(copied);
  return buffer;
}

absl::StatusOr<ir::Literal> Device::TransferFromDevice(const Buffer& buffer) {
  if (!buffer.shape().IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfers carry arrays, not ", buffer.shape().ToString()));
  }
  ir::Literal value(buffer.shape());
  uint8_t* bytes = value.mutable_bytes().data();
  absl::Status copied = absl::OkStatus();
  ForEachChunk(buffer.size_bytes(), kTransferChunkBytes, [&](int64_t offset, int64_t n) {
    copied = CopyFromBuffer(buffer, offset, bytes + offset, n);
    return copied.ok();
  });
  RETURN_IF_ERROR(copied);
  return value;
}

}  // namespace kiln::runtime
