// Optimizers whose state lives on the device as lazy tensors: each Step()
// only records ops, so the update compiles into the training-step program.
#ifndef KILN_CLIENT_OPTIMIZERS_H_
#define KILN_CLIENT_OPTIMIZERS_H_

#include <vector>

#include "absl/status/status.h"
#include "client/tensor.h"

namespace kiln::client {

// SGD with optional momentum, as PyTorch's: g = grad + weight_decay * p;
// v = momentum * v + g; p = p - lr * v, or with Nesterov momentum
// p = p - lr * (g + momentum * v).
// The learning rate is a device scalar, so a schedule that changes it
// between steps keeps the same step program (no recompile).
class Sgd {
 public:
  Sgd(double learning_rate, double momentum = 0.0, bool nesterov = false,
      double weight_decay = 0.0)
      : lr_(learning_rate), momentum_(momentum), nesterov_(nesterov),
        weight_decay_(weight_decay) {}
  // Returns the updated parameters; `params` and `grads` match one to one.
  absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads);
  // Takes effect at the next Step (one 4-byte upload).
  void set_learning_rate(double lr);
  double learning_rate() const { return lr_; }
  // Creates the momentum state for `params` if it does not exist yet.
  void InitState(const std::vector<Tensor>& params);
  // The momentum buffers (empty without momentum). Code that traces steps
  // inside a device loop swaps them for the loop's carried values.
  std::vector<Tensor>& velocity() { return velocity_; }

 private:
  double lr_, momentum_;
  bool nesterov_;
  double weight_decay_;
  Tensor lr_tensor_;
  std::vector<Tensor> velocity_;
};

// Adam (Kingma & Ba) with bias correction; the step count is a device
// scalar so every step traces the same graph.
class Adam {
 public:
  Adam(double learning_rate, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8)
      : lr_(learning_rate), beta1_(beta1), beta2_(beta2), eps_(epsilon) {}
  virtual ~Adam() = default;
  absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads);
  // Creates the moments and the step count for `params` if they do not
  // exist yet. Checkpoints save and restore them through the accessors.
  void InitState(const std::vector<Tensor>& params);
  std::vector<Tensor>& first_moment() { return m_; }
  std::vector<Tensor>& second_moment() { return v_; }
  Tensor& step_count() { return t_; }

 protected:
  // AdamW: p = p - lr * weight_decay * p besides the Adam step
  // (Loshchilov & Hutter's decoupled weight decay).
  double decoupled_weight_decay_ = 0;

 private:
  double lr_, beta1_, beta2_, eps_;
  std::vector<Tensor> m_, v_;
  Tensor t_;
};

// Adam with decoupled weight decay, as PyTorch's AdamW (default decay
// 0.01).
class AdamW : public Adam {
 public:
  AdamW(double learning_rate, double weight_decay = 0.01, double beta1 = 0.9,
        double beta2 = 0.999, double epsilon = 1e-8)
      : Adam(learning_rate, beta1, beta2, epsilon) {
    decoupled_weight_decay_ = weight_decay;
  }
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_OPTIMIZERS_H_
