#include "client/optimizers.h"

#include "absl/strings/str_cat.h"
#include "client/lazy.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

absl::Status CheckPairs(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  if (params.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer got ", params.size(),
                                                   " parameters and ", grads.size(), " gradients"));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    RETURN_IF_ERROR(params[i].status());
    RETURN_IF_ERROR(grads[i].status());
    if (params[i].shape() != grads[i].shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", i, " is ", params[i].shape().ToString(), " but its gradient is ",
          grads[i].shape().ToString()));
    }
  }
  return absl::OkStatus();
}

// Zeros uploaded as device data: state starts as a parameter of the step
// program, like it stays, so the first and later steps share one graph.
Tensor DeviceZeros(const Tensor& like) {
  Tensor zeros = like.context()->FromLiteral(ir::Literal(like.shape()), like.device());
  if (zeros.status().ok()) zeros.node()->reduced_precision = like.IsReducedPrecision();
  return zeros;
}

// `rate` as a device scalar of `like`'s type, unless `tensor` holds it.
void UploadRate(double rate, const Tensor& like, Tensor& tensor) {
  // Again after the parameters changed type (nn::ConvertAll) or device
  // (nn::ToDevice).
  if (tensor.defined() && tensor.storage_type() == like.storage_type() &&
      tensor.device() == like.device()) {
    return;
  }
  ir::Literal lr(ir::Shape::Scalar(like.storage_type()));
  lr.SetFromDouble(0, rate);
  tensor = like.context()->FromLiteral(lr, like.device());
}

}  // namespace

void Sgd::set_learning_rate(double lr) {
  if (lr != lr_) lr_tensor_ = Tensor();
  lr_ = lr;
}

void Sgd::InitState(const std::vector<Tensor>& params) {
  if (momentum_ != 0 && velocity_.empty()) {
    for (const Tensor& p : params) velocity_.push_back(DeviceZeros(p));
  }
  if (!params.empty()) UploadRate(lr_, params[0], lr_tensor_);
}

std::vector<std::pair<std::string, Tensor*>> Sgd::NamedState() {
  std::vector<std::pair<std::string, Tensor*>> named;
  for (size_t i = 0; i < velocity_.size(); ++i) {
    named.emplace_back(absl::StrCat("velocity_", i), &velocity_[i]);
  }
  return named;
}

absl::StatusOr<std::vector<Tensor>> Sgd::Step(const std::vector<Tensor>& params,
                                              const std::vector<Tensor>& grads) {
  RETURN_IF_ERROR(CheckPairs(params, grads));
  InitState(params);
  if (lr_tensor_.defined()) RETURN_IF_ERROR(lr_tensor_.status());
  std::vector<Tensor> updated;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = weight_decay_ != 0 ? grads[i] + params[i] * weight_decay_ : grads[i];
    Tensor step = g;
    if (momentum_ != 0) {
      velocity_[i] = velocity_[i] * momentum_ + g;
      step = nesterov_ ? g + velocity_[i] * momentum_ : velocity_[i];
    }
    updated.push_back(params[i] - step * lr_tensor_);
    RETURN_IF_ERROR(updated.back().status());
  }
  return updated;
}

void Adam::set_learning_rate(double lr) {
  if (lr != lr_) lr_tensor_ = Tensor();
  lr_ = lr;
}

void Adam::InitState(const std::vector<Tensor>& params) {
  if (params.empty()) return;
  UploadRate(lr_, params[0], lr_tensor_);
  if (!m_.empty()) return;
  for (const Tensor& p : params) {
    m_.push_back(DeviceZeros(p));
    v_.push_back(DeviceZeros(p));
  }
  // An integer: it counts exactly whatever the parameters' type.
  t_ = params[0].context()->FromLiteral(ir::Literal(ir::Shape::Scalar(ir::ElementType::kS32)),
                                        params[0].device());
}

std::vector<std::pair<std::string, Tensor*>> Adam::NamedState() {
  std::vector<std::pair<std::string, Tensor*>> named;
  for (size_t i = 0; i < m_.size(); ++i) {
    named.emplace_back(absl::StrCat("adam_m_", i), &m_[i]);
    named.emplace_back(absl::StrCat("adam_v_", i), &v_[i]);
  }
  if (t_.defined()) named.emplace_back("adam_step", &t_);
  return named;
}

absl::StatusOr<std::vector<Tensor>> Adam::Step(const std::vector<Tensor>& params,
                                               const std::vector<Tensor>& grads) {
  RETURN_IF_ERROR(CheckPairs(params, grads));
  if (params.empty()) return std::vector<Tensor>();
  InitState(params);
  RETURN_IF_ERROR(lr_tensor_.status());
  t_ = t_ + 1.0;
  // The bias corrections in f32, then in the parameters' type.
  const Tensor t = Cast(t_, ir::ElementType::kF32);
  const Tensor one = OnesLike(t);
  const ir::ElementType type = params[0].storage_type();
  Tensor correction1 = Cast(one - Pow(OnesLike(t) * beta1_, t), type);
  Tensor correction2 = Cast(one - Pow(OnesLike(t) * beta2_, t), type);
  std::vector<Tensor> updated;
  for (size_t i = 0; i < params.size(); ++i) {
    m_[i] = m_[i] * beta1_ + grads[i] * (1.0 - beta1_);
    v_[i] = v_[i] * beta2_ + grads[i] * grads[i] * (1.0 - beta2_);
    Tensor m_hat = m_[i] / correction1;
    Tensor v_hat = v_[i] / correction2;
    Tensor p = decoupled_weight_decay_ != 0
                   ? params[i] - params[i] * (lr_tensor_ * decoupled_weight_decay_)
                   : params[i];
    updated.push_back(p - m_hat * lr_tensor_ / (Sqrt(v_hat) + eps_));
    RETURN_IF_ERROR(updated.back().status());
  }
  return updated;
}

}  // namespace kiln::client
