#include "client/nn.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/autodiff.h"
#include "client/optimizers.h"

namespace kiln::client::nn {
namespace {

ir::Shape F32(std::vector<int64_t> dims) { return ir::Shape(ir::ElementType::kF32, std::move(dims)); }

Tensor Filled(LazyContext* ctx, const std::string& device, std::vector<int64_t> dims,
              double value) {
  ir::Literal lit(F32(std::move(dims)));
  for (int64_t i = 0; i < lit.element_count(); ++i) lit.SetFromDouble(i, value);
  return ctx->FromLiteral(std::move(lit), device);
}

// Every dimension of `x` but the last.
std::vector<int64_t> AllButLast(const Tensor& x) {
  std::vector<int64_t> dims;
  for (int i = 0; i + 1 < x.rank(); ++i) dims.push_back(i);
  return dims;
}

}  // namespace

Tensor& Module::RegisterParameter(std::string name, Tensor value) {
  parameters_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(value)));
  return *parameters_.back().second;
}

Tensor& Module::RegisterBuffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

void Module::RegisterModule(std::string name, Module* child) {
  children_.emplace_back(std::move(name), child);
}

void Module::Collect(const std::string& prefix, bool buffers,
                     std::vector<std::pair<std::string, Tensor*>>* out) {
  for (auto& [name, t] : buffers ? buffers_ : parameters_) {
    out->emplace_back(prefix + name, t.get());
  }
  for (auto& [name, child] : children_) child->Collect(prefix + name + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor*>> Module::NamedParameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  Collect("", /*buffers=*/false, &out);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::NamedBuffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  Collect("", /*buffers=*/true, &out);
  return out;
}

std::vector<Tensor> Module::Parameters() {
  std::vector<Tensor> out;
  for (auto& [name, t] : NamedParameters()) out.push_back(*t);
  return out;
}

absl::Status Module::SetParameters(const std::vector<Tensor>& values) {
  std::vector<std::pair<std::string, Tensor*>> named = NamedParameters();
  if (values.size() != named.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the module has ", named.size(),
                                                   " parameters, not ", values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].shape() != named[i].second->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", named[i].first, " is ", named[i].second->shape().ToString(), ", not ",
          values[i].shape().ToString()));
    }
  }
  for (size_t i = 0; i < values.size(); ++i) *named[i].second = values[i];
  return absl::OkStatus();
}

void Module::Train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->Train(training);
}

void Module::SetComputeType(std::optional<ir::ElementType> type) {
  compute_type_ = type;
  for (auto& [name, child] : children_) child->SetComputeType(type);
}

namespace {

// `product(x, w)` computed in `type` (when set and other than x's), the
// result back in x's type.
template <typename Product>
Tensor InComputeType(std::optional<ir::ElementType> type, const Tensor& x, const Tensor& w,
                     Product product) {
  if (!type.has_value() || !x.status().ok() || *type == x.storage_type()) return product(x, w);
  return Cast(product(Cast(x, *type), Cast(w, *type)), x.storage_type());
}

}  // namespace

Linear::Linear(LazyContext* ctx, const std::string& device, int64_t in, int64_t out,
               uint64_t seed, bool bias) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight_ = &RegisterParameter("weight", ctx->RandomUniform(F32({in, out}), -bound, bound, seed,
                                                            device));
  if (bias) bias_ = &RegisterParameter("bias", Filled(ctx, device, {out}, 0));
}

Tensor Linear::Forward(const Tensor& x) const {
  Tensor y = InComputeType(compute_type(), x, *weight_,
                           [](const Tensor& a, const Tensor& b) { return Matmul(a, b); });
  return bias_ == nullptr ? y : y + *bias_;
}

