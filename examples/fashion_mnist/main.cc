// Trains an MLP or LeNet-5 on Fashion-MNIST through Kiln.
//
//   fashion_mnist --model=lenet --epochs=5 --server=127.0.0.1:8470
//
// Without --server the service runs embedded in this process.
#include <chrono>
#include <map>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "client/client.h"
#include "client/lazy.h"
#include "embedded/embedded.h"
#include "client/checkpoint.h"
#include "examples/fashion_mnist/mnist.h"
#include "examples/fashion_mnist/trainer.h"
#include "base/logging.h"

ABSL_FLAG(std::string, model, "mlp", "mlp (784-512-512-10) or lenet (LeNet-5)");
ABSL_FLAG(std::string, device, "",
          "device (cpu:0, tpu:0) or device kind (tpu) to train on; default: the server's "
          "default device");
ABSL_FLAG(int, replicas, 1,
          "data-parallel replicas: the first N devices of --device's kind each take 1/N of "
          "every batch");
ABSL_FLAG(int, tpu_cores, 8, "simulated TPU cores of the embedded service (without --server)");
ABSL_FLAG(int, epochs, 5, "passes over the training set");
ABSL_FLAG(int, batch_size, 128, "examples per training step");
ABSL_FLAG(int, eval_batch_size, 1000, "examples per evaluation step");
ABSL_FLAG(double, lr, 0,
          "learning rate; 0: the model's default (SGD: 0.02 for mlp, 0.04 for lenet; Adam: 0.001)");
ABSL_FLAG(std::string, lr_schedule, "cosine",
          "constant, or cosine: the SGD rate decays per epoch as lr * (1 + cos(pi * e / epochs)) / 2");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum (0 for plain SGD)");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd or adam");
ABSL_FLAG(std::string, server, "", "kiln-server address; empty runs the service embedded");
ABSL_FLAG(std::string, servers, "",
          "several kiln-servers (A,B,...) driven as one: their devices read host<i>/<device>, "
          "and --replicas spread over the servers in order (docs/groups.md)");
ABSL_FLAG(std::string, mode, "lazy", "lazy (one barrier per step) or eager (every op runs at once)");
ABSL_FLAG(std::string, pipeline, "auto",
          "lazy mode: true sends each step and traces the next while the device runs it (a "
          "step's loss is read once the next step is sent); false runs steps in turn; auto "
          "pipelines unless the device computes on every core of this machine (then tracing "
          "beside it only takes a core from its team)");
ABSL_FLAG(bool, replay, true,
          "lazy mode on one device: trace the step once (per learning rate and batch shape) and "
          "replay its program on each batch (client::CompiledFunction); false traces every step");
ABSL_FLAG(std::string, data_dir, kiln::examples::kDefaultDataDir, "folder of the idx files");
ABSL_FLAG(int64_t, train_limit, 0, "use only this many training examples (0: all)");
ABSL_FLAG(int64_t, test_limit, 0, "use only this many test examples (0: all)");
ABSL_FLAG(std::string, upload, "pixels",
          "how batches travel: pixels (the file's u8 bytes, standardized on the device) or f32 "
          "(standardized here, four times the bytes)");
ABSL_FLAG(int, log_every, 100, "print a progress line every this many steps");
ABSL_FLAG(uint64_t, seed, 1, "seed of weight initialization and shuffling");
ABSL_FLAG(bool, report, true, "print the lazy tensor metrics report at the end");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "save the weights and the optimizer's state here every --checkpoint_every steps, start from "
          "the newest checkpoint found there, and when the server goes away (a restart), "
          "reconnect and resume from it");
ABSL_FLAG(int64_t, checkpoint_every, 100, "steps between checkpoints");
ABSL_FLAG(int64_t, reconnect_seconds, 120,
          "with --checkpoint_dir: how long to wait for a lost server to come back");

namespace {

using kiln::examples::StepResult;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "fashion_mnist: %s\n", std::string(st.message()).c_str());
  return 1;
}

// Where a run was when it saved: the next step to run is `step` of
// `epoch` (1-based epochs, 0-based steps), with the epoch's sums so far.
struct RunPoint {
  std::string model;
  int epoch = 1;
  int64_t step = 0;
  int64_t global_step = 0;  // steps run since the start of training
  double loss_sum = 0, correct = 0;

