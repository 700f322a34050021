// The TPU simulator against published TPU v3 figures, in one table:
// workload, published figure and its source, the simulator's prediction,
// and their ratio (predicted time over published time; above 1 the
// simulator is pessimistic). Every prediction is a dry run: the server
// compiles and prices each program (LazyContext::Estimate,
// Client::Estimate) and runs none, so a ResNet-50 training step at batch
// 128 per core is priced in seconds on a laptop.
//
//   tpusim_validation [BATCH=128] [CHIP_CONFIG_FILE]
//
// Rows:
//  1. ResNet-50 inference, batch 128 per core, bf16 storage: MLPerf
//     Inference v0.5, Google, tpu-v3.8x1, ResNet-50 offline: 32,716
//     images/s per v3-8.
//  2. ResNet-50 training step, batch 128 per core (1024 per v3-8), bf16
//     storage, SGD with momentum, gradients all-reduced over 8 replicas:
//     MLPerf Training v0.5, Google cloud_v3.8: about 7,450 images/s.
//  3. A bf16 matmul of 8192^3: the Cloud TPU v3 documentation's 123
//     TFLOP/s per chip, 61.5 per core (the peak: no measured figure).
//  4. An all-reduce of ResNet-50's f32 gradients (25,557,032 values) over
//     the 8 cores: the bandwidth bound 2 (N-1)/N b / W over the N = 4 chips,
//     W the all-reduce bandwidth per chip of the Cloud TPU v3 documentation
//     (340 TB/s per 1024-chip pod).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "client/autodiff.h"
#include "client/client.h"
#include "client/lazy.h"
#include "client/nn.h"
#include "client/optimizers.h"
#include "compiler/ir/hlo_parser.h"
#include "embedded/embedded.h"

namespace {

namespace client = kiln::client;
namespace nn = kiln::client::nn;
using client::Tensor;

constexpr char kDevice[] = "tpu:0";

// Batch normalization as XLA expands the batch-norm-training op that
// MLPerf's TensorFlow ResNet-50 emits (fused_batch_norm): the statistics in
// one pass, var = E[x^2] - E[x]^2, so the two reductions read x together.
// (nn::BatchNorm subtracts the mean before squaring: two passes, more
// exact, and more HBM traffic.) Training mode only; inference uses the
// running statistics as nn::BatchNorm does.
class OnePassBatchNorm : public nn::Module {
 public:
  OnePassBatchNorm(client::LazyContext* ctx, int64_t features) {
    const std::vector<float> ones(features, 1.0f), zeros(features, 0.0f);
    gamma_ = &RegisterParameter(
        "gamma", ctx->FromVector<float>(kiln::ir::ElementType::kF32, {features}, ones, kDevice));
    beta_ = &RegisterParameter(
        "beta", ctx->FromVector<float>(kiln::ir::ElementType::kF32, {features}, zeros, kDevice));
    mean_ = &RegisterBuffer("running_mean", ctx->FromVector<float>(kiln::ir::ElementType::kF32,
                                                                   {features}, zeros, kDevice));
    var_ = &RegisterBuffer("running_var", ctx->FromVector<float>(kiln::ir::ElementType::kF32,
                                                                 {features}, ones, kDevice));
  }
  Tensor Forward(const Tensor& x) {
    Tensor mean = *mean_, var = *var_;
    if (training()) {
      const std::vector<int64_t> dims = {0, 1, 2};
      mean = client::Mean(x, dims);
      var = client::Mean(x * x, dims) - mean * mean;
      *mean_ = *mean_ * 0.9 + mean * 0.1;
      *var_ = *var_ * 0.9 + var * 0.1;
    }
    return (x - mean) * (client::Rsqrt(var + 1e-5) * *gamma_) + *beta_;
  }

 private:
  Tensor *gamma_, *beta_, *mean_, *var_;
};

// ResNet-50's bottleneck: 1x1 (width), 3x3 (width, stride), 1x1 (4 x
// width), batch norm after each, a projected shortcut where the shape
// changes.
class Bottleneck : public nn::Module {
 public:
  Bottleneck(client::LazyContext* ctx, int64_t in, int64_t width, int stride, uint64_t seed)
      : conv1_(ctx, kDevice, in, width, 1, seed, {.bias = false}),
        conv2_(ctx, kDevice, width, width, 3, seed + 1, {.stride = stride, .bias = false}),
        conv3_(ctx, kDevice, width, 4 * width, 1, seed + 2, {.bias = false}),
        bn1_(ctx, width),
        bn2_(ctx, width),
        bn3_(ctx, 4 * width) {
    RegisterModule("conv1", &conv1_);
    RegisterModule("bn1", &bn1_);
    RegisterModule("conv2", &conv2_);
    RegisterModule("bn2", &bn2_);
    RegisterModule("conv3", &conv3_);
    RegisterModule("bn3", &bn3_);
    if (stride != 1 || in != 4 * width) {
      projection_ = std::make_unique<nn::Conv2d>(ctx, kDevice, in, 4 * width, 1, seed + 3,
                                                 nn::Conv2dOptions{.stride = stride, .bias = false});
      projection_bn_ = std::make_unique<OnePassBatchNorm>(ctx, 4 * width);
      RegisterModule("projection", projection_.get());
      RegisterModule("projection_bn", projection_bn_.get());
    }
  }
  Tensor Forward(const Tensor& x) {
    Tensor y = client::Relu(bn1_.Forward(conv1_.Forward(x)));
    y = client::Relu(bn2_.Forward(conv2_.Forward(y)));
    y = bn3_.Forward(conv3_.Forward(y));
    Tensor shortcut = projection_ ? projection_bn_->Forward(projection_->Forward(x)) : x;
    return client::Relu(y + shortcut);
  }