Conv2d::Conv2d(LazyContext* ctx, const std::string& device, int64_t in_channels,
               int64_t out_channels, int kernel, uint64_t seed, Conv2dOptions options)
    : kernel_(kernel), options_(std::move(options)) {
  const int64_t groups = std::max(options_.groups, 1);
  const int64_t per_group = in_channels / groups;
  const double bound =
      1.0 / std::sqrt(static_cast<double>(kernel * kernel * std::max<int64_t>(per_group, 1)));
  weight_ = &RegisterParameter(
      "weight",
      ctx->RandomUniform(F32({kernel, kernel, per_group, out_channels}), -bound, bound, seed,
                         device));
  if (options_.groups < 1 || in_channels % groups != 0 || out_channels % groups != 0) {
    *weight_ = ErrorTensor(*weight_, absl::InvalidArgumentError(absl::StrCat(
                                         "Conv2d groups (", options_.groups,
                                         ") must divide the input (", in_channels,
                                         ") and output (", out_channels, ") channels")));
  }
  if (options_.bias) bias_ = &RegisterParameter("bias", Filled(ctx, device, {out_channels}, 0));
}

Tensor Conv2d::Forward(const Tensor& x) const {
  if (!x.status().ok()) return x;
  std::vector<ir::WindowDim> window(2);
  const int64_t span = static_cast<int64_t>(kernel_ - 1) * options_.dilation + 1;
  for (int i = 0; i < 2; ++i) {
    ir::WindowDim& w = window[i];
    w.size = kernel_;
    w.stride = options_.stride;
    w.window_dilation = options_.dilation;
    if (options_.padding == "SAME") {
      const int64_t in = x.rank() == 4 ? x.dim(1 + i) : 0;
      const int64_t out = (in + options_.stride - 1) / options_.stride;
      const int64_t total = std::max<int64_t>((out - 1) * options_.stride + span - in, 0);
      w.pad_lo = total / 2;
      w.pad_hi = total - total / 2;
    } else if (options_.padding == "EXPLICIT") {
      w.pad_lo = w.pad_hi = options_.pad;
    } else if (options_.padding != "VALID") {
      return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                                "Conv2d padding must be SAME, VALID or EXPLICIT, not '",
                                options_.padding, "'")));
    }
  }
  const int groups = options_.groups;
  Tensor y = InComputeType(compute_type(), x, *weight_, [&](const Tensor& a, const Tensor& b) {
    return Convolution(a, b, window, Nhwc(), groups);
  });
  return bias_ == nullptr ? y : y + *bias_;
}

Tensor GlobalAvgPool2D(const Tensor& x) { return Mean(x, {1, 2}); }

ResidualBlock::ResidualBlock(LazyContext* ctx, const std::string& device, int64_t in_channels,
                             int64_t out_channels, int stride, uint64_t seed)
    : conv1_(ctx, device, in_channels, out_channels, 3, seed,
             {.stride = stride, .padding = "SAME", .bias = false}),
      conv2_(ctx, device, out_channels, out_channels, 3, seed + 1,
             {.stride = 1, .padding = "SAME", .bias = false}),
      bn1_(ctx, device, out_channels),
      bn2_(ctx, device, out_channels) {
  RegisterModule("conv1", &conv1_);
  RegisterModule("bn1", &bn1_);
  RegisterModule("conv2", &conv2_);
  RegisterModule("bn2", &bn2_);
  if (stride != 1 || in_channels != out_channels) {
    projection_ = std::make_unique<Conv2d>(
        ctx, device, in_channels, out_channels, 1, seed + 2,
        Conv2dOptions{.stride = stride, .padding = "VALID", .bias = false});
    projection_bn_ = std::make_unique<BatchNorm>(ctx, device, out_channels);
    RegisterModule("shortcut", projection_.get());
    RegisterModule("shortcut_bn", projection_bn_.get());
  }
}

Tensor ResidualBlock::Forward(const Tensor& x) {
  Tensor h = Relu(bn1_.Forward(conv1_.Forward(x)));
  h = bn2_.Forward(conv2_.Forward(h));
  Tensor shortcut = projection_ ? projection_bn_->Forward(projection_->Forward(x)) : x;
  return Relu(h + shortcut);
}

Embedding::Embedding(LazyContext* ctx, const std::string& device, int64_t vocab, int64_t dim,
                     uint64_t seed) {
  weight_ = &RegisterParameter("weight", ctx->RandomNormal(F32({vocab, dim}), 0, 1, seed, device));
}

