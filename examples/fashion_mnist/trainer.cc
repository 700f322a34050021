#include "examples/fashion_mnist/trainer.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/autodiff.h"
#include "client/loop.h"
#include "examples/fashion_mnist/mnist.h"
#include "base/status_macros.h"

namespace kiln::examples {
namespace {

using client::Tensor;
using ir::ElementType;
using ir::Shape;

class Mlp : public Model {
 public:
  Mlp(client::LazyContext* ctx, const std::string& device, uint64_t seed) {
    const int sizes[] = {784, 512, 512, 10};
    for (int i = 0; i < 3; ++i) {
      // He initialization for ReLU layers.
      const double stddev = std::sqrt(2.0 / sizes[i]);
      params_.push_back(ctx->RandomNormal(Shape(ElementType::kF32, {sizes[i], sizes[i + 1]}), 0,
                                          stddev, seed + i, device));
      params_.push_back(ctx->FromLiteral(ir::Literal(Shape(ElementType::kF32, {sizes[i + 1]})),
                                         device));
    }
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = x;
    for (int i = 0; i < 3; ++i) {
      h = client::Matmul(h, params_[2 * i]) + params_[2 * i + 1];
      if (i < 2) h = client::Relu(h);
    }
    return h;
  }
};

class LeNet : public Model {
 public:
  LeNet(client::LazyContext* ctx, const std::string& device, uint64_t seed) {
    auto weight = [&](std::vector<int64_t> dims, int64_t fan_in, uint64_t s) {
      params_.push_back(ctx->RandomNormal(Shape(ElementType::kF32, dims), 0,
                                          std::sqrt(2.0 / fan_in), seed + s, device));
      params_.push_back(
          ctx->FromLiteral(ir::Literal(Shape(ElementType::kF32, {dims.back()})), device));
    };
    weight({5, 5, 1, 6}, 25, 0);
    weight({5, 5, 6, 16}, 150, 1);
    weight({400, 120}, 400, 2);
    weight({120, 84}, 120, 3);
    weight({84, 10}, 84, 4);
  }
  Tensor Forward(const Tensor& x) override {
    const int64_t batch = x.dim(0);
    Tensor h = client::Reshape(x, {batch, 28, 28, 1});
    h = client::Relu(client::Conv2D(h, params_[0], 1, "SAME") + params_[1]);
    h = client::MaxPool2D(h, 2, 2);  // 14x14x6
    h = client::Relu(client::Conv2D(h, params_[2], 1, "VALID") + params_[3]);
    h = client::MaxPool2D(h, 2, 2);  // 5x5x16
    h = client::Reshape(h, {batch, 400});
    h = client::Relu(client::Matmul(h, params_[4]) + params_[5]);
    h = client::Relu(client::Matmul(h, params_[6]) + params_[7]);
    return client::Matmul(h, params_[8]) + params_[9];
  }
};

}  // namespace

double DefaultLearningRate(const std::string& model, const std::string& optimizer) {
  if (optimizer == "adam") return 0.001;
  return model == "lenet" ? 0.04 : 0.02;
}

double CosineLearningRate(double base, int epoch, int epochs) {
  return base * 0.5 * (1 + std::cos(M_PI * (epoch - 1) / epochs));
}

std::string TrainingDevice(const client::Client& client, const std::string& flag) {
  return flag.empty() ? client.default_device().name : flag;
}

absl::StatusOr<std::vector<std::string>> ReplicaDevices(const client::Client& client,
                                                        const std::string& flag, int replicas) {
  if (replicas < 1) return absl::InvalidArgumentError("--replicas must be at least 1");
  std::string kind = flag.empty() ? client.default_device().kind : flag;
  std::string first;
  if (const size_t colon = kind.find(':'); colon != std::string::npos) {
    first = kind;
    kind = kind.substr(0, colon);
  }
  std::vector<std::string> devices;
  for (const client::DeviceDescription& d : client.devices()) {
    if (d.kind != kind) continue;
    if (!first.empty() && devices.empty() && d.name != first) continue;
    if (static_cast<int>(devices.size()) < replicas) devices.push_back(d.name);
  }
  if (static_cast<int>(devices.size()) < replicas) {
    return absl::NotFoundError(absl::StrCat(
        "the server has ", devices.size(), " ", kind, " device(s) from ",
        first.empty() ? kind + ":0" : first, " on, ", replicas, " replicas need ", replicas,
        absl::StrCat(" (start kiln-server with --devices=cpu:1,", kind, ":", replicas, ")")));
  }
  return devices;
}

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& name,
                                                 client::LazyContext* ctx,
                                                 const std::string& device, uint64_t seed) {
  std::unique_ptr<Model> model;
  if (name == "mlp") {
    model = std::make_unique<Mlp>(ctx, device, seed);
  } else if (name == "lenet") {
    model = std::make_unique<LeNet>(ctx, device, seed);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown model '", name, "' (mlp or lenet)"));
  }
  for (const Tensor& p : model->params()) RETURN_IF_ERROR(p.status());
  return model;
}

