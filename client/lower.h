// Cuts a lazy trace into a module: realized nodes become entry parameters,
// recorded ops become instructions, device loops become while loops with
// their own body computations.
#ifndef KILN_CLIENT_LOWER_H_
#define KILN_CLIENT_LOWER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/tensor.h"
#include "compiler/ir/instruction.h"

namespace kiln::client {

struct Lowered {
  std::unique_ptr<ir::Module> module;
  // The realized nodes behind the entry parameters, in parameter order.
  std::vector<std::shared_ptr<Node>> params;
};

// The entry returns a tuple of `outputs` in order.
absl::StatusOr<Lowered> Lower(const std::vector<std::shared_ptr<Node>>& outputs);

}  // namespace kiln::client

#endif  // KILN_CLIENT_LOWER_H_
