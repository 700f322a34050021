// Layers for models written with lazy tensors: a Module holds named
// parameters (trained) and buffers (state such as running statistics) and
// its child modules; the layers below are built from the tensor ops, so
// their gradients come from autodiff's rules for those ops.
//
//   nn::Linear fc(ctx, "cpu:0", 784, 10, /*seed=*/1);
//   Tensor logits = fc.Forward(images);
//   auto grads = Grad(loss, fc.Parameters());
#ifndef KILN_CLIENT_NN_H_
#define KILN_CLIENT_NN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/lazy.h"
#include "client/tensor.h"

namespace kiln::client {
class Optimizer;
}  // namespace kiln::client

namespace kiln::client::nn {

// Not thread-safe (as the tensors it holds).
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // This module's and its children's tensors, named "child.name" in the
  // order they were registered. The pointers stay valid as long as the
  // module; assigning through them replaces the tensor (an optimizer's
  // update, a checkpoint's load).
  std::vector<std::pair<std::string, Tensor*>> NamedParameters();
  std::vector<std::pair<std::string, Tensor*>> NamedBuffers();
  // The parameters' current tensors, for Grad and optimizers.
  std::vector<Tensor> Parameters();
  // Replaces the parameters, in NamedParameters() order (an optimizer's
  // result). INVALID_ARGUMENT on a count or shape mismatch.
  absl::Status SetParameters(const std::vector<Tensor>& values);

  // Training mode (the default) or inference mode, for this module and its
  // children: batch normalization uses batch statistics and updates its
  // running ones in training; dropout drops only in training.
  void Train(bool training);
  bool training() const { return training_; }

  // Mixed precision: the element type that matrix work (Linear's product,
  // Conv2d's convolution) runs in, for this module and its children. The
  // parameters keep their type (f32 master weights): a layer casts its
  // input and weight to `type`, computes, and casts the result back to its
  // input's type; gradients flow back through the casts. Without one (the
  // default, or after nullopt) layers compute in their input's type.
  void SetComputeType(std::optional<ir::ElementType> type);
  std::optional<ir::ElementType> compute_type() const { return compute_type_; }

 protected:
  Tensor& RegisterParameter(std::string name, Tensor value);
  Tensor& RegisterBuffer(std::string name, Tensor value);
  // `child` is borrowed: a member of the derived module.
  void RegisterModule(std::string name, Module* child);

 private:
  void Collect(const std::string& prefix, bool buffers,
               std::vector<std::pair<std::string, Tensor*>>* out);

  bool training_ = true;
  std::optional<ir::ElementType> compute_type_;
  // Stable addresses: tensors live in the module, registered once.
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> parameters_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
};

// y = x W + b; x: [..., in], W: [in, out] drawn uniformly from
// +-1/sqrt(in) (as PyTorch's default), b: zeros.
class Linear : public Module {
 public:
  Linear(LazyContext* ctx, const std::string& device, int64_t in, int64_t out, uint64_t seed,
         bool bias = true);
  Tensor Forward(const Tensor& x) const;
  const Tensor& weight() const { return *weight_; }

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

struct Conv2dOptions {
  int stride = 1;
  // "SAME" (as TensorFlow pads, for the dilated kernel), "VALID" (none), or
  // "EXPLICIT" (`pad` rows and columns on every side).
  std::string padding = "SAME";
  int pad = 0;
  int dilation = 1;  // of the kernel
  bool bias = true;
  // Feature groups: the input channels split into `groups` blocks, each
  // convolved with its own block of output channels (both counts must
  // divide); groups = in_channels is a depthwise convolution.
  int groups = 1;
};

// 2-D convolution over NHWC: x [N, H, W, in] -> [N, H', W', out]; the
// kernel [k, k, in / groups, out] drawn uniformly from
// +-1/sqrt(k*k*in/groups) (PyTorch's default), the bias zeros.
class Conv2d : public Module {
 public:
  Conv2d(LazyContext* ctx, const std::string& device, int64_t in_channels,
         int64_t out_channels, int kernel, uint64_t seed, Conv2dOptions options = {});
  // An error tensor for a padding other than SAME, VALID or EXPLICIT.
  Tensor Forward(const Tensor& x) const;