Trainer::Trainer(client::LazyContext* ctx, Model* model, std::string device,
                 const TrainerOptions& options)
    : ctx_(ctx), model_(model), device_(std::move(device)) {
  if (options.replica_devices.size() > 1) {
    data_parallel_ = std::make_unique<client::DataParallel>(ctx, options.replica_devices);
  }
  replay_ = options.replay && data_parallel_ == nullptr;
  if (options.optimizer == "adam") {
    optimizer_ = std::make_unique<client::Adam>(options.learning_rate);
  } else {
    optimizer_ = std::make_unique<client::Sgd>(options.learning_rate, options.momentum);
  }
}

namespace {

ir::Literal ImageLiteral(const float* images, int batch) {
  ir::Literal x(Shape(ElementType::kF32, {batch, 784}));
  std::memcpy(x.mutable_bytes().data(), images, sizeof(float) * batch * 784);
  return x;
}

ir::Literal ImageLiteral(const uint8_t* pixels, int batch) {
  return ir::Literal::FromBytes(Shape(ElementType::kU8, {batch, 784}),
                                std::vector<uint8_t>(pixels, pixels + size_t(batch) * 784));
}

}  // namespace

absl::StatusOr<Trainer::Batch> Trainer::Upload(ir::Literal x, const int32_t* labels, int batch) {
  RETURN_IF_ERROR(ReplicateModel());
  ir::Literal y(Shape(ElementType::kS32, {batch}));
  std::memcpy(y.mutable_bytes().data(), labels, sizeof(int32_t) * batch);
  Batch b;
  if (data_parallel_ != nullptr) {
    ASSIGN_OR_RETURN(b.images, data_parallel_->Shard(x));
    ASSIGN_OR_RETURN(b.labels, data_parallel_->Shard(y));
  } else {
    b.images = ctx_->FromLiteral(std::move(x), device_);
    b.labels = ctx_->FromLiteral(std::move(y), device_);
  }
  RETURN_IF_ERROR(b.images.status());
  RETURN_IF_ERROR(b.labels.status());
  return b;
}

namespace {

// f32 images as they are; u8 pixels standardized, (pixel / 255 - mean) /
// std as one multiply and one subtract.
Tensor Standardized(const Tensor& images) {
  if (images.dtype() != ElementType::kU8) return images;
  return client::Cast(images, ElementType::kF32) * (1.0 / (255.0 * kPixelStd)) -
         double{kPixelMean} / kPixelStd;
}

}  // namespace

absl::Status Trainer::ReplicateModel() {
  if (data_parallel_ == nullptr || replicated_) return absl::OkStatus();
  RETURN_IF_ERROR(data_parallel_->ReplicateAll(&model_->params()));
  replicated_ = true;
  return absl::OkStatus();
}