BatchNorm::BatchNorm(LazyContext* ctx, const std::string& device, int64_t features,
                     double momentum, double eps)
    : momentum_(momentum), eps_(eps) {
  gamma_ = &RegisterParameter("gamma", Filled(ctx, device, {features}, 1));
  beta_ = &RegisterParameter("beta", Filled(ctx, device, {features}, 0));
  running_mean_ = &RegisterBuffer("running_mean", Filled(ctx, device, {features}, 0));
  running_var_ = &RegisterBuffer("running_var", Filled(ctx, device, {features}, 1));
}

Tensor BatchNorm::Forward(const Tensor& x) {
  Tensor mean, var;
  if (training()) {
    const std::vector<int64_t> dims = AllButLast(x);
    int64_t n = 1;
    for (int64_t d : dims) n *= x.dim(static_cast<int>(d));
    mean = Mean(x, dims);
    Tensor centered = x - mean;
    var = Mean(centered * centered, dims);
    // The running variance is unbiased, as in PyTorch.
    const double unbias = n > 1 ? static_cast<double>(n) / static_cast<double>(n - 1) : 1.0;
    *running_mean_ = *running_mean_ * (1 - momentum_) + mean * momentum_;
    *running_var_ = *running_var_ * (1 - momentum_) + var * (momentum_ * unbias);
  } else {
    mean = *running_mean_;
    var = *running_var_;
  }
  return (x - mean) * Rsqrt(var + eps_) * *gamma_ + *beta_;
}

LayerNorm::LayerNorm(LazyContext* ctx, const std::string& device, int64_t features, double eps)
    : eps_(eps) {
  gamma_ = &RegisterParameter("gamma", Filled(ctx, device, {features}, 1));
  beta_ = &RegisterParameter("beta", Filled(ctx, device, {features}, 0));
}

Tensor LayerNorm::Forward(const Tensor& x) const {
  const int64_t last = x.rank() - 1;
  Tensor mean = Mean(x, {last}, /*keep_dims=*/true);
  Tensor centered = x - mean;
  Tensor var = Mean(centered * centered, {last}, /*keep_dims=*/true);
  return centered * Rsqrt(var + eps_) * *gamma_ + *beta_;
}

Dropout::Dropout(LazyContext* ctx, const std::string& device, double p, uint64_t seed)
    : p_(p), seed_(seed) {
  counter_ = &RegisterBuffer(
      "counter", ctx->FromVector<uint32_t>(ir::ElementType::kU32, {}, {0u}, device));
}

Tensor Dropout::Forward(const Tensor& x) {
  if (!training() || p_ <= 0) return x;
  if (!x.status().ok()) return x;
  if (!ir::IsFloatType(x.storage_type())) {
    return ErrorTensor(x, absl::InvalidArgumentError(absl::StrCat(
                              "Dropout needs a floating-point tensor, not ", x.shape().ToString())));
  }
  // Compared in f32: rounding to a half type would move numbers near 1 to
  // 1 and the threshold with them.
  Tensor u = CounterUniform(*counter_, seed_, x.shape().dims());
  *counter_ = *counter_ + 1.0;
  Tensor keep = Cast(GreaterEqual(u, FullLike(u, u.shape(), p_)), x.storage_type());
  return x * keep * (1.0 / (1.0 - p_));
}

std::vector<std::pair<std::string, Tensor*>> TrainingState(Module& module, Optimizer& optimizer) {
  optimizer.InitState(module.Parameters());
  std::vector<std::pair<std::string, Tensor*>> state = module.NamedParameters();
  for (const auto& b : module.NamedBuffers()) state.push_back(b);
  for (const auto& o : optimizer.NamedState()) state.push_back(o);
  return state;
}

