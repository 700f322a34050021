// Fashion-MNIST with the whole training loop on the device: each epoch is
// one program (a while loop) that reads batches from the infeed, steps, and
// pushes every loss to the outfeed. The host streams data in and prints the
// losses as they arrive.
//
//   infeed_training --server=HOST:PORT                      # producer thread in this process
//   infeed_training --server=HOST:PORT --producer=external  # prints a token, then:
//   infeed_training --role=producer --server=HOST:PORT --token=f-...   # on any machine
#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "client/client.h"
#include "client/feeds.h"
#include "client/lazy.h"
#include "embedded/embedded.h"
#include "examples/fashion_mnist/feeding.h"
#include "examples/fashion_mnist/mnist.h"
#include "examples/fashion_mnist/trainer.h"
#include "base/logging.h"

ABSL_FLAG(std::string, role, "trainer", "trainer, or producer (streams the batches)");
ABSL_FLAG(std::string, server, "", "kiln-server address; empty runs the service embedded");
ABSL_FLAG(std::string, token, "", "producer: the feed token the trainer printed");
ABSL_FLAG(std::string, producer, "internal",
          "trainer: internal (a loader thread in this process) or external (another process)");
ABSL_FLAG(std::string, model, "mlp", "mlp or lenet");
ABSL_FLAG(std::string, device, "", "device (default: the server's default device)");
ABSL_FLAG(int, epochs, 5, "passes over the training set");
ABSL_FLAG(int, batch_size, 128, "examples per step");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd (with --momentum) or adam");
ABSL_FLAG(double, lr, 0,
          "learning rate; 0: the model's default (SGD: 0.02 for mlp, 0.04 for lenet; Adam: "
          "0.001), with cosine decay per epoch");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(int, prefetch, 8, "batches the loader prepares ahead of the infeed");
ABSL_FLAG(std::string, data_dir, kiln::examples::kDefaultDataDir, "folder of the idx files");
ABSL_FLAG(int64_t, train_limit, 0, "use only this many training examples (0: all)");
ABSL_FLAG(int64_t, test_limit, 0, "use only this many test examples (0: all)");
ABSL_FLAG(int, log_every, 100, "print a progress line every this many steps");
ABSL_FLAG(uint64_t, seed, 1, "seed of weights and of the producer's shuffling");

namespace {

using kiln::examples::Dataset;

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "infeed_training: %s\n", st.ToString().c_str());
  return 1;
}

absl::StatusOr<std::unique_ptr<kiln::client::Client>> Connect(const std::string& name) {
  if (absl::GetFlag(FLAGS_server).empty()) return kiln::embedded::Connect();
  kiln::client::ConnectOptions options;
  options.client_name = name;
  return kiln::client::Client::Connect(absl::GetFlag(FLAGS_server), options);
}

