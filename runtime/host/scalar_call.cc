#include "runtime/host/scalar_call.h"

#include <cstring>

#include "base/status_macros.h"

namespace kiln::host {

absl::Status ScalarCall::Call(ExecState& state,
                              const std::vector<const uint8_t*>& args,
                              const std::vector<uint8_t*>& results) const {
  std::vector<BufferPtr> buffers;
  buffers.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    ASSIGN_OR_RETURN(BufferPtr b,
                     Buffer::Allocate(ir::Shape::Scalar(arg_types_[i]), nullptr));
    std::memcpy(b->data(), args[i], ir::ElementTypeSize(arg_types_[i]));
    buffers.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(BufferPtr out, program_->Run(state, buffers));
  if (out->shape().IsTuple()) {
    for (size_t i = 0; i < results.size(); ++i) {
      const Buffer& e = *out->tuple_elements()[i];
      std::memcpy(results[i], e.data(), e.size_bytes());
    }
  } else {
    std::memcpy(results[0], out->data(), out->size_bytes());
  }
  return absl::OkStatus();
}

}  // namespace kiln::host
