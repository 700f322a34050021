// Replicated execution from the lazy client: CrossReplicaSum and the
// data-parallel helper, on simulated TPU cores and on CPU devices.
#include "client/data_parallel.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/autodiff.h"
#include "client/loop.h"
#include "client/optimizers.h"
#include "embedded/embedded.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using ir::Shape;
using ::testing::HasSubstr;

std::vector<double> Values(const ir::Literal& lit) {
  std::vector<double> out;
  for (int64_t i = 0; i < lit.element_count(); ++i) out.push_back(lit.GetAsDouble(i));
  return out;
}

std::vector<std::string> Devices(const std::string& kind, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(kind + ":" + std::to_string(i));
  return out;
}

ir::Literal Random(Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0, 1);
  ir::Literal lit(shape);
  for (int64_t i = 0; i < shape.ElementCount(); ++i) lit.SetFromDouble(i, dist(rng));
  return lit;
}

class DataParallelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    embedded::Options options;
    options.devices = "cpu:4,tpu:4";
    client_ = *embedded::Connect(options);
    ctx_ = LazyContext::Create(client_.get());
  }
  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

TEST_P(DataParallelTest, CrossReplicaSumOfIdenticalInputsIsNTimesTheValue) {
  DataParallel dp(ctx_.get(), Devices(GetParam(), 4));
  Tensor x = ctx_->FromVector<float>(ElementType::kF32, {3}, std::vector<float>{1, -2, 0.5},
                                     dp.lead_device());
  auto replicated = dp.Replicate(x);
  ASSERT_TRUE(replicated.ok()) << replicated.status();
  Tensor sum = CrossReplicaSum(*replicated);
  ASSERT_TRUE(ctx_->Barrier(dp.lead_device()).ok());
  EXPECT_EQ(sum.replica_count(), 4);
  auto every = dp.CheckInStep(sum);
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_THAT(Values(*every), ::testing::ElementsAre(4, -8, 2));
  // Not replicated: the program runs once and the sum is the value.
  Tensor once = CrossReplicaSum(x);
  EXPECT_THAT(Values(*once.ToHost()), ::testing::ElementsAre(1, -2, 0.5));
}

// The small two-layer classifier's parameters on `device`, and its loss.
std::vector<Tensor> InitialParams(LazyContext* ctx, const std::string& device) {
  return {ctx->FromLiteral(Random(Shape(ElementType::kF32, {8, 16}), 1), device),
          ctx->FromLiteral(ir::Literal(Shape(ElementType::kF32, {16})), device),
          ctx->FromLiteral(Random(Shape(ElementType::kF32, {16, 3}), 2), device)};
}

Tensor ClassifierLoss(const std::vector<Tensor>& params, const Tensor& x, const Tensor& y) {
  Tensor h = Relu(Matmul(x, params[0]) + params[1]);
  return SoftmaxCrossEntropy(Matmul(h, params[2]), OneHot(y, 3));
}

// A small two-layer classifier; returns the parameters after `steps` SGD
// steps on `batches`, trained either on one device with whole batches or
// data-parallel over `replicas` devices with each batch split among them.
std::vector<ir::Literal> Train(LazyContext* ctx, const std::vector<std::string>& devices,
                               const std::vector<std::pair<ir::Literal, ir::Literal>>& batches,
                               std::vector<double>* losses) {
  DataParallel dp(ctx, devices);
  const std::string& lead = dp.lead_device();
  std::vector<Tensor> params = InitialParams(ctx, lead);
  const bool parallel = devices.size() > 1;
  if (parallel) {
    EXPECT_TRUE(dp.ReplicateAll(&params).ok());
  }
  Sgd sgd(0.1, 0.9);
  for (const auto& [images, labels] : batches) {
    Tensor x = parallel ? *dp.Shard(images) : ctx->FromLiteral(images, lead);
    Tensor y = parallel ? *dp.Shard(labels) : ctx->FromLiteral(labels, lead);
    Tensor loss = ClassifierLoss(params, x, y);
    std::vector<Tensor> grads = *Grad(loss, params);
    if (parallel) grads = dp.AllReduceMean(grads);
    Tensor mean_loss = parallel ? CrossReplicaSum(loss) * (1.0 / dp.replicas()) : loss;
    params = *sgd.Step(params, grads);
    EXPECT_TRUE(ctx->Barrier(lead).ok());
    losses->push_back(*mean_loss.Item());
  }
  std::vector<ir::Literal> out;
  for (const Tensor& p : params) {
    absl::StatusOr<ir::Literal> value = parallel ? dp.CheckInStep(p) : p.ToHost();
    EXPECT_TRUE(value.ok()) << value.status();
    out.push_back(*value);
  }
  return out;
}

