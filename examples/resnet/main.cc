// A ResNet-18-style network trained on Fashion-MNIST the XLA.jl way: each
// epoch is one compiled device loop, the batches stream in through the
// infeed from a producer thread (shuffled and augmented on the host), the
// losses stream out through the outfeed and print while the loop runs,
// and the weights stay on the device until the end.
//
//   resnet                                    # embedded service, cpu:0
//   resnet --server=127.0.0.1:8470            # through kiln-server, its default device
//   resnet --devices=cpu:1,tpu:8 --device=tpu:0 --epochs=1
//   resnet --checkpoint_dir=/tmp/resnet       # saves after each epoch, resumes from there
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "client/checkpoint.h"
#include "client/client.h"
#include "client/feeds.h"
#include "client/lazy.h"
#include "client/loop.h"
#include "client/optimizers.h"
#include "embedded/embedded.h"
#include "examples/fashion_mnist/feeding.h"
#include "examples/fashion_mnist/mnist.h"
#include "examples/fashion_mnist/trainer.h"
#include "examples/resnet/resnet.h"

ABSL_FLAG(std::string, server, "", "kiln-server address; empty runs the service embedded");
ABSL_FLAG(std::string, devices, "cpu:1",
          "embedded service only: its devices, as kiln-server's --devices (e.g. cpu:1,tpu:8)");
ABSL_FLAG(std::string, device, "",
          "device to train on, or a kind (tpu) for its first device (default: the service's "
          "default device)");
ABSL_FLAG(int, replicas, 1,
          "data-parallel replicas: the first N devices of --device's kind each train on 1/N of "
          "every batch in a device loop of their own, gradients averaged inside the loop");
ABSL_FLAG(int, width, 16, "channels of the first stage (then 2x, 4x, 8x)");
ABSL_FLAG(int, epochs, 10, "passes over the training set");
ABSL_FLAG(int, batch_size, 128, "examples per step");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate at the first epoch (cosine decay per epoch)");
ABSL_FLAG(double, momentum, 0.9, "SGD (Nesterov) momentum");
ABSL_FLAG(double, weight_decay, 5e-4, "SGD weight decay");
ABSL_FLAG(bool, augment, true, "shift images by up to 2 pixels and mirror them at random");
ABSL_FLAG(std::string, compute, "f32",
          "f32, or bf16: convolutions and the classifier's product in bf16 on f32 master "
          "weights (mixed precision)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "save the weights, statistics and optimizer state here after every epoch, and start "
          "from the newest checkpoint found there");
ABSL_FLAG(std::string, data_dir, kiln::examples::kDefaultDataDir, "folder of the idx files");
ABSL_FLAG(int64_t, train_limit, 0, "use only this many training examples (0: all)");
ABSL_FLAG(int64_t, test_limit, 0, "use only this many test examples (0: all)");
ABSL_FLAG(int, eval_batch_size, 500, "examples per evaluation step");
ABSL_FLAG(int, log_every, 50, "print a progress line every this many steps");
ABSL_FLAG(int, prefetch, 8, "batches the producer prepares ahead of the infeed");
ABSL_FLAG(uint64_t, seed, 1, "seed of the weights, the shuffling and the augmentation");

namespace {

using kiln::client::Tensor;
using kiln::ir::ElementType;
using kiln::ir::Shape;

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "resnet: %s\n", std::string(st.message()).c_str());
  return 1;
}

absl::StatusOr<std::unique_ptr<kiln::client::Client>> Connect() {
  if (absl::GetFlag(FLAGS_server).empty()) {
    kiln::embedded::Options options;
    options.client_name = "resnet";
    options.devices = absl::GetFlag(FLAGS_devices);
    return kiln::embedded::Connect(options);
  }
  kiln::client::ConnectOptions options;
  options.client_name = "resnet";
  return kiln::client::Client::Connect(absl::GetFlag(FLAGS_server), options);
}

struct Evaluation {
  double loss = 0, accuracy = 0;
};