  std::map<std::string, std::string> Meta() const {
    return {{"model", model},
            {"epoch", absl::StrCat(epoch)},
            {"step", absl::StrCat(step)},
            {"loss_sum", absl::StrFormat("%.17g", loss_sum)},
            {"correct", absl::StrFormat("%.17g", correct)}};
  }
  static absl::StatusOr<RunPoint> FromMeta(int64_t global_step,
                                           const std::map<std::string, std::string>& meta) {
    RunPoint p;
    p.global_step = global_step;
    auto get = [&](const char* key) {
      auto it = meta.find(key);
      return it == meta.end() ? std::string() : it->second;
    };
    p.model = get("model");
    if (!absl::SimpleAtoi(get("epoch"), &p.epoch) || !absl::SimpleAtoi(get("step"), &p.step) ||
        !absl::SimpleAtod(get("loss_sum"), &p.loss_sum) ||
        !absl::SimpleAtod(get("correct"), &p.correct) || p.epoch < 1 || p.step < 0) {
      return absl::InvalidArgumentError("the checkpoint does not say where the run was");
    }
    return p;
  }
};

// Errors after which a restarted server can take the run over from its
// last checkpoint: the server went away, or it no longer knows the session.
bool ServerLost(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
      return true;
    case absl::StatusCode::kNotFound:
      return absl::StrContains(st.message(), "session");
    default:
      return false;
  }
}