TEST_P(DataParallelTest, ReplicatedTrainingMatchesOneDeviceWithNTimesTheBatch) {
  std::vector<std::pair<ir::Literal, ir::Literal>> batches;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 5; ++step) {
    ir::Literal labels(Shape(ElementType::kS32, {32}));
    for (int i = 0; i < 32; ++i) labels.SetFromDouble(i, static_cast<double>(rng() % 3));
    batches.push_back({Random(Shape(ElementType::kF32, {32, 8}), 100 + step), labels});
  }
  std::vector<double> single_losses, parallel_losses;
  std::vector<ir::Literal> single = Train(ctx_.get(), {GetParam() + ":0"}, batches, &single_losses);
  std::vector<ir::Literal> parallel =
      Train(ctx_.get(), Devices(GetParam(), 4), batches, &parallel_losses);
  ASSERT_EQ(single.size(), parallel.size());
  for (size_t p = 0; p < single.size(); ++p) {
    std::vector<double> a = Values(single[p]), b = Values(parallel[p]);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-4) << "parameter " << p << " element " << i;
    }
  }
  for (size_t s = 0; s < single_losses.size(); ++s) {
    EXPECT_NEAR(single_losses[s], parallel_losses[s], 1e-4) << "step " << s;
  }
  EXPECT_LT(single_losses.back(), single_losses.front()) << "the model trains";
  EXPECT_EQ(ctx_->metrics().replicated_executions, 5);
  if (GetParam() == "tpu") {
    ASSERT_TRUE(ctx_->metrics().last_profile.has_value());
    EXPECT_GT(ctx_->metrics().last_profile->simulated_seconds(), 0);
    EXPECT_GT(ctx_->metrics().last_profile->interconnect_seconds(), 0);
  }
}

// The same training as one device loop per replica: each replica's loop
// reads its shards from its own device's infeed, the gradients are
// all-reduced inside the loop body, and every replica ends with the
// weights of step-mode training on one device with whole batches.
TEST_P(DataParallelTest, ReplicatedDeviceLoopMatchesOneDeviceWithNTimesTheBatch) {
  constexpr int kSteps = 4, kReplicas = 4, kBatch = 32;
  std::vector<std::pair<ir::Literal, ir::Literal>> batches;
  std::mt19937_64 rng(9);
  for (int step = 0; step < kSteps; ++step) {
    ir::Literal labels(Shape(ElementType::kS32, {kBatch}));
    for (int i = 0; i < kBatch; ++i) labels.SetFromDouble(i, static_cast<double>(rng() % 3));
    batches.push_back({Random(Shape(ElementType::kF32, {kBatch, 8}), 300 + step), labels});
  }
  std::vector<double> single_losses;
  std::vector<ir::Literal> single = Train(ctx_.get(), {GetParam() + ":0"}, batches, &single_losses);

  DataParallel dp(ctx_.get(), Devices(GetParam(), kReplicas));
  const std::string& lead = dp.lead_device();
  std::vector<Tensor> params = InitialParams(ctx_.get(), lead);
  ASSERT_TRUE(dp.ReplicateAll(&params).ok());
  Sgd sgd(0.1, 0.9);
  sgd.InitState(params);
  ASSERT_TRUE(dp.ReplicateAll(&sgd.velocity()).ok());
  const Shape x_shard(ElementType::kF32, {kBatch / kReplicas, 8});
  const Shape y_shard(ElementType::kS32, {kBatch / kReplicas});
  for (int r = 0; r < kReplicas; ++r) {
    auto in = client_->OpenInfeed(dp.devices()[r]);
    ASSERT_TRUE(in.ok()) << in.status();
    for (const auto& [images, labels] : batches) {
      auto x = dp.Shard(images);
      auto y = dp.Shard(labels);
      ASSERT_TRUE(x.ok() && y.ok());
      // Shard r of each batch, as the producer of replica r would send it.
      ASSERT_TRUE((*in)->Write(*client_->TransferFromDevice(*x->node()->replicas[r])).ok());
      ASSERT_TRUE((*in)->Write(*client_->TransferFromDevice(*y->node()->replicas[r])).ok());
    }
    ASSERT_TRUE((*in)->Finish().ok());
  }
  std::vector<std::pair<std::string, Tensor*>> carried;
  for (size_t i = 0; i < params.size(); ++i) carried.push_back({absl::StrCat("p", i), &params[i]});
  for (const auto& named : sgd.NamedState()) carried.push_back(named);
  absl::Status st = WhileCarrying(kSteps, carried, [&](DeviceLoop& loop) -> absl::Status {
    Tensor x = loop.Infeed(x_shard);
    Tensor y = loop.Infeed(y_shard);
    Tensor loss = ClassifierLoss(params, x, y);
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, Grad(loss, params));
    loop.Outfeed(CrossReplicaSum(loss) * (1.0 / dp.replicas()));
    ASSIGN_OR_RETURN(std::vector<Tensor> next, sgd.Step(params, dp.AllReduceMean(grads)));
    for (size_t i = 0; i < params.size(); ++i) params[i] = next[i];  // the carried pointers
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(ctx_->Realize(params).ok());
  EXPECT_GE(ctx_->metrics().replicated_executions, 1);
  for (size_t p = 0; p < params.size(); ++p) {
    ASSERT_EQ(params[p].replica_count(), kReplicas);
    auto every = dp.CheckInStep(params[p]);
    ASSERT_TRUE(every.ok()) << every.status();
    std::vector<double> a = Values(single[p]), b = Values(*every);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-4) << "parameter " << p << " element " << i;
    }
  }
  // Replica 0 alone: a program reading it runs once, on the lead device.
  const int64_t replicated = ctx_->metrics().replicated_executions;
  Tensor first = dp.Lead(params[0]);
  EXPECT_EQ(first.replica_count(), 1);
  auto lead_sum = Sum(first * 2.0).Item();
  ASSERT_TRUE(lead_sum.ok()) << lead_sum.status();
  double want_sum = 0;
  for (double v : Values(single[0])) want_sum += 2 * v;
  EXPECT_NEAR(*lead_sum, want_sum, 1e-3);
  EXPECT_EQ(ctx_->metrics().replicated_executions, replicated);
  // Every replica streamed the mean loss of each step.
  for (int r = 0; r < kReplicas; ++r) {
    OutfeedOptions options;
    options.max_values = kSteps;
    options.timeout = absl::Seconds(5);
    auto reader = client_->OpenOutfeed(dp.devices()[r], options);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (int s = 0; s < kSteps; ++s) {
      auto v = (*reader)->Next();
      ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
      EXPECT_NEAR(Values(**v)[0], single_losses[s], 1e-4) << "replica " << r << " step " << s;
    }
  }
}

