// Optimizers whose state lives on the device as lazy tensors: each Step()
// only records ops, so the update compiles into the training-step program.
#ifndef KILN_CLIENT_OPTIMIZERS_H_
#define KILN_CLIENT_OPTIMIZERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/tensor.h"

namespace kiln::client {

// What every optimizer offers: a step, its state by name (what a device
// loop carries and a checkpoint saves), and a learning rate that lives on
// the device as a scalar, so a schedule that changes it between steps keeps
// the same step program.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Returns the updated parameters; `params` and `grads` match one to one.
  virtual absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                                   const std::vector<Tensor>& grads) = 0;
  // Creates the state for `params` (zeros) if it does not exist yet.
  virtual void InitState(const std::vector<Tensor>& params) = 0;
  // The state, named, after InitState. The pointers stay valid while the
  // optimizer lives; assigning through them replaces the state (a loop's
  // carried values, a checkpoint's load).
  virtual std::vector<std::pair<std::string, Tensor*>> NamedState() = 0;
  // Takes effect at the next Step (one 4-byte upload).
  virtual void set_learning_rate(double lr) = 0;
  virtual double learning_rate() const = 0;
  // The device scalar the next Step reads the rate from: undefined until
  // InitState, and again after set_learning_rate changed the rate (Step
  // uploads it then). A CompiledFunction step binds it as state, so that
  // a new rate reaches a replayed step.
  virtual Tensor* learning_rate_tensor() = 0;
};

// SGD with optional momentum, as PyTorch's: g = grad + weight_decay * p;
// v = momentum * v + g; p = p - lr * v, or with Nesterov momentum
// p = p - lr * (g + momentum * v).
// The learning rate is a device scalar, so a schedule that changes it
// between steps keeps the same step program (no recompile).
class Sgd : public Optimizer {
 public:
  Sgd(double learning_rate, double momentum = 0.0, bool nesterov = false,
      double weight_decay = 0.0)
      : lr_(learning_rate), momentum_(momentum), nesterov_(nesterov),
        weight_decay_(weight_decay) {}
  absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads) override;
  void set_learning_rate(double lr) override;
  double learning_rate() const override { return lr_; }
  Tensor* learning_rate_tensor() override { return &lr_tensor_; }
  void InitState(const std::vector<Tensor>& params) override;
  // "velocity_<i>" per parameter (none without momentum).
  std::vector<std::pair<std::string, Tensor*>> NamedState() override;
  // The momentum buffers (empty without momentum).
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
class Adam : public Optimizer {
 public:
  Adam(double learning_rate, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8)
      : lr_(learning_rate), beta1_(beta1), beta2_(beta2), eps_(epsilon) {}
  absl::StatusOr<std::vector<Tensor>> Step(const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads) override;
  // Creates the moments and the step count for `params` if they do not
  // exist yet.
  void InitState(const std::vector<Tensor>& params) override;
  // "adam_m_<i>" and "adam_v_<i>" per parameter, then "adam_step".
  std::vector<std::pair<std::string, Tensor*>> NamedState() override;
  void set_learning_rate(double lr) override;
  double learning_rate() const override { return lr_; }
  Tensor* learning_rate_tensor() override { return &lr_tensor_; }
  std::vector<Tensor>& first_moment() { return m_; }
  std::vector<Tensor>& second_moment() { return v_; }
  Tensor& step_count() { return t_; }

 protected:
  // AdamW: p = p - lr * weight_decay * p besides the Adam step
  // (Loshchilov & Hutter's decoupled weight decay).
  double decoupled_weight_decay_ = 0;

 private:
  double lr_, beta1_, beta2_, eps_;
  Tensor lr_tensor_;
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
