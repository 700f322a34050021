// Reverse-mode automatic differentiation over lazy tensors.
#ifndef KILN_CLIENT_AUTODIFF_H_
#define KILN_CLIENT_AUTODIFF_H_

#include <vector>

#include "absl/status/statusor.h"
#include "client/tensor.h"

namespace kiln::client {

// Appends to the trace the gradient of the scalar `loss` with respect to
// each of `params` (same shapes), so that forward, backward and update
// compile as one program. A parameter the loss does not depend on gets
// zeros. Errors: a non-scalar loss, an op with no gradient rule on the path.
absl::StatusOr<std::vector<Tensor>> Grad(const Tensor& loss, const std::vector<Tensor>& params);

}  // namespace kiln::client

#endif  // KILN_CLIENT_AUTODIFF_H_
