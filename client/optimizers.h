// Optimizers whose state lives on the device as lazy tensors: each Step()
// only records ops, so the update compiles into the training-step program.
#ifndef KILN_CLIENT_OPTIMIZERS_H_
#define KILN_CLIENT_OPTIMIZERS_H_

#include <vector>

#include "absl/status/status.h"
#include "client/tensor.h"

namespace kiln::client {

// SGD with optional momentum: v = momentum * v + g; p = p - lr * v.
class Sgd {
 public:
  Sgd(double learning_rate, double momentum = 0.0)
      : lr_(learning_rate), momentum_(momentum) {}
  // Returns the updated parameters; `params` and `grads` match one to one.
  absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads);
  const std::vector<Tensor>& velocity() const { return velocity_; }

 private:
  double lr_, momentum_;
  std::vector<Tensor> velocity_;
};

// Adam (Kingma & Ba) with bias correction; the step count is a device
// scalar so every step traces the same graph.
class Adam {
 public:
  Adam(double learning_rate, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8)
      : lr_(learning_rate), beta1_(beta1), beta2_(beta2), eps_(epsilon) {}
  absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads);

 private:
  double lr_, beta1_, beta2_, eps_;
  std::vector<Tensor> m_, v_;
  Tensor t_;
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_OPTIMIZERS_H_