// Trains from the newest checkpoint (or from the start) to the end, on a
// connection of its own.
// Counts in `*saved` the checkpoints it saved.
absl::Status Run(const kiln::examples::Dataset& train, const kiln::examples::Dataset& test,
                 int64_t* saved) {
    const std::string mode = absl::GetFlag(FLAGS_mode);
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int eval_batch = absl::GetFlag(FLAGS_eval_batch_size);
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  absl::StatusOr<std::unique_ptr<kiln::client::Client>> client;
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  if (!servers.empty()) {
    if (!absl::GetFlag(FLAGS_server).empty()) {
      return absl::InvalidArgumentError("give --server or --servers, not both");
    }
    kiln::client::ConnectOptions options;
    options.client_name = "fashion_mnist";
    client = kiln::client::Client::ConnectMesh(servers, options);
  } else if (absl::GetFlag(FLAGS_server).empty()) {
    kiln::embedded::Options embedded;
    // The simulated chip only when asked for, so the default device stays
    // the CPU.
    if (absl::GetFlag(FLAGS_device).rfind("tpu", 0) == 0) {
      embedded.devices = absl::StrCat("cpu:1,tpu:", absl::GetFlag(FLAGS_tpu_cores));
    }
    client = kiln::embedded::Connect(embedded);
  } else {
    kiln::client::ConnectOptions options;
    options.client_name = "fashion_mnist";
    client = kiln::client::Client::Connect(absl::GetFlag(FLAGS_server), options);
  }
  if (!client.ok()) return client.status();
  if (!(*client)->security_warning().empty()) {
    std::printf("the server warns: %s\n", (*client)->security_warning().c_str());
  }
  const int replicas = absl::GetFlag(FLAGS_replicas);
  std::vector<std::string> replica_devices;
  std::string device = kiln::examples::TrainingDevice(**client, absl::GetFlag(FLAGS_device));
  if (replicas > 1 || device.find(':') == std::string::npos) {
    auto devices = kiln::examples::ReplicaDevices(**client, absl::GetFlag(FLAGS_device), replicas);
    if (!devices.ok()) return devices.status();
    replica_devices = *devices;
    device = replica_devices[0];
  }
  if (batch % replicas != 0 || eval_batch % replicas != 0) {
    return absl::InvalidArgumentError("batch sizes must be multiples of --replicas");
  }
  double base_lr = absl::GetFlag(FLAGS_lr);
  if (base_lr <= 0) {
    base_lr = kiln::examples::DefaultLearningRate(absl::GetFlag(FLAGS_model),
                                                  absl::GetFlag(FLAGS_optimizer));
  }
  std::printf("training %s on %s%s (%s mode, %s, batch %d, lr %g)%s\n",
              absl::GetFlag(FLAGS_model).c_str(), device.c_str(),
              replicas > 1 ? absl::StrFormat(" and %d more replicas", replicas - 1).c_str() : "",
              mode.c_str(),
              absl::GetFlag(FLAGS_optimizer).c_str(), batch, base_lr,
              !servers.empty()
                  ? (" through the kiln-servers at " + absl::GetFlag(FLAGS_servers)).c_str()
              : absl::GetFlag(FLAGS_server).empty()
                  ? " on an embedded service"
                  : (" through kiln-server at " + absl::GetFlag(FLAGS_server)).c_str());

  auto ctx = kiln::client::LazyContext::Create(client->get());
  auto model = kiln::examples::MakeModel(absl::GetFlag(FLAGS_model), ctx.get(), device,
                                         absl::GetFlag(FLAGS_seed));
  if (!model.ok()) return model.status();
  ctx->set_eager(mode == "eager");
  const std::string pipeline = absl::GetFlag(FLAGS_pipeline);
  ctx->set_pipelined(mode == "lazy" &&
                     (pipeline == "true" ||
                      (pipeline == "auto" && !(*client)->ComputeFillsSharedCores(device))));
  if (mode == "lazy") {
    std::printf("  steps %s\n", ctx->pipelined()
                                    ? "pipelined: the next is traced while the device runs one"
                                    : "in turn: each is traced, sent and read before the next");
  }
  kiln::examples::TrainerOptions options;
  options.optimizer = absl::GetFlag(FLAGS_optimizer);
  options.learning_rate = base_lr;
  options.momentum = absl::GetFlag(FLAGS_momentum);
  options.replica_devices = replica_devices;
  options.replay = absl::GetFlag(FLAGS_replay);
  kiln::examples::Trainer trainer(ctx.get(), model->get(), device, options);
  const std::string schedule = absl::GetFlag(FLAGS_lr_schedule);
  if (schedule != "constant" && schedule != "cosine") {
    return absl::InvalidArgumentError("--lr_schedule must be constant or cosine");
  }
  const bool cosine = schedule == "cosine";

  // Where to start: the newest checkpoint, if there is one.
  RunPoint start;
  start.model = absl::GetFlag(FLAGS_model);
  // The tensors a checkpoint holds, by name, where they are now (a step
  // replaces the vectors that hold them).
  auto state = [&] {
    std::vector<std::pair<std::string, kiln::client::Tensor*>> named;
    for (size_t i = 0; i < (*model)->params().size(); ++i) {
      named.emplace_back(absl::StrCat("param_", i), &(*model)->params()[i]);
    }
    for (const auto& s : trainer.optimizer_state()) named.push_back(s);
    return named;
  };
  if (!checkpoint_dir.empty()) {
    absl::StatusOr<std::optional<kiln::client::Checkpoint>> found =
        kiln::client::LoadLatestCheckpoint(checkpoint_dir);
    if (!found.ok()) return found.status();
    if (found->has_value()) {
      const kiln::client::Checkpoint& c = **found;
      absl::StatusOr<RunPoint> point = RunPoint::FromMeta(c.step, c.meta);
      if (!point.ok()) return point.status();
      if (point->model != start.model) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the checkpoint in ", checkpoint_dir, " is of another model (", point->model, ")"));
      }
      RETURN_IF_ERROR(kiln::client::RestoreTensors(c, state(), ctx.get(), device));
      start = *point;
      std::printf("resumed from the checkpoint of step %lld (epoch %d, step %lld)\n",
                  static_cast<long long>(start.global_step), start.epoch,
                  static_cast<long long>(start.step));
    }
  }

  // Whole batches only, so every step has the same shapes (one compile).
  const int64_t steps = train.count / batch;
  if (steps == 0) return absl::InvalidArgumentError("fewer training images than one batch");
  std::vector<int64_t> order(train.count);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  // The epochs already done drew their orders from the same generator.
  for (int epoch = 1; epoch < start.epoch; ++epoch) std::shuffle(order.begin(), order.end(), rng);
  const bool upload_pixels = absl::GetFlag(FLAGS_upload) == "pixels";
  std::vector<float> images(upload_pixels ? 0 : size_t(batch) * 784);
  std::vector<uint8_t> pixels(upload_pixels ? size_t(batch) * 784 : 0);
  std::vector<int32_t> labels(batch);
  const int log_every = std::max(1, absl::GetFlag(FLAGS_log_every));
  const int64_t checkpoint_every = std::max<int64_t>(1, absl::GetFlag(FLAGS_checkpoint_every));
  // Saves the weights as they are now (nothing in flight) with `point`.
  auto save = [&](const RunPoint& point) -> absl::Status {
    const std::vector<std::pair<std::string, kiln::client::Tensor*>> now = state();
    std::vector<std::pair<std::string, const kiln::client::Tensor*>> tensors(now.begin(),
                                                                           now.end());
    RETURN_IF_ERROR(
        kiln::client::SaveCheckpoint(checkpoint_dir, point.global_step, tensors, point.Meta()));
    ++*saved;
    std::printf("  checkpoint of step %lld saved in %s\n",
                static_cast<long long>(point.global_step), checkpoint_dir.c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  };
  for (int epoch = start.epoch; epoch <= absl::GetFlag(FLAGS_epochs); ++epoch) {
    const bool resumed_epoch = epoch == start.epoch;
    const int64_t first_step = resumed_epoch ? start.step : 0;
    const auto epoch_start = std::chrono::steady_clock::now();
    if (cosine) {
      const double lr =
          kiln::examples::CosineLearningRate(base_lr, epoch, absl::GetFlag(FLAGS_epochs));
      trainer.SetLearningRate(lr);
      std::printf("epoch %d: learning rate %.5f\n", epoch, lr);
    }
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = resumed_epoch ? start.loss_sum : 0;
    double correct = resumed_epoch ? start.correct : 0;
    double window_loss = 0, window_correct = 0;
    double first_step_seconds = -1;  // with the compile of the step's program
    // Accounts for step `step`'s result and prints progress.
    auto account = [&](int64_t step, const StepResult& r) {
      if (first_step_seconds < 0) first_step_seconds = Seconds(epoch_start);
      loss_sum += r.loss;
      correct += r.correct;
      window_loss += r.loss;
      window_correct += r.correct;
      if ((step + 1) % log_every == 0 || step + 1 == steps) {
        const int64_t n = std::min<int64_t>((step % log_every) + 1, step + 1 - first_step);
        std::printf("  epoch %d step %lld/%lld: loss %.4f, accuracy %.4f, %.1f steps/s",
                    epoch, static_cast<long long>(step + 1), static_cast<long long>(steps),
                    window_loss / n, window_correct / (n * batch),
                    (step + 1 - first_step) / Seconds(epoch_start));
        const auto& profile = ctx->metrics().last_profile;
        if (profile.has_value()) {
          // What the step would take on the chip, next to what it took here.
          std::printf(", step wall %.2f ms, simulated %.3f ms (matrix units %.1f%% busy)",
                      1e3 * Seconds(epoch_start) / (step + 1 - first_step),
                      1e3 * profile->simulated_seconds(), 100 * profile->matrix_utilization());
        }
        std::printf("\n");
        std::fflush(stdout);
        window_loss = window_correct = 0;
      }
    };
    // Pipelined, a step's loss is read once the next step is sent, so the
    // device runs one step while this thread prepares the next.
    std::optional<kiln::examples::PendingStep> previous;
    // Reads `previous`, the step numbered `step`, and accounts for it.
    auto read_previous = [&](int64_t step) -> absl::Status {
      absl::StatusOr<StepResult> r = kiln::examples::Trainer::ReadStep(*previous);
      previous.reset();
      if (!r.ok()) return r.status();
      account(step, *r);
      return absl::OkStatus();
    };
    for (int64_t step = first_step; step < steps; ++step) {
      for (int i = 0; i < batch; ++i) {
        const int64_t k = order[step * batch + i];
        if (upload_pixels) {
          std::copy_n(train.pixels.begin() + k * 784, 784, pixels.begin() + size_t(i) * 784);
        } else {
          std::copy_n(train.images.begin() + k * 784, 784, images.begin() + size_t(i) * 784);
        }
        labels[i] = train.labels[k];
      }
      absl::StatusOr<kiln::examples::PendingStep> sent =
          upload_pixels ? trainer.StartStep(pixels.data(), labels.data(), batch)
                        : trainer.StartStep(images.data(), labels.data(), batch);
      if (!sent.ok()) return sent.status();
      if (previous.has_value()) RETURN_IF_ERROR(read_previous(step - 1));
      previous = *std::move(sent);
      const int64_t global_step = (epoch - 1) * steps + step + 1;
      // The last step's checkpoint waits for the epoch's evaluation, so a
      // run resumed from it does not skip that.
      const bool checkpoint = !checkpoint_dir.empty() && global_step % checkpoint_every == 0;
      if (!ctx->pipelined() || step + 1 == steps || checkpoint) {
        RETURN_IF_ERROR(read_previous(step));
      }
      if (checkpoint && step + 1 < steps) {
        RETURN_IF_ERROR(save({start.model, epoch, step + 1, global_step, loss_sum, correct}));
      }
    }
    const double train_seconds = Seconds(epoch_start);
    double test_loss = 0, test_correct = 0;
    int64_t test_seen = 0;
    // The evaluation takes no gradients: in eager mode its values then keep
    // no graphs.
    kiln::client::NoGradients evaluating(*ctx);
    for (int64_t from = 0; from + eval_batch <= test.count; from += eval_batch) {
      const int32_t* eval_labels = test.labels.data() + from;
      absl::StatusOr<StepResult> r =
          upload_pixels
              ? trainer.EvalStep(test.pixels.data() + from * 784, eval_labels, eval_batch)
              : trainer.EvalStep(test.images.data() + from * 784, eval_labels, eval_batch);
      if (!r.ok()) return r.status();
      test_loss += r->loss * eval_batch;
      test_correct += r->correct;
      test_seen += eval_batch;
    }
    std::printf(
        "epoch %d: train loss %.4f, train accuracy %.4f, test loss %.4f, test accuracy %.4f, "
        "%.2f s, compiles %lld, first step %.3f s\n",
        epoch, loss_sum / steps, correct / (steps * batch),
        test_seen ? test_loss / test_seen : 0.0, test_seen ? test_correct / test_seen : 0.0,
        train_seconds, static_cast<long long>(ctx->metrics().uncached_compiles),
        std::max(0.0, first_step_seconds));
    std::fflush(stdout);
    if (!checkpoint_dir.empty() && (epoch * steps) % checkpoint_every == 0) {
      RETURN_IF_ERROR(save({start.model, epoch + 1, 0, epoch * steps, 0, 0}));
    }
  }
  if (absl::GetFlag(FLAGS_report)) std::printf("%s", ctx->Report().c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  kiln::ParseFlags(argc, argv,
                   "fashion_mnist: trains a Fashion-MNIST classifier through Kiln. "
                   "Usage: fashion_mnist [--flag=value ...]");
  if (std::getenv("KILN_LOG_LEVEL") == nullptr) kiln::logging::SetLevel("warn").IgnoreError();
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "lazy" && mode != "eager") {
    return Fail(absl::InvalidArgumentError("--mode must be lazy or eager"));
  }
  const std::string pipeline = absl::GetFlag(FLAGS_pipeline);
  if (pipeline != "auto" && pipeline != "true" && pipeline != "false") {
    return Fail(absl::InvalidArgumentError("--pipeline must be auto, true or false"));
  }
  const std::string upload = absl::GetFlag(FLAGS_upload);
  if (upload != "pixels" && upload != "f32") {
    return Fail(absl::InvalidArgumentError("--upload must be pixels or f32"));
  }
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int eval_batch = absl::GetFlag(FLAGS_eval_batch_size);
  if (batch < 1 || eval_batch < 1) return Fail(absl::InvalidArgumentError("batch sizes must be positive"));
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (!checkpoint_dir.empty() &&
      absl::GetFlag(FLAGS_replicas) > 1) {
    return Fail(absl::InvalidArgumentError(
        "--checkpoint_dir saves the state of one device: no --replicas"));
  }

  std::printf("loading Fashion-MNIST from %s\n", absl::GetFlag(FLAGS_data_dir).c_str());
  auto train = kiln::examples::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "train",
                                                absl::GetFlag(FLAGS_train_limit));
  if (!train.ok()) return Fail(train.status());
  auto test = kiln::examples::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "t10k",
                                               absl::GetFlag(FLAGS_test_limit));
  if (!test.ok()) return Fail(test.status());
  std::printf("  %lld training and %lld test images\n", static_cast<long long>(train->count),
              static_cast<long long>(test->count));
  // Resumes that saved nothing: a run that cannot get past its checkpoint
  // gives up instead of trying forever.
  int fruitless = 0;
  while (true) {
    int64_t saved = 0;
    const absl::Status st = Run(*train, *test, &saved);
    if (st.ok()) return 0;
    if (checkpoint_dir.empty() || absl::GetFlag(FLAGS_server).empty() || !ServerLost(st)) {
      return Fail(st);
    }
    fruitless = saved > 0 ? 0 : fruitless + 1;
    if (fruitless > 3) {
      std::fprintf(stderr, "fashion_mnist: four resumes in a row saved no checkpoint\n");
      return Fail(st);
    }
    // The server went away (a crash, a restart): wait for it to come back,
    // then go on from the last checkpoint.
    std::printf("lost the server (%s); waiting up to %lld s for it to come back\n",
                std::string(st.message()).c_str(),
                static_cast<long long>(absl::GetFlag(FLAGS_reconnect_seconds)));
    std::fflush(stdout);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::seconds(absl::GetFlag(FLAGS_reconnect_seconds));
    bool back = false;
    while (!back && std::chrono::steady_clock::now() < deadline) {
      kiln::client::ConnectOptions probe;
      probe.client_name = "fashion_mnist";
      probe.connect_timeout = absl::Seconds(2);
      back = kiln::client::Client::Connect(absl::GetFlag(FLAGS_server), probe).ok();
      if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (!back) return Fail(st);
    std::printf("the server is back\n");
  }
}