 private:
  nn::Conv2d conv1_, conv2_, conv3_;
  OnePassBatchNorm bn1_, bn2_, bn3_;
  std::unique_ptr<nn::Conv2d> projection_;
  std::unique_ptr<OnePassBatchNorm> projection_bn_;
};

class ResNet50 : public nn::Module {
 public:
  explicit ResNet50(client::LazyContext* ctx)
      : stem_(ctx, kDevice, 3, 64, 7, 1, {.stride = 2, .bias = false}),
        stem_bn_(ctx, 64),
        head_(ctx, kDevice, 2048, 1000, 2) {
    RegisterModule("stem", &stem_);
    RegisterModule("stem_bn", &stem_bn_);
    int64_t in = 64;
    uint64_t seed = 10;
    const int blocks[] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t width = int64_t{64} << stage;
      for (int b = 0; b < blocks[stage]; ++b) {
        const int stride = stage > 0 && b == 0 ? 2 : 1;
        blocks_.push_back(std::make_unique<Bottleneck>(ctx, in, width, stride, seed));
        seed += 4;
        in = 4 * width;
        RegisterModule(absl::StrCat("stage", stage, ".block", b), blocks_.back().get());
      }
    }
    RegisterModule("head", &head_);
  }
  Tensor Forward(const Tensor& images) {
    Tensor x = client::Relu(stem_bn_.Forward(stem_.Forward(images)));
    x = client::MaxPool2D(x, 3, 2, "SAME");
    for (auto& block : blocks_) x = block->Forward(x);
    return head_.Forward(nn::GlobalAvgPool2D(x));
  }

 private:
  nn::Conv2d stem_;
  OnePassBatchNorm stem_bn_;
  std::vector<std::unique_ptr<Bottleneck>> blocks_;
  nn::Linear head_;
};

void Fail(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "tpusim_validation: %s: %s\n", what, std::string(status.message()).c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Fail(v.status(), what);
  return *std::move(v);
}

// Predicted seconds of an HLO module run once over `replicas` replicas.
kiln::v1::ExecutionProfileProto EstimateText(client::Client& c, const std::string& text,
                                             int replicas) {
  auto module = Check(kiln::ir::ParseModule(text), "parsing");
  return Check(c.Estimate(*module, kDevice, replicas), "pricing");
}

struct Row {
  std::string workload, published, source;
  double published_seconds, predicted_seconds;  // per the same unit of work
  std::string predicted;
};

void Print(const std::vector<Row>& rows) {
  std::printf("\n| workload | published | source | simulated | ratio |\n|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %s | %s | %.2f |\n", r.workload.c_str(), r.published.c_str(),
                r.source.c_str(), r.predicted.c_str(), r.predicted_seconds / r.published_seconds);
  }
}