// Test loss and accuracy in inference mode (running statistics), in steps
// of `batch` examples.
absl::StatusOr<Evaluation> Evaluate(kiln::examples::ResNet& net, kiln::client::LazyContext* ctx,
                                    const std::string& device,
                                    const kiln::examples::Dataset& test, int batch) {
  net.Train(false);
  Evaluation e;
  int64_t seen = 0;
  absl::Status st;
  for (int64_t s = 0; st.ok() && s + batch <= test.count; s += batch) {
    std::vector<float> x(test.images.begin() + s * 784, test.images.begin() + (s + batch) * 784);
    std::vector<int32_t> y(test.labels.begin() + s, test.labels.begin() + s + batch);
    Tensor images = ctx->FromVector<float>(ElementType::kF32, {batch, 784}, x, device);
    Tensor labels = ctx->FromVector<int32_t>(ElementType::kS32, {batch}, y, device);
    Tensor logits = net.Forward(images);
    Tensor loss = kiln::client::SoftmaxCrossEntropy(logits, kiln::client::OneHot(labels, 10));
    Tensor correct = kiln::client::CorrectCount(logits, labels);
    st = ctx->Barrier(device);
    absl::StatusOr<double> l = loss.Item();
    absl::StatusOr<double> c = correct.Item();
    if (st.ok()) st = l.status();
    if (st.ok()) st = c.status();
    if (st.ok()) {
      e.loss += *l * batch;
      e.accuracy += *c;
      seen += batch;
    }
  }
  net.Train(true);
  RETURN_IF_ERROR(st);
  if (seen == 0) return absl::InvalidArgumentError("fewer test images than one evaluation batch");
  e.loss /= seen;
  e.accuracy /= seen;
  return e;
}

// While it lives, the tensors of `state` are replica 0 of themselves, so
// that a program reading them (an evaluation) runs once, on the lead device.
class LeadViews {
 public:
  LeadViews(const kiln::client::DataParallel* dp,
            const std::vector<std::pair<std::string, Tensor*>>& state)
      : state_(state) {
    if (dp == nullptr) return;
    for (const auto& [name, t] : state_) {
      saved_.push_back(*t);
      *t = dp->Lead(*t);
    }
  }
  ~LeadViews() {
    for (size_t i = 0; i < saved_.size(); ++i) *state_[i].second = saved_[i];
  }

 private:
  const std::vector<std::pair<std::string, Tensor*>>& state_;
  std::vector<Tensor> saved_;
};

// The sum of squares of every tensor of `state`: a fingerprint of where a
// run ended, to compare runs by.
absl::StatusOr<double> SumOfSquares(
    const std::vector<std::pair<std::string, Tensor*>>& state, int64_t* values) {
  double sum = 0;
  *values = 0;
  for (const auto& [name, t] : state) {
    ASSIGN_OR_RETURN(kiln::ir::Literal v, t->ToHost());
    for (int64_t i = 0; i < v.element_count(); ++i) sum += v.GetAsDouble(i) * v.GetAsDouble(i);
    *values += v.element_count();
  }
  return sum;
}