 private:
  int kernel_;
  Conv2dOptions options_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

// A lookup table: integer ids [N...] -> rows [N..., dim] of a weight
// [vocab, dim] drawn from N(0, 1) (PyTorch's default). Its gradient adds
// up in the rows that were looked up.
class Embedding : public Module {
 public:
  Embedding(LazyContext* ctx, const std::string& device, int64_t vocab, int64_t dim,
            uint64_t seed);
  Tensor Forward(const Tensor& ids) const { return Take(*weight_, ids); }

 private:
  Tensor* weight_;
};

// The mean over height and width: [N, H, W, C] -> [N, C].
Tensor GlobalAvgPool2D(const Tensor& x);

// Batch normalization over the last dimension (features, as in NHWC
// images or [batch, features]): y = (x - mean) / sqrt(var + eps) * gamma +
// beta. In training, mean and var are the batch's (over every other
// dimension, var biased), and the running statistics (buffers
// "running_mean", "running_var", var unbiased) move toward them by
// `momentum`; in inference the running statistics are used.
class BatchNorm : public Module {
 public:
  BatchNorm(LazyContext* ctx, const std::string& device, int64_t features,
            double momentum = 0.1, double eps = 1e-5);
  // In training, also replaces the running statistics by their update (a
  // lazy value computed with the step).
  Tensor Forward(const Tensor& x);

 private:
  double momentum_, eps_;
  Tensor *gamma_, *beta_, *running_mean_, *running_var_;
};

// Layer normalization over the last dimension, with a learned scale and
// shift of that size.
class LayerNorm : public Module {
 public:
  LayerNorm(LazyContext* ctx, const std::string& device, int64_t features, double eps = 1e-5);
  Tensor Forward(const Tensor& x) const;

 private:
  double eps_;
  Tensor *gamma_, *beta_;
};

// In training, zeroes each element with probability `p` and scales the
// rest by 1/(1-p); in inference the identity. The random numbers come from
// a counter-based generator (CounterUniform) keyed by `seed` and a u32
// buffer "counter" that each training Forward advances, so the masks
// depend only on the seed and how many times the layer has run: a run is
// reproducible, and a step traced in step mode or inside a device loop
// (which carries the buffer) drops the same elements.
class Dropout : public Module {
 public:
  Dropout(LazyContext* ctx, const std::string& device, double p, uint64_t seed);
  Tensor Forward(const Tensor& x);

 private:
  double p_;
  uint64_t seed_;
  Tensor* counter_;
};

// ResNet's basic block (He et al.): two 3x3 convolutions with batch
// normalization, y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
// where the shortcut is x itself, or a 1x1 convolution with batch
// normalization when the stride or the channels change.
class ResidualBlock : public Module {
 public:
  ResidualBlock(LazyContext* ctx, const std::string& device, int64_t in_channels,
                int64_t out_channels, int stride, uint64_t seed);
  Tensor Forward(const Tensor& x);
  bool projects() const { return projection_ != nullptr; }