namespace {

// Replaces each tensor `named` points at by `convert` of it, all or none.
absl::Status ConvertEach(const std::vector<std::pair<std::string, Tensor*>>& named,
                         const std::function<Tensor(const Tensor&)>& convert) {
  std::vector<Tensor> converted;
  for (const auto& [name, t] : named) {
    if (t == nullptr || !t->defined()) {
      return absl::FailedPreconditionError(absl::StrCat("'", name, "' has no value"));
    }
    RETURN_IF_ERROR(WithContext(t->status(), name));
    converted.push_back(convert(*t));
    RETURN_IF_ERROR(WithContext(converted.back().status(), name));
  }
  for (size_t i = 0; i < named.size(); ++i) *named[i].second = converted[i];
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvertAll(const std::vector<std::pair<std::string, Tensor*>>& named,
                        ir::ElementType type) {
  if (!ir::IsFloatType(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvertAll converts to a floating-point type, not ", ir::ElementTypeName(type)));
  }
  return ConvertEach(named, [type](const Tensor& t) {
    return ir::IsFloatType(t.storage_type()) ? Cast(t, type) : t;
  });
}

absl::Status ToDevice(const std::vector<std::pair<std::string, Tensor*>>& named,
                      const std::string& device) {
  return ConvertEach(named, [&device](const Tensor& t) {
    if (t.device() == device && t.replica_count() == 1) return t;
    absl::StatusOr<Tensor> moved = t.ToDevice(device);
    return moved.ok() ? *moved : ErrorTensor(t, moved.status());
  });
}

absl::Status ToReducedPrecision(const std::vector<std::pair<std::string, Tensor*>>& named) {
  return ConvertEach(named, [](const Tensor& t) { return t.ToReducedPrecision(); });
}

absl::Status ToFullPrecision(const std::vector<std::pair<std::string, Tensor*>>& named) {
  return ConvertEach(named, [](const Tensor& t) { return t.ToFullPrecision(); });
}

absl::StatusOr<std::vector<Tensor>> ScaledGrad(const Tensor& loss,
                                               const std::vector<Tensor>& params, double scale) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat("loss scale ", scale, " is not positive"));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> grads, Grad(loss * scale, params));
  for (Tensor& g : grads) g = g * (1.0 / scale);
  return grads;
}