void Trainer::SumOverReplicas(Tensor& loss, Tensor& correct) const {
  if (data_parallel_ == nullptr) return;
  loss = client::CrossReplicaSum(loss) * (1.0 / data_parallel_->replicas());
  correct = client::CrossReplicaSum(correct);
}

absl::StatusOr<StepResult> Trainer::TrainStep(const float* images, const int32_t* labels,
                                              int batch) {
  ASSIGN_OR_RETURN(PendingStep step, StartStep(images, labels, batch));
  return ReadStep(step);
}

absl::StatusOr<StepResult> Trainer::TrainStep(const uint8_t* pixels, const int32_t* labels,
                                              int batch) {
  ASSIGN_OR_RETURN(PendingStep step, StartStep(pixels, labels, batch));
  return ReadStep(step);
}

absl::StatusOr<StepResult> Trainer::ReadStep(const PendingStep& step) {
  ASSIGN_OR_RETURN(double l, step.loss.Item());
  ASSIGN_OR_RETURN(double c, step.correct.Item());
  return StepResult{l, c};
}

absl::StatusOr<PendingStep> Trainer::StartStep(const float* images, const int32_t* labels,
                                               int batch) {
  return Start(Upload(ImageLiteral(images, batch), labels, batch));
}

absl::StatusOr<PendingStep> Trainer::StartStep(const uint8_t* pixels, const int32_t* labels,
                                               int batch) {
  return Start(Upload(ImageLiteral(pixels, batch), labels, batch));
}

absl::StatusOr<PendingStep> Trainer::Call(client::CompiledFunction& step,
                                           absl::StatusOr<Batch> uploaded,
                                           std::source_location where) {
  ASSIGN_OR_RETURN(Batch b, std::move(uploaded));
  // Held by the call alone (an initializer list would keep copies, and the
  // program could not take their memory).
  std::vector<Tensor> args;
  args.push_back(std::move(b.images));
  args.push_back(std::move(b.labels));
  ASSIGN_OR_RETURN(std::vector<Tensor> out, step(std::move(args), where));
  return PendingStep{std::move(out[0]), std::move(out[1])};
}

std::vector<Tensor*> Trainer::ParamState() {
  std::vector<Tensor*> state;
  for (Tensor& p : model_->params()) state.push_back(&p);
  return state;
}

std::vector<Tensor*> Trainer::StepState() {
  std::vector<Tensor*> state = ParamState();
  for (const auto& [name, tensor] : optimizer_state()) state.push_back(tensor);
  state.push_back(optimizer_->learning_rate_tensor());
  return state;
}

PendingStep Trainer::TraceLoss(const Batch& b) {
  Tensor logits = model_->Forward(Standardized(b.images));
  PendingStep step;
  step.loss = client::SoftmaxCrossEntropy(logits, client::OneHot(b.labels, 10));
  step.correct = client::CorrectCount(logits, b.labels);
  return step;
}

absl::StatusOr<PendingStep> Trainer::TraceStep(const Batch& b) {
  PendingStep step = TraceLoss(b);
  std::vector<Tensor>& params = model_->params();
  ASSIGN_OR_RETURN(std::vector<Tensor> grads, client::Grad(step.loss, params));
  if (data_parallel_ != nullptr) grads = data_parallel_->AllReduceMean(grads);
  SumOverReplicas(step.loss, step.correct);
  ASSIGN_OR_RETURN(std::vector<Tensor> updated, optimizer_->Step(params, grads));
  // Element by element: a CompiledFunction's state points into `params`.
  for (size_t i = 0; i < params.size(); ++i) params[i] = std::move(updated[i]);
  return step;
}

PendingStep Trainer::TraceEval(const Batch& b) {
  PendingStep step = TraceLoss(b);
  SumOverReplicas(step.loss, step.correct);
  return step;
}