 private:
  Conv2d conv1_, conv2_;
  BatchNorm bn1_, bn2_;
  std::unique_ptr<Conv2d> projection_;
  std::unique_ptr<BatchNorm> projection_bn_;
};

// Everything a training run carries from step to step, by name: the
// module's parameters, then its buffers, then the optimizer's state
// (created first where it does not exist yet). What a device loop carries
// (WhileCarrying) and a checkpoint saves.
std::vector<std::pair<std::string, Tensor*>> TrainingState(Module& module, Optimizer& optimizer);

// Converts every floating-point tensor that `named` points at (a module's
// NamedParameters and NamedBuffers, an optimizer's NamedState) to `type`
// in one call, leaving integer tensors (counters) as they are: a whole
// model and its optimizer in another precision.
absl::Status ConvertAll(const std::vector<std::pair<std::string, Tensor*>>& named,
                        ir::ElementType type);

// Reduced precision (Tensor::ToReducedPrecision) for every full-precision
// f32 tensor that `named` points at, or full precision again for every
// reduced-precision one; other tensors stay as they are. A whole model and
// its optimizer keep their f32 element types and are stored and computed
// in bf16.
absl::Status ToReducedPrecision(const std::vector<std::pair<std::string, Tensor*>>& named);
absl::Status ToFullPrecision(const std::vector<std::pair<std::string, Tensor*>>& named);

// Copies every tensor that `named` points at (a model's parameters and
// buffers, an optimizer's state) to `device`, all or none; replicated
// tensors give their replica 0. The optimizers upload their learning rate
// on the parameters' device at their next step.
absl::Status ToDevice(const std::vector<std::pair<std::string, Tensor*>>& named,
                      const std::string& device);

// Gradients of `loss` with static loss scaling: the gradients of
// loss * scale, divided by scale. Small gradients that a half type would
// flush to zero in the backward pass survive (f16 needs it; bf16 has f32's
// range). INVALID_ARGUMENT for a scale that is not positive and finite.
absl::StatusOr<std::vector<Tensor>> ScaledGrad(const Tensor& loss,
                                               const std::vector<Tensor>& params, double scale);

// Dynamic loss scaling (as PyTorch's GradScaler and Keras's
// LossScaleOptimizer): the loss is multiplied by a scale before the
// backward pass and the gradients divided by it, so that small gradients
// survive a half-precision backward pass; the scale adapts. A step whose
// gradients are all finite is taken; after `growth_interval` such steps in
// a row the scale grows by `growth_factor` (while it stays finite). A step
// with an infinite or NaN gradient is skipped, parameters and optimizer
// state unchanged, and the scale shrinks by `backoff_factor`. The scale
// and the count of finite steps are device scalars (NamedState), so the
// same step program serves every step, a device loop can carry them, and a
// checkpoint keeps them.
//
//   ASSIGN_OR_RETURN(auto scaler, nn::DynamicLossScale::Create(ctx, "cpu:0"));
//   ASSIGN_OR_RETURN(std::vector<Tensor> grads, scaler.Grad(loss, params));
//   ASSIGN_OR_RETURN(std::vector<Tensor> next, scaler.Step(optimizer, params, grads));
struct DynamicLossScaleOptions {
  double initial_scale = 65536;
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class DynamicLossScale {
 public:
  // INVALID_ARGUMENT for a scale that is not positive and finite, a growth
  // factor not above 1, a backoff factor outside (0, 1) or an interval
  // below 1.
  static absl::StatusOr<DynamicLossScale> Create(LazyContext* ctx, const std::string& device,
                                                 DynamicLossScaleOptions options = {});

  // The gradients of loss * scale (the loss converted to f32 first), each
  // divided by the scale in f32 (f64 for f64) and returned in its type.
  absl::StatusOr<std::vector<Tensor>> Grad(const Tensor& loss, const std::vector<Tensor>& params);
  // One step of `optimizer` taken where every gradient is finite: returns
  // the new parameters (the old ones on a skipped step), leaves the
  // optimizer's state as it was on a skipped step, and updates the scale.
  absl::StatusOr<std::vector<Tensor>> Step(Optimizer& optimizer, const std::vector<Tensor>& params,
                                           const std::vector<Tensor>& grads);

  // "loss_scale" (f32 scalar), "loss_scale_finite_steps" (s32 scalar,
  // finite steps since the scale last changed) and
  // "loss_scale_last_step_finite" (pred scalar, true before any step). The
  // pointers stay valid while this object lives where it is.
  std::vector<std::pair<std::string, Tensor*>> NamedState();
  const Tensor& scale() const { return scale_; }
  // Whether the last Step's gradients were all finite (a pred scalar).
  const Tensor& last_step_finite() const { return finite_; }

 private:
  DynamicLossScale(DynamicLossScaleOptions options, Tensor scale, Tensor finite_steps,
                   Tensor finite)
      : options_(options), scale_(std::move(scale)), finite_steps_(std::move(finite_steps)),
        finite_(std::move(finite)) {}

  DynamicLossScaleOptions options_;
  Tensor scale_, finite_steps_, finite_;
};

}  // namespace kiln::client::nn

#endif  // KILN_CLIENT_NN_H_