absl::StatusOr<DynamicLossScale> DynamicLossScale::Create(LazyContext* ctx,
                                                         const std::string& device,
                                                         DynamicLossScaleOptions options) {
  const double largest = std::numeric_limits<float>::max();
  if (!(options.initial_scale > 0) || !(options.initial_scale <= largest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial loss scale ", options.initial_scale, " is not a positive finite f32"));
  }
  if (!(options.growth_factor > 1) || !std::isfinite(options.growth_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scale growth factor ", options.growth_factor, " is not above 1"));
  }
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scale backoff factor ", options.backoff_factor, " is not between 0 and 1"));
  }
  if (options.growth_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scale growth interval ", options.growth_interval, " is not at least 1"));
  }
  ir::Literal scale(ir::Shape::Scalar(ir::ElementType::kF32));
  scale.SetFromDouble(0, options.initial_scale);
  Tensor scale_tensor = ctx->FromLiteral(std::move(scale), device);
  RETURN_IF_ERROR(scale_tensor.status());
  ir::Literal count(ir::Shape::Scalar(ir::ElementType::kS32));
  count.SetFromDouble(0, 0);
  Tensor count_tensor = ctx->FromLiteral(std::move(count), device);
  RETURN_IF_ERROR(count_tensor.status());
  ir::Literal finite(ir::Shape::Scalar(ir::ElementType::kPred));
  finite.SetFromDouble(0, 1);
  Tensor finite_tensor = ctx->FromLiteral(std::move(finite), device);
  RETURN_IF_ERROR(finite_tensor.status());
  return DynamicLossScale(options, std::move(scale_tensor), std::move(count_tensor),
                          std::move(finite_tensor));
}

absl::StatusOr<std::vector<Tensor>> DynamicLossScale::Grad(const Tensor& loss,
                                                           const std::vector<Tensor>& params) {
  RETURN_IF_ERROR(loss.status());
  RETURN_IF_ERROR(scale_.status());
  if (loss.shape().ElementCount() != 1 || !ir::IsFloatType(loss.storage_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Grad needs a floating-point scalar loss, not ", loss.shape().ToString()));
  }
  // A half-precision loss is scaled in f32: the scale itself may exceed
  // its range.
  const ir::ElementType type =
      loss.storage_type() == ir::ElementType::kF64 ? ir::ElementType::kF64 : ir::ElementType::kF32;
  const Tensor scale = Cast(scale_, type);
  ASSIGN_OR_RETURN(std::vector<Tensor> grads, client::Grad(Cast(loss, type) * scale, params));
  const Tensor inverse = OnesLike(scale) / scale;
  for (Tensor& g : grads) {
    if (!ir::IsFloatType(g.storage_type())) continue;
    // Unscaled in f32 (f64 for f64): 1/scale may be below a half type's range.
    const ir::ElementType wide =
        g.storage_type() == ir::ElementType::kF64 ? ir::ElementType::kF64 : ir::ElementType::kF32;
    const Tensor unscaled = Cast(g, wide) * Cast(inverse, wide);
    g = g.IsReducedPrecision() ? unscaled.ToReducedPrecision() : Cast(unscaled, g.storage_type());
  }
  return grads;
}

absl::StatusOr<std::vector<Tensor>> DynamicLossScale::Step(Optimizer& optimizer,
                                                           const std::vector<Tensor>& params,
                                                           const std::vector<Tensor>& grads) {
  if (params.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss-scaled step: ", params.size(), " parameters and ", grads.size(), " gradients"));
  }
  RETURN_IF_ERROR(scale_.status());
  RETURN_IF_ERROR(finite_steps_.status());
  // Every floating-point gradient element finite: the smallest of their
  // IsFinite as 0 or 1 is 1.
  Tensor all_finite = Cast(IsFinite(scale_), ir::ElementType::kF32);
  for (const Tensor& g : grads) {
    RETURN_IF_ERROR(g.status());
    if (!ir::IsFloatType(g.storage_type())) continue;
    all_finite = Minimum(all_finite, Reduce(Cast(IsFinite(g), ir::ElementType::kF32),
                                            Reducer::kMin, {}, /*keep_dims=*/false));
  }
  const Tensor finite = Equal(all_finite, OnesLike(all_finite));
  RETURN_IF_ERROR(finite.status());

  optimizer.InitState(params);
  std::vector<std::pair<std::string, Tensor*>> state = optimizer.NamedState();
  std::vector<Tensor> before;
  for (const auto& [name, t] : state) before.push_back(*t);
  ASSIGN_OR_RETURN(std::vector<Tensor> next, optimizer.Step(params, grads));
  if (next.size() != params.size()) {
    return absl::InternalError(absl::StrCat("the optimizer returned ", next.size(),
                                            " parameters for ", params.size()));
  }
  for (size_t i = 0; i < next.size(); ++i) next[i] = Select(finite, next[i], params[i]);
  for (size_t k = 0; k < state.size(); ++k) {
    *state[k].second = Select(finite, *state[k].second, before[k]);
  }

  const Tensor none = ZerosLike(finite_steps_);
  const Tensor counted = Select(finite, finite_steps_ + 1.0, none);
  const Tensor grow = GreaterEqual(
      counted, FullLike(counted, counted.shape(), static_cast<double>(options_.growth_interval)));
  const Tensor grown = scale_ * options_.growth_factor;
  scale_ = Select(grow, Select(IsFinite(grown), grown, scale_),
                  Select(finite, scale_, scale_ * options_.backoff_factor));
  finite_steps_ = Select(grow, none, counted);
  finite_ = finite;
  for (const Tensor& t : next) RETURN_IF_ERROR(t.status());
  RETURN_IF_ERROR(scale_.status());
  return next;
}

std::vector<std::pair<std::string, Tensor*>> DynamicLossScale::NamedState() {
  return {{"loss_scale", &scale_},
          {"loss_scale_finite_steps", &finite_steps_},
          {"loss_scale_last_step_finite", &finite_}};
}

}  // namespace kiln::client::nn
