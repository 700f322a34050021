#include "examples/fashion_mnist/feeding.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/data_parallel.h"

namespace kiln::examples {

double SecondsSince(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

namespace {

// Writes image `src` (rows x cols) into `dst`, shifted by (dy, dx) and
// mirrored when `flip`, the uncovered pixels set to `background`.
void ShiftImage(const float* src, int rows, int cols, int dy, int dx, bool flip,
                float background, float* dst) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int sr = r - dy;
      int sc = c - dx;
      if (flip) sc = cols - 1 - sc;
      dst[r * cols + c] =
          sr >= 0 && sr < rows && sc >= 0 && sc < cols ? src[sr * cols + sc] : background;
    }
  }
}

}  // namespace

client::InfeedLoader::BatchSource ShuffledBatches(const Dataset* data, int batch,
                                                  int first_epoch, int last_epoch, uint64_t seed,
                                                  bool augment) {
  struct State {
    std::vector<int64_t> order;
    std::mt19937_64 rng;
    int epoch = 0;
    int64_t step = 0;
    float background = 0;
  };
  auto st = std::make_shared<State>();
  st->order.resize(data->count);
  st->epoch = first_epoch - 1;
  // The value a black pixel has after the dataset's standardization.
  if (!data->images.empty()) {
    st->background = *std::min_element(data->images.begin(), data->images.end());
  }
  const int64_t steps = batch > 0 ? data->count / batch : 0;
  const int pixels = data->rows * data->cols;
  return [=]() -> absl::StatusOr<std::optional<std::vector<ir::Literal>>> {
    if (steps == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batches of ", batch, " from ", data->count, " examples: not one full batch"));
    }
    if (st->step == steps || st->epoch < first_epoch) {
      if (st->epoch >= last_epoch) return std::nullopt;
      ++st->epoch;
      st->step = 0;
      st->rng.seed(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(st->epoch));
      std::iota(st->order.begin(), st->order.end(), 0);
      std::shuffle(st->order.begin(), st->order.end(), st->rng);
    }
    ir::Literal x(ir::Shape(ir::ElementType::kF32, {batch, pixels}));
    ir::Literal y(ir::Shape(ir::ElementType::kS32, {batch}));
    float* xs = reinterpret_cast<float*>(x.mutable_bytes().data());
    int32_t* ys = reinterpret_cast<int32_t*>(y.mutable_bytes().data());
    std::uniform_int_distribution<int> shift(-2, 2);
    for (int i = 0; i < batch; ++i) {
      const int64_t k = st->order[st->step * batch + i];
      const float* src = data->images.data() + k * pixels;
      float* dst = xs + static_cast<size_t>(i) * pixels;
      if (augment) {
        const int dy = shift(st->rng), dx = shift(st->rng);
        const bool flip = (st->rng() & 1) != 0;
        ShiftImage(src, data->rows, data->cols, dy, dx, flip, st->background, dst);
      } else {
        std::copy_n(src, pixels, dst);
      }
      ys[i] = data->labels[k];
    }
    ++st->step;
    std::vector<ir::Literal> pair;
    pair.push_back(std::move(x));
    pair.push_back(std::move(y));
    std::vector<ir::Literal> values;
    values.push_back(ir::Literal::Tuple(std::move(pair)));
    return values;
  };
}

namespace {

absl::StatusOr<ir::Literal> ShardOfValue(const ir::Literal& value, int shard, int shards) {
  if (!value.shape().IsTuple()) return client::BatchShard(value, shard, shards);
  std::vector<ir::Literal> parts;
  for (const ir::Literal& e : value.tuple_elements()) {
    ASSIGN_OR_RETURN(ir::Literal part, ShardOfValue(e, shard, shards));
    parts.push_back(std::move(part));
  }
  return ir::Literal::Tuple(std::move(parts));
}

}  // namespace

client::InfeedLoader::BatchSource ShardOf(client::InfeedLoader::BatchSource source, int shard,
                                          int shards) {
  return [source = std::move(source), shard,
          shards]() -> absl::StatusOr<std::optional<std::vector<ir::Literal>>> {
    ASSIGN_OR_RETURN(std::optional<std::vector<ir::Literal>> values, source());
    if (!values.has_value()) return values;
    std::vector<ir::Literal> parts;
    for (const ir::Literal& v : *values) {
      ASSIGN_OR_RETURN(ir::Literal part, ShardOfValue(v, shard, shards));
      parts.push_back(std::move(part));
    }
    return std::optional<std::vector<ir::Literal>>(std::move(parts));
  };
}

absl::StatusOr<double> RunLoopEpoch(
    client::Client& client, const std::string& device, const LoopEpochOptions& options,
    const std::function<absl::Status(client::CallCanceller* cancel)>& run_loop) {
  const auto start = std::chrono::steady_clock::now();
  client::CallCanceller cancel;
  client::OutfeedOptions out_options;
  out_options.max_values = options.steps;
  auto reader = client.OpenOutfeed(device, out_options);
  std::vector<std::unique_ptr<client::OutfeedStream>> others;
  absl::Status read_status = reader.status();
  for (const std::string& other : options.other_devices) {
    if (!read_status.ok()) break;
    auto other_reader = client.OpenOutfeed(other, out_options);
    read_status = other_reader.status();
    if (other_reader.ok()) others.push_back(*std::move(other_reader));
  }
  absl::Status loop_status;
  std::thread runner([&]() {
    loop_status = run_loop(&cancel);
    // A loop that fails before its program runs (while tracing, say)
    // writes no loss: stop the reader waiting for one.
    if (!loop_status.ok() && reader.ok()) (*reader)->Cancel();
    if (!loop_status.ok()) {
      for (auto& other : others) other->Cancel();
    }
  });
  const int log_every = std::max(1, options.log_every);
  double loss_sum = 0, window = 0;
  for (int64_t step = 1; read_status.ok() && step <= options.steps; ++step) {
    auto value = (*reader)->Next();
    if (!value.ok() || !value->has_value()) {
      read_status = value.ok() ? absl::DataLossError("the outfeed ended early") : value.status();
      break;
    }
    for (auto& other : others) {
      auto dropped = other->Next();
      if (!dropped.ok() || !dropped->has_value()) {
        read_status = dropped.ok() ? absl::DataLossError("a replica's outfeed ended early")
                                   : dropped.status();
        break;
      }
    }
    if (!read_status.ok()) break;
    const double loss = (**value).GetAsDouble(0);
    loss_sum += loss;
    window += loss;
    if (step % log_every == 0 || step == options.steps) {
      const int64_t n = (step - 1) % log_every + 1;
      std::printf("  epoch %d step %lld/%lld: loss %.4f (from the outfeed), %.1f steps/s\n",
                  options.epoch, static_cast<long long>(step),
                  static_cast<long long>(options.steps), window / n,
                  step / SecondsSince(start));
      std::fflush(stdout);
      window = 0;
    }
  }
  // A reader that fails stops the program; the program's own error wins.
  if (!read_status.ok()) cancel.Cancel();
  if (reader.ok()) (*reader)->Cancel();
  for (auto& other : others) other->Cancel();
  runner.join();
  if (!loop_status.ok()) return loop_status;
  if (!read_status.ok()) return read_status;
  return options.steps > 0 ? loss_sum / options.steps : 0.0;
}

}  // namespace kiln::examples