absl::Status Run() {
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  const int width = absl::GetFlag(FLAGS_width);
  if (batch < 1 || epochs < 1 || width < 1) {
    return absl::InvalidArgumentError("--batch_size, --epochs and --width must be positive");
  }
  std::printf("loading Fashion-MNIST from %s\n", absl::GetFlag(FLAGS_data_dir).c_str());
  ASSIGN_OR_RETURN(kiln::examples::Dataset train,
                   kiln::examples::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "train",
                                                    absl::GetFlag(FLAGS_train_limit)));
  ASSIGN_OR_RETURN(kiln::examples::Dataset test,
                   kiln::examples::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "t10k",
                                                    absl::GetFlag(FLAGS_test_limit)));
  const int64_t steps = train.count / batch;
  if (steps == 0) return absl::InvalidArgumentError("fewer training images than one batch");
  const int replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas < 1 || batch % replicas != 0) {
    return absl::InvalidArgumentError("--batch_size must be a multiple of --replicas (at least 1)");
  }

  ASSIGN_OR_RETURN(std::unique_ptr<kiln::client::Client> client, Connect());
  // --device names a device, or a kind whose first devices take the replicas.
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  std::vector<std::string> devices = {kiln::examples::TrainingDevice(*client, device_flag)};
  if (replicas > 1 || (!device_flag.empty() && device_flag.find(':') == std::string::npos)) {
    ASSIGN_OR_RETURN(devices, kiln::examples::ReplicaDevices(*client, device_flag, replicas));
  }
  const std::string device = devices[0];
  auto ctx = kiln::client::LazyContext::Create(client.get());
  kiln::examples::ResNet net(ctx.get(), device, width, absl::GetFlag(FLAGS_seed));
  const std::string compute = absl::GetFlag(FLAGS_compute);
  if (compute == "bf16") {
    net.SetComputeType(ElementType::kBF16);
  } else if (compute != "f32") {
    return absl::InvalidArgumentError("--compute must be f32 or bf16");
  }
  const double lr = absl::GetFlag(FLAGS_lr);
  kiln::client::Sgd optimizer(lr, absl::GetFlag(FLAGS_momentum), /*nesterov=*/true,
                              absl::GetFlag(FLAGS_weight_decay));
  std::vector<std::pair<std::string, Tensor*>> state =
      kiln::client::nn::TrainingState(net, optimizer);
  int64_t parameters = 0;
  for (const Tensor& p : net.Parameters()) {
    RETURN_IF_ERROR(p.status());
    parameters += p.shape().ElementCount();
  }

  // Where to start: after the newest checkpoint's epoch, if there is one.
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  int first_epoch = 1;
  if (!checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(std::optional<kiln::client::Checkpoint> found,
                     kiln::client::LoadLatestCheckpoint(checkpoint_dir));
    if (found.has_value()) {
      int saved_width = 0;
      if (!absl::SimpleAtoi(found->meta["width"], &saved_width) || saved_width != width) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the checkpoint in ", checkpoint_dir, " is of width ", found->meta["width"],
            ", not ", width));
      }
      RETURN_IF_ERROR(kiln::client::RestoreTensors(*found, state, ctx.get(), device));
      first_epoch = static_cast<int>(found->step) + 1;
      std::printf("resuming after epoch %d from %s\n", first_epoch - 1, checkpoint_dir.c_str());
    }
  }
  if (first_epoch > epochs) {
    std::printf("the checkpoint is of epoch %d: nothing left to train\n", first_epoch - 1);
  }
  // Data parallel: every replica holds the whole training state.
  std::unique_ptr<kiln::client::DataParallel> dp;
  if (replicas > 1) {
    dp = std::make_unique<kiln::client::DataParallel>(ctx.get(), devices);
    for (const auto& [name, t] : state) {
      ASSIGN_OR_RETURN(*t, dp->Replicate(*t));
    }
  }

  std::printf("training a ResNet (width %d, %lld parameters) on %s%s in loop mode: %lld steps "
              "per epoch program, batch %d, SGD lr %g, matrix work in %s, %s\n",
              width, static_cast<long long>(parameters), device.c_str(),
              replicas > 1 ? absl::StrCat(" and ", replicas - 1, " more replicas (",
                                          batch / replicas, " examples each per step)")
                                 .c_str()
                           : "",
              static_cast<long long>(steps), batch, lr, compute.c_str(),
              absl::GetFlag(FLAGS_server).empty()
                  ? "embedded service"
                  : ("through kiln-server at " + absl::GetFlag(FLAGS_server)).c_str());
  std::fflush(stdout);

  // One producer per replica, each streaming its part of every batch (the
  // same shuffled batches, drawn from the same seed) into its device.
  std::vector<std::unique_ptr<kiln::client::InfeedLoader>> loaders;
  for (int r = 0; first_epoch <= epochs && r < replicas; ++r) {
    ASSIGN_OR_RETURN(std::unique_ptr<kiln::client::InfeedStream> stream,
                     client->OpenInfeed(devices[r]));
    kiln::client::InfeedLoader::BatchSource batches = kiln::examples::ShuffledBatches(
        &train, batch, first_epoch, epochs, absl::GetFlag(FLAGS_seed) + 1,
        absl::GetFlag(FLAGS_augment));
    if (replicas > 1) batches = kiln::examples::ShardOf(std::move(batches), r, replicas);
    loaders.push_back(std::make_unique<kiln::client::InfeedLoader>(
        std::move(stream), std::move(batches), absl::GetFlag(FLAGS_prefetch)));
  }
  const int shard = batch / replicas;
  const std::vector<Shape> batch_shapes = {Shape(ElementType::kF32, {shard, 784}),
                                           Shape(ElementType::kS32, {shard})};
  Evaluation last;
  for (int epoch = first_epoch; epoch <= epochs; ++epoch) {
    const double epoch_lr = kiln::examples::CosineLearningRate(lr, epoch, epochs);
    optimizer.set_learning_rate(epoch_lr);
    const auto start = std::chrono::steady_clock::now();
    kiln::examples::LoopEpochOptions options;
    options.epoch = epoch;
    options.steps = steps;
    options.log_every = absl::GetFlag(FLAGS_log_every);
    options.other_devices.assign(devices.begin() + 1, devices.end());
    ASSIGN_OR_RETURN(
        double train_loss,
        kiln::examples::RunLoopEpoch(
            *client, device, options, [&](kiln::client::CallCanceller* cancel) -> absl::Status {
              RETURN_IF_ERROR(kiln::client::WhileCarrying(
                  steps, state, [&](kiln::client::DeviceLoop& loop) -> absl::Status {
                    std::vector<Tensor> pair = loop.InfeedTuple(batch_shapes);
                    ASSIGN_OR_RETURN(Tensor loss,
                                     kiln::examples::TraceTrainStep(net, optimizer, pair[0],
                                                                    pair[1], dp.get()));
                    loop.Outfeed(loss);
                    return absl::OkStatus();
                  }));
              std::vector<Tensor> finals;
              for (const auto& [name, t] : state) finals.push_back(*t);
              return ctx->Realize(finals, std::source_location::current(), cancel);
            }));
    const double train_seconds = kiln::examples::SecondsSince(start);
    {
      LeadViews lead(dp.get(), state);
      ASSIGN_OR_RETURN(last, Evaluate(net, ctx.get(), device, test,
                                      absl::GetFlag(FLAGS_eval_batch_size)));
    }
    std::printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.1f s "
                "(%.1f ms per step), lr %.5f, compiles %lld\n",
                epoch, train_loss, last.loss, last.accuracy, train_seconds,
                1e3 * train_seconds / steps, epoch_lr,
                static_cast<long long>(ctx->metrics().uncached_compiles));
    std::fflush(stdout);
    if (!checkpoint_dir.empty()) {
      std::vector<std::pair<std::string, const Tensor*>> saved;
      for (const auto& [name, t] : state) saved.emplace_back(name, t);
      RETURN_IF_ERROR(kiln::client::SaveCheckpoint(checkpoint_dir, epoch, saved,
                                                   {{"width", absl::StrCat(width)}}));
      std::printf("  saved epoch %d to %s\n", epoch, checkpoint_dir.c_str());
    }
  }
  for (auto& loader : loaders) RETURN_IF_ERROR(loader->Wait());
  if (first_epoch > epochs) {
    LeadViews lead(dp.get(), state);
    ASSIGN_OR_RETURN(last,
                     Evaluate(net, ctx.get(), device, test, absl::GetFlag(FLAGS_eval_batch_size)));
  }
  if (dp != nullptr) {
    // Every replica applied the same averaged updates: they hold one model.
    for (const auto& [name, t] : state) {
      RETURN_IF_ERROR(kiln::WithContext(dp->CheckInStep(*t).status(), name));
    }
    std::printf("all %d replicas hold the same %zu tensors\n", replicas, state.size());
  }
  int64_t values = 0;
  ASSIGN_OR_RETURN(double squares, SumOfSquares(state, &values));
  std::printf("final test accuracy %.4f (test loss %.4f); fetched %zu tensors, %lld values, "
              "sum of squares %.9g\n",
              last.accuracy, last.loss, state.size(), static_cast<long long>(values), squares);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  kiln::ParseFlags(argc, argv,
                   "resnet: a ResNet-18-style network trained on Fashion-MNIST, each epoch one "
                   "device loop fed through the infeed. Usage: resnet [--flag=value ...]");
  kiln::logging::SetLevel("warn").IgnoreError();
  absl::Status st = Run();
  return st.ok() ? 0 : Fail(st);
}