void PrintParts(const char* what, const kiln::v1::ExecutionProfileProto& p) {
  std::printf("%s: %.3f ms = matrix %.3f + vector %.3f + hbm %.3f + interconnect %.3f + feeds "
              "%.3f; matrix-unit utilization %.1f%%, %.2f GB of HBM traffic, padding waste "
              "%.1f%%\n",
              what, p.simulated_seconds() * 1e3, p.matrix_seconds() * 1e3,
              p.vector_seconds() * 1e3, p.hbm_seconds() * 1e3, p.interconnect_seconds() * 1e3,
              p.infeed_seconds() * 1e3, 100 * p.matrix_utilization(), p.hbm_bytes() / 1e9,
              100 * p.padding_waste());
}

}  // namespace

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv,
                   "usage: tpusim_validation [BATCH=128] [CHIP_CONFIG_FILE]\n"
                   "The simulated TPU v3-8 against published figures (dry runs: nothing "
                   "executes).");
  const int64_t batch = argc > 1 ? std::max(1, std::atoi(argv[1])) : 128;
  const std::string chip = argc > 2 ? argv[2] : "";

  kiln::embedded::Options options;
  options.devices = "cpu:1,tpu:8";
  if (!chip.empty()) options.backend_config = absl::StrCat("tpu.config=", chip);
  std::unique_ptr<client::Client> c = Check(kiln::embedded::Connect(options), "starting");
  auto ctx = client::LazyContext::Create(c.get());
  std::vector<Row> rows;

  std::printf("building ResNet-50 (batch %lld per core, 224x224x3, bf16 storage)...\n",
              static_cast<long long>(batch));
  ResNet50 model(ctx.get());
  client::Sgd sgd(0.1, 0.9);
  std::vector<float> pixels(batch * 224 * 224 * 3, 0.5f);
  Tensor images =
      ctx->FromVector<float>(kiln::ir::ElementType::kF32, {batch, 224, 224, 3}, pixels, kDevice)
          .ToReducedPrecision();
  std::vector<int32_t> ids(batch);
  for (int64_t i = 0; i < batch; ++i) ids[i] = static_cast<int32_t>(i % 1000);
  Tensor labels = client::OneHot(
      ctx->FromVector<int32_t>(kiln::ir::ElementType::kS32, {batch}, ids, kDevice), 1000)
      .ToReducedPrecision();
  if (absl::Status st = nn::ToReducedPrecision(model.NamedParameters()); !st.ok()) {
    Fail(st, "converting the model");
  }
  if (absl::Status st = nn::ToReducedPrecision(model.NamedBuffers()); !st.ok()) {
    Fail(st, "converting the model");
  }

  // 1. Inference.
  model.Train(false);
  std::printf("pricing inference...\n");
  const auto inference = Check(ctx->Estimate({model.Forward(images)}), "pricing inference");
  PrintParts("inference step", inference);
  const double published_inference = 8.0 / 32716;  // seconds per image per core
  rows.push_back({"ResNet-50 inference, batch " + std::to_string(batch) + " per core, bf16",
                  "32,716 images/s per v3-8 (0.245 ms per image per core)",
                  "MLPerf Inference v0.5, Google tpu-v3.8x1, ResNet-50 offline",
                  published_inference, inference.simulated_seconds() / batch,
                  absl::StrFormat("%.3f ms per image per core",
                                  1e3 * inference.simulated_seconds() / batch)});

  // 2. A data-parallel training step on the 8 cores.
  model.Train(true);
  std::printf("tracing and pricing a training step...\n");
  Tensor loss = client::SoftmaxCrossEntropy(model.Forward(images), labels);
  std::vector<Tensor> grads = Check(client::Grad(loss, model.Parameters()), "gradients");
  for (Tensor& g : grads) g = client::CrossReplicaSum(g) * (1.0 / 8);
  std::vector<Tensor> updated = Check(sgd.Step(model.Parameters(), grads), "sgd");
  updated.push_back(loss);
  const auto training = Check(ctx->Estimate(updated, 8), "pricing training");
  PrintParts("training step", training);
  const double global_batch = 8.0 * batch;
  rows.push_back({"ResNet-50 training step, batch " + std::to_string(batch) +
                      " per core on 8 cores, bf16",
                  "about 7,450 images/s per v3-8", "MLPerf Training v0.5, Google cloud_v3.8",
                  1.0 / 7450, training.simulated_seconds() / global_batch,
                  absl::StrFormat("%.0f images/s", global_batch / training.simulated_seconds())});

  // 3. A large bf16 matmul.
  const auto matmul = EstimateText(*c, R"(HloModule matmul
ENTRY main {
  a = bf16[8192,8192] parameter(0)
  b = bf16[8192,8192] parameter(1)
  ROOT d = bf16[8192,8192] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})", 1);
  PrintParts("bf16 matmul 8192^3", matmul);
  const double flops = 2.0 * 8192 * 8192 * 8192;
  rows.push_back({"bf16 matmul 8192x8192x8192, one core", "61.5 TFLOP/s per core (peak)",
                  "Cloud TPU v3 documentation: 123 TFLOP/s per chip", flops / 61.5e12,
                  matmul.simulated_seconds(),
                  absl::StrFormat("%.1f TFLOP/s", flops / matmul.simulated_seconds() / 1e12)});

  // 4. The gradients' all-reduce.
  const int64_t values = 25557032;
  const auto all_reduce = EstimateText(*c, absl::StrCat(R"(HloModule allreduce
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  g = f32[)", values, R"(] parameter(0)
  ROOT r = f32[)", values, R"(] all-reduce(g), replica_groups={}, to_apply=sum
})"), 8);
  PrintParts("all-reduce of ResNet-50's gradients", all_reduce);
  const double bytes = 4.0 * values;
  const double bound = 2.0 * 3 / 4 * bytes / (340e12 / 1024);
  rows.push_back({"all-reduce of ResNet-50's f32 gradients (102 MB), 8 cores",
                  absl::StrFormat("%.3f ms (bandwidth bound)", bound * 1e3),
                  "Cloud TPU v3 documentation: 340 TB/s all-reduce bandwidth per 1024 chips",
                  bound, all_reduce.simulated_seconds(),
                  absl::StrFormat("%.3f ms", all_reduce.simulated_seconds() * 1e3)});
  Print(rows);
  return 0;
}