TEST_P(DataParallelTest, UnevenBatchesAreRefused) {
  DataParallel dp(ctx_.get(), Devices(GetParam(), 4));
  auto shard = dp.Shard(ir::Literal(Shape(ElementType::kF32, {10, 2})));
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr("4 equal shards"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, DataParallelTest, ::testing::Values("cpu", "tpu"));

// A dry run of a lazy trace: priced for one and for four replicas, nothing
// executes, and the tensors stay pending; a cpu device has no cost model.
TEST(LazyEstimateTest, PricesATraceWithoutRunningIt) {
  embedded::Options options;
  options.devices = "cpu:1,tpu:4";
  std::unique_ptr<Client> client = *embedded::Connect(options);
  auto ctx = LazyContext::Create(client.get());
  Tensor a = ctx->FromLiteral(Random(Shape(ElementType::kF32, {256, 512}), 1), "tpu:0");
  Tensor b = ctx->FromLiteral(Random(Shape(ElementType::kF32, {512, 128}), 2), "tpu:0");
  Tensor y = CrossReplicaSum(Relu(Matmul(a, b)));
  const int64_t executions = ctx->metrics().executions;
  auto one = ctx->Estimate({y});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->matrix_flops(), int64_t{2} * 256 * 512 * 128);
  EXPECT_GT(one->simulated_seconds(), 0);
  EXPECT_EQ(one->interconnect_seconds(), 0);
  auto four = ctx->Estimate({y}, 4);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_GT(four->interconnect_seconds(), 0);
  EXPECT_EQ(ctx->metrics().executions, executions);
  // The value is still computed when it is read.
  auto value = y.ToHost();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(ctx->metrics().executions, executions + 1);

  Tensor c = ctx->FromVector<float>(ElementType::kF32, {2}, std::vector<float>{1, 2}, "cpu:0");
  EXPECT_EQ(ctx->Estimate({c * 2.0}).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ctx->Estimate({y, c}).status().message(), HasSubstr("two devices"));
  EXPECT_EQ(ctx->Estimate({}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::client
