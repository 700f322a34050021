// Runs a small computation on scalars, for reducers, comparators and
// combiners that have no fast path.
#ifndef KILN_RUNTIME_HOST_SCALAR_CALL_H_
#define KILN_RUNTIME_HOST_SCALAR_CALL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/host/kernel.h"
#include "runtime/host/program.h"

namespace kiln::host {

class ScalarCall {
 public:
  ScalarCall(std::shared_ptr<const Program> program,
             std::vector<ir::ElementType> arg_types)
      : program_(std::move(program)), arg_types_(std::move(arg_types)) {}

  // Calls with args[i] pointing at one element of arg_types[i]; writes the
  // result (a scalar, or each element of a tuple of scalars) to results[i].
  absl::Status Call(ExecState& state, const std::vector<const uint8_t*>& args,
                    const std::vector<uint8_t*>& results) const;

 private:
  std::shared_ptr<const Program> program_;
  std::vector<ir::ElementType> arg_types_;
};

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_SCALAR_CALL_H_
