// The Fashion-MNIST models (MLP and LeNet-5) and the training and evaluation
// steps, written with Kiln's lazy tensors.
#ifndef KILN_EXAMPLES_FASHION_MNIST_TRAINER_H_
#define KILN_EXAMPLES_FASHION_MNIST_TRAINER_H_

#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/compiled_function.h"
#include "client/data_parallel.h"
#include "client/lazy.h"
#include "client/optimizers.h"
#include "client/tensor.h"

namespace kiln::examples {

class Model {
 public:
  virtual ~Model() = default;
  // Logits [batch, 10] from images [batch, 784].
  virtual client::Tensor Forward(const client::Tensor& images) = 0;
  std::vector<client::Tensor>& params() { return params_; }

 protected:
  std::vector<client::Tensor> params_;
};

// "mlp" (784-512-512-10, ReLU) or "lenet" (LeNet-5: conv 5x5x6 SAME, max
// pool, conv 5x5x16, max pool, 120, 84, 10). Weights are drawn from `seed`.
absl::StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& name,
                                                 client::LazyContext* ctx,
                                                 const std::string& device, uint64_t seed);

// The learning rate a model trains with when none is given: 0.001 for
// Adam; for SGD 0.04 for lenet and 0.02 for mlp (with the cosine decay
// below these reach the accuracies recorded in docs/tensors.md).
double DefaultLearningRate(const std::string& model, const std::string& optimizer);
// Cosine decay per epoch: base * (1 + cos(pi * (epoch - 1) / epochs)) / 2,
// for epoch = 1..epochs.
double CosineLearningRate(double base, int epoch, int epochs);

// The device a client trains on: `flag` when given, else the server's
// default device.
std::string TrainingDevice(const client::Client& client, const std::string& flag);
// The devices `replicas` replicas train on. `flag` is a device kind ("tpu":
// its first `replicas` devices), a device ("tpu:2": it and the next ones of
// its kind) or empty (the default device's kind). NOT_FOUND when the
// server has too few.
absl::StatusOr<std::vector<std::string>> ReplicaDevices(const client::Client& client,
                                                        const std::string& flag, int replicas);

struct StepResult {
  double loss = 0;     // mean over the batch
  double correct = 0;  // examples classified right
};

// A training step sent to the device whose loss and count are not read yet.
struct PendingStep {
  client::Tensor loss, correct;
};

struct TrainerOptions {
  std::string optimizer = "sgd";  // sgd or adam
  double learning_rate = 0.05;
  double momentum = 0.9;
  // Data-parallel training over these devices (each batch split among
  // them); one device or none: the trainer's own device only.
  std::vector<std::string> replica_devices;
  // On one device: steps and evaluations run as client::CompiledFunction,
  // traced once per learning rate and batch shape and replayed otherwise.
  // Off: every step is traced (and its program found by the trace's key).
  bool replay = true;
};

// One program per step: forward, loss, backward and update compile together
// and run with a single barrier (on one device, as a CompiledFunction that
// is traced once and replayed). With several replica devices the step runs
// as one replicated program: each replica takes 1/N of the batch and the
// gradients are all-reduced. Not thread-safe.
class Trainer {
 public:
  Trainer(client::LazyContext* ctx, Model* model, std::string device,
          const TrainerOptions& options);
  absl::StatusOr<StepResult> TrainStep(const float* images, const int32_t* labels, int batch);
  absl::StatusOr<StepResult> TrainStep(const uint8_t* pixels, const int32_t* labels, int batch);
  // The step without reading its loss: with a pipelined context the device
  // runs it while the caller prepares the next one. Read it with ReadStep.
  absl::StatusOr<PendingStep> StartStep(const float* images, const int32_t* labels, int batch);
  // The same from the file's pixels (0..255, a quarter of the bytes of
  // standardized f32 images): they travel as u8 and the step standardizes
  // them on the device with LoadFashionMnist's mean and deviation (as a
  // multiply and a subtract, so equal to its images up to rounding).
  absl::StatusOr<PendingStep> StartStep(const uint8_t* pixels, const int32_t* labels, int batch);
  static absl::StatusOr<StepResult> ReadStep(const PendingStep& step);
  absl::StatusOr<StepResult> EvalStep(const float* images, const int32_t* labels, int batch);
  absl::StatusOr<StepResult> EvalStep(const uint8_t* pixels, const int32_t* labels, int batch);
  // Loop mode: `steps` training steps as one device program. Each
  // iteration reads one tuple (images f32[batch,784], labels s32[batch])
  // from the device's infeed and pushes the step's loss (f32[]) to its
  // outfeed; the
  // weights and the optimizer's state are the loop's carried state.
  // Blocks until the loop ends; `cancel` may stop it from another thread.
  // One device (no data parallelism).
  absl::Status TrainLoop(int64_t steps, int batch, client::CallCanceller* cancel = nullptr);

  // The optimizer's state (SGD's momentum, Adam's moments and step count),
  // created if needed, by name. Checkpoints save and restore it.
  std::vector<std::pair<std::string, client::Tensor*>> optimizer_state() {
    optimizer_->InitState(model_->params());
    return optimizer_->NamedState();
  }

  // For schedules: the rate is a device scalar, so no recompile.
  void SetLearningRate(double lr) { optimizer_->set_learning_rate(lr); }

 private:
  struct Batch {
    client::Tensor images, labels;
  };
  // Images [batch, 784], f32 or u8 pixels (standardized by Standardized,
  // on the device).
  absl::StatusOr<Batch> Upload(ir::Literal images, const int32_t* labels, int batch);
  absl::StatusOr<PendingStep> Start(absl::StatusOr<Batch> batch);
  absl::StatusOr<StepResult> Eval(absl::StatusOr<Batch> batch);
  // The forward pass's loss and correct count (this replica's).
  PendingStep TraceLoss(const Batch& batch);
  // The step's graph: loss and correct count; the parameters and the
  // optimizer's state take their updated values.
  absl::StatusOr<PendingStep> TraceStep(const Batch& batch);
  PendingStep TraceEval(const Batch& batch);
  // Runs a step or evaluation function on the batch; it returns the loss
  // and the correct count. `where` names the caller's site in recompile
  // explanations (one per kind of step).
  static absl::StatusOr<PendingStep> Call(
      client::CompiledFunction& step, absl::StatusOr<Batch> batch,
      std::source_location where = std::source_location::current());
  // What CompiledFunction evaluations bind (the parameters), and steps
  // (those, the optimizer's state and its learning rate).
  std::vector<client::Tensor*> ParamState();
  std::vector<client::Tensor*> StepState();

  // Replicates the model on the first data-parallel step.
  absl::Status ReplicateModel();
  // Loss and correct count over every replica's shard.
  void SumOverReplicas(client::Tensor& loss, client::Tensor& correct) const;

  client::LazyContext* ctx_;
  Model* model_;
  std::string device_;
  std::unique_ptr<client::DataParallel> data_parallel_;
  bool replicated_ = false;
  std::unique_ptr<client::Optimizer> optimizer_;
  // Steps and evaluations as CompiledFunctions (one device only).
  bool replay_ = false;
  std::unique_ptr<client::CompiledFunction> train_step_, eval_step_;
};

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_FASHION_MNIST_TRAINER_H_