int RunProducer(const Dataset& train) {
  if (absl::GetFlag(FLAGS_server).empty() || absl::GetFlag(FLAGS_token).empty()) {
    return Fail(absl::InvalidArgumentError("a producer needs --server and --token"));
  }
  auto client = Connect("infeed_training producer");
  if (!client.ok()) return Fail(client.status());
  const std::string device = kiln::examples::TrainingDevice(**client, absl::GetFlag(FLAGS_device));
  auto stream = (*client)->OpenInfeed(device, absl::GetFlag(FLAGS_token));
  if (!stream.ok()) return Fail(stream.status());
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  const int64_t total = train.count / batch * epochs;
  std::printf("producer: streaming %lld batches of %d to %s on %s\n",
              static_cast<long long>(total), batch, device.c_str(),
              absl::GetFlag(FLAGS_server).c_str());
  std::fflush(stdout);
  kiln::client::InfeedLoader loader(
      *std::move(stream), kiln::examples::ShuffledBatches(&train, batch, 1, epochs, absl::GetFlag(FLAGS_seed) + 1),
      absl::GetFlag(FLAGS_prefetch));
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = loader.Wait();
  std::printf("producer: %lld batches written to the stream in %.1f s%s\n",
              static_cast<long long>(loader.batches_written()), kiln::examples::SecondsSince(start),
              st.ok() ? "" : (" (" + st.ToString() + ")").c_str());
  return st.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::ParseFlags(argc, argv,
                   "infeed_training: Fashion-MNIST trained by one device loop per epoch, fed "
                   "through the infeed. Usage: infeed_training [--flag=value ...]");
  kiln::logging::SetLevel("warn").IgnoreError();
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role != "trainer" && role != "producer") {
    return Fail(absl::InvalidArgumentError("--role must be trainer or producer"));
  }
  const int batch = absl::GetFlag(FLAGS_batch_size);
  if (batch < 1) return Fail(absl::InvalidArgumentError("--batch_size must be positive"));
  auto train = kiln::examples::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "train",
                                                absl::GetFlag(FLAGS_train_limit));
  if (!train.ok()) return Fail(train.status());
  if (role == "producer") return RunProducer(*train);

  auto test = kiln::examples::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "t10k",
                                               absl::GetFlag(FLAGS_test_limit));
  if (!test.ok()) return Fail(test.status());
  const bool external = absl::GetFlag(FLAGS_producer) == "external";
  if (external && absl::GetFlag(FLAGS_server).empty()) {
    return Fail(absl::InvalidArgumentError("--producer=external needs --server"));
  }
  auto client = Connect("infeed_training");
  if (!client.ok()) return Fail(client.status());
  const std::string device = kiln::examples::TrainingDevice(**client, absl::GetFlag(FLAGS_device));
  const int64_t steps = train->count / batch;
  if (steps == 0) return Fail(absl::InvalidArgumentError("fewer training images than one batch"));
  const int epochs = absl::GetFlag(FLAGS_epochs);
  double lr = absl::GetFlag(FLAGS_lr);
  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  if (optimizer != "sgd" && optimizer != "adam") {
    return Fail(absl::InvalidArgumentError("--optimizer must be sgd or adam"));
  }
  if (lr <= 0) lr = kiln::examples::DefaultLearningRate(absl::GetFlag(FLAGS_model), optimizer);

  auto ctx = kiln::client::LazyContext::Create(client->get());
  auto model = kiln::examples::MakeModel(absl::GetFlag(FLAGS_model), ctx.get(), device,
                                         absl::GetFlag(FLAGS_seed));
  if (!model.ok()) return Fail(model.status());
  kiln::examples::TrainerOptions options;
  options.optimizer = optimizer;
  options.learning_rate = lr;
  options.momentum = absl::GetFlag(FLAGS_momentum);
  kiln::examples::Trainer trainer(ctx.get(), model->get(), device, options);

  std::unique_ptr<kiln::client::InfeedLoader> loader;
  if (external) {
    auto token = (*client)->CreateFeedToken(device);
    if (!token.ok()) return Fail(token.status());
    std::printf("feed token: %s\nstart the producer (within the server's infeed timeout):\n"
                "  infeed_training --role=producer --server=%s --token=%s --epochs=%d "
                "--batch_size=%d\n",
                token->c_str(), absl::GetFlag(FLAGS_server).c_str(), token->c_str(), epochs, batch);
  } else {
    auto stream = (*client)->OpenInfeed(device);
    if (!stream.ok()) return Fail(stream.status());
    loader = std::make_unique<kiln::client::InfeedLoader>(
        *std::move(stream), kiln::examples::ShuffledBatches(&*train, batch, 1, epochs, absl::GetFlag(FLAGS_seed) + 1),
        absl::GetFlag(FLAGS_prefetch));
  }
  std::printf("training %s on %s in loop mode: %lld steps per program, batch %d, lr %g%s\n",
              absl::GetFlag(FLAGS_model).c_str(), device.c_str(), static_cast<long long>(steps),
              batch, lr,
              absl::GetFlag(FLAGS_server).empty()
                  ? " (embedded service)"
                  : (" through kiln-server at " + absl::GetFlag(FLAGS_server)).c_str());
  std::fflush(stdout);

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const double epoch_lr = kiln::examples::CosineLearningRate(lr, epoch, epochs);
    trainer.SetLearningRate(epoch_lr);
    const auto start = std::chrono::steady_clock::now();
    kiln::examples::LoopEpochOptions loop_options;
    loop_options.epoch = epoch;
    loop_options.steps = steps;
    loop_options.log_every = absl::GetFlag(FLAGS_log_every);
    absl::StatusOr<double> train_loss = kiln::examples::RunLoopEpoch(
        **client, device, loop_options, [&](kiln::client::CallCanceller* cancel) {
          return trainer.TrainLoop(steps, batch, cancel);
        });
    if (!train_loss.ok()) return Fail(train_loss.status());
    const double train_seconds = kiln::examples::SecondsSince(start);
    double test_loss = 0, test_correct = 0;
    int64_t seen = 0;
    const int eval_batch = 1000;
    for (int64_t s = 0; s + eval_batch <= test->count; s += eval_batch) {
      auto r = trainer.EvalStep(test->images.data() + s * 784, test->labels.data() + s, eval_batch);
      if (!r.ok()) return Fail(r.status());
      test_loss += r->loss * eval_batch;
      test_correct += r->correct;
      seen += eval_batch;
    }
    std::printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.1f s, "
                "lr %.5f, compiles %lld\n",
                epoch, *train_loss, seen ? test_loss / seen : 0.0,
                seen ? test_correct / seen : 0.0, train_seconds, epoch_lr,
                static_cast<long long>(ctx->metrics().uncached_compiles));
    std::fflush(stdout);
  }
  if (loader) {
    if (absl::Status st = loader->Wait(); !st.ok()) return Fail(st);
  }
  int64_t weights = 0;
  for (const auto& p : (*model)->params()) {
    auto value = p.ToHost();
    if (!value.ok()) return Fail(value.status());
    weights += value->element_count();
  }
  std::printf("fetched the trained weights: %zu tensors, %lld values\n",
              (*model)->params().size(), static_cast<long long>(weights));
  return 0;
}
