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
#include <numeric>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "client/client.h"
#include "client/feeds.h"
#include "client/lazy.h"
#include "embedded/embedded.h"
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

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "infeed_training: %s\n", st.ToString().c_str());
  return 1;
}

// Batches of every epoch in a shuffled order, each one infeed value: the
// tuple (images, labels).
kiln::client::InfeedLoader::BatchSource Batches(const Dataset* data, int batch, int epochs,
                                                uint64_t seed) {
  struct State {
    std::vector<int64_t> order;
    std::mt19937_64 rng;
    int epoch = 0;
    int64_t step = 0;
  };
  auto st = std::make_shared<State>();
  st->order.resize(data->count);
  std::iota(st->order.begin(), st->order.end(), 0);
  st->rng.seed(seed);
  const int64_t steps = data->count / batch;
  return [=]() -> absl::StatusOr<std::optional<std::vector<kiln::ir::Literal>>> {
    if (st->step == steps || st->epoch == 0) {
      if (st->epoch == epochs) return std::nullopt;
      ++st->epoch;
      st->step = 0;
      std::shuffle(st->order.begin(), st->order.end(), st->rng);
    }
    kiln::ir::Literal x(kiln::ir::Shape(kiln::ir::ElementType::kF32, {batch, 784}));
    kiln::ir::Literal y(kiln::ir::Shape(kiln::ir::ElementType::kS32, {batch}));
    float* xs = reinterpret_cast<float*>(x.mutable_bytes().data());
    int32_t* ys = reinterpret_cast<int32_t*>(y.mutable_bytes().data());
    for (int i = 0; i < batch; ++i) {
      const int64_t k = st->order[st->step * batch + i];
      std::copy_n(data->images.begin() + k * 784, 784, xs + size_t(i) * 784);
      ys[i] = data->labels[k];
    }
    ++st->step;
    std::vector<kiln::ir::Literal> pair;
    pair.push_back(std::move(x));
    pair.push_back(std::move(y));
    std::vector<kiln::ir::Literal> values;
    values.push_back(kiln::ir::Literal::Tuple(std::move(pair)));
    return values;
  };
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
      *std::move(stream), Batches(&train, batch, epochs, absl::GetFlag(FLAGS_seed) + 1),
      absl::GetFlag(FLAGS_prefetch));
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = loader.Wait();
  std::printf("producer: %lld batches written to the stream in %.1f s%s\n",
              static_cast<long long>(loader.batches_written()), Seconds(start),
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
        *std::move(stream), Batches(&*train, batch, epochs, absl::GetFlag(FLAGS_seed) + 1),
        absl::GetFlag(FLAGS_prefetch));
  }
  std::printf("training %s on %s in loop mode: %lld steps per program, batch %d, lr %g%s\n",
              absl::GetFlag(FLAGS_model).c_str(), device.c_str(), static_cast<long long>(steps),
              batch, lr,
              absl::GetFlag(FLAGS_server).empty()
                  ? " (embedded service)"
                  : (" through kiln-server at " + absl::GetFlag(FLAGS_server)).c_str());
  std::fflush(stdout);

  const int log_every = std::max(1, absl::GetFlag(FLAGS_log_every));
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const double epoch_lr = kiln::examples::CosineLearningRate(lr, epoch, epochs);
    trainer.SetLearningRate(epoch_lr);
    const auto start = std::chrono::steady_clock::now();
    kiln::client::CallCanceller cancel;
    absl::Status loop_status;
    std::thread runner([&]() { loop_status = trainer.TrainLoop(steps, batch, &cancel); });
    kiln::client::OutfeedOptions out_options;
    out_options.max_values = steps;
    auto reader = (*client)->OpenOutfeed(device, out_options);
    absl::Status read_status = reader.status();
    double loss_sum = 0, window = 0;
    for (int64_t step = 1; read_status.ok() && step <= steps; ++step) {
      auto value = (*reader)->Next();
      if (!value.ok() || !value->has_value()) {
        read_status = value.ok() ? absl::DataLossError("the outfeed ended early") : value.status();
        break;
      }
      const double loss = (**value).GetAsDouble(0);
      loss_sum += loss;
      window += loss;
      if (step % log_every == 0 || step == steps) {
        const int64_t n = (step - 1) % log_every + 1;
        std::printf("  epoch %d step %lld/%lld: loss %.4f (from the outfeed), %.1f steps/s\n",
                    epoch, static_cast<long long>(step), static_cast<long long>(steps),
                    window / n, step / Seconds(start));
        std::fflush(stdout);
        window = 0;
      }
    }
    // A reader that fails stops the program; the program's own error wins.
    if (!read_status.ok()) cancel.Cancel();
    if (reader.ok()) (*reader)->Cancel();
    runner.join();
    if (!loop_status.ok()) return Fail(loop_status);
    if (!read_status.ok()) return Fail(read_status);
    const double train_seconds = Seconds(start);
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
                epoch, loss_sum / steps, seen ? test_loss / seen : 0.0,
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