absl::StatusOr<PendingStep> Trainer::Start(absl::StatusOr<Batch> uploaded) {
  if (replay_) {
    if (train_step_ == nullptr) {
      train_step_ = std::make_unique<client::CompiledFunction>(
          ctx_, StepState(),
          [this](const std::vector<Tensor>& args) -> absl::StatusOr<std::vector<Tensor>> {
            ASSIGN_OR_RETURN(PendingStep step, TraceStep(Batch{args[0], args[1]}));
            return std::vector<Tensor>{std::move(step.loss), std::move(step.correct)};
          });
    }
    return Call(*train_step_, std::move(uploaded));
  }
  PendingStep step;
  {
    ASSIGN_OR_RETURN(Batch b, std::move(uploaded));
    ASSIGN_OR_RETURN(step, TraceStep(b));
  }
  // Everything else of the step is out of scope: the barrier's outputs are
  // the new weights, the optimizer state, the loss and the count.
  RETURN_IF_ERROR(ctx_->Barrier(device_));
  return step;
}

absl::Status Trainer::TrainLoop(int64_t steps, int batch, client::CallCanceller* cancel) {
  if (data_parallel_ != nullptr) {
    return absl::InvalidArgumentError("loop mode trains on one device");
  }
  std::vector<Tensor>& params = model_->params();
  std::vector<std::pair<std::string, Tensor*>> carried;
  for (size_t i = 0; i < params.size(); ++i) {
    carried.emplace_back(absl::StrCat("param_", i), &params[i]);
  }
  for (const auto& named : optimizer_state()) carried.push_back(named);
  RETURN_IF_ERROR(client::WhileCarrying(steps, carried, [&](client::DeviceLoop& loop) {
    std::vector<Tensor> pair = loop.InfeedTuple(
        {Shape(ElementType::kF32, {batch, 784}), Shape(ElementType::kS32, {batch})});
    const Tensor& images = pair[0];
    const Tensor& labels = pair[1];
    Tensor logits = model_->Forward(images);
    Tensor loss = client::SoftmaxCrossEntropy(logits, client::OneHot(labels, 10));
    loop.Outfeed(loss);
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, client::Grad(loss, params));
    ASSIGN_OR_RETURN(std::vector<Tensor> updated, optimizer_->Step(params, grads));
    // Element by element: `carried` points into `params`.
    for (size_t i = 0; i < params.size(); ++i) params[i] = updated[i];
    return absl::OkStatus();
  }));
  std::vector<Tensor> state;
  for (const auto& [name, tensor] : carried) state.push_back(*tensor);
  return ctx_->Realize(state, std::source_location::current(), cancel);
}

absl::StatusOr<StepResult> Trainer::EvalStep(const float* images, const int32_t* labels,
                                             int batch) {
  return Eval(Upload(ImageLiteral(images, batch), labels, batch));
}

absl::StatusOr<StepResult> Trainer::EvalStep(const uint8_t* pixels, const int32_t* labels,
                                             int batch) {
  return Eval(Upload(ImageLiteral(pixels, batch), labels, batch));
}

absl::StatusOr<StepResult> Trainer::Eval(absl::StatusOr<Batch> uploaded) {
  PendingStep step;
  if (replay_) {
    if (eval_step_ == nullptr) {
      eval_step_ = std::make_unique<client::CompiledFunction>(
          ctx_, ParamState(),
          [this](const std::vector<Tensor>& args) -> absl::StatusOr<std::vector<Tensor>> {
            PendingStep eval = TraceEval(Batch{args[0], args[1]});
            return std::vector<Tensor>{std::move(eval.loss), std::move(eval.correct)};
          });
    }
    ASSIGN_OR_RETURN(step, Call(*eval_step_, std::move(uploaded)));
  } else {
    {
      ASSIGN_OR_RETURN(Batch b, std::move(uploaded));
      step = TraceEval(b);
    }
    RETURN_IF_ERROR(ctx_->Barrier(device_));
  }
  return ReadStep(step);
}

}  // namespace kiln::examples
