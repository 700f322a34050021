// Replicated execution from the lazy client: CrossReplicaSum and the
// data-parallel helper, on simulated TPU cores and on CPU devices.
#include "client/data_parallel.h"

#include <cmath>
#include <random>

#include "client/autodiff.h"
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

// A small two-layer classifier; returns the parameters after `steps` SGD
// steps on `batches`, trained either on one device with whole batches or
// data-parallel over `replicas` devices with each batch split among them.
std::vector<ir::Literal> Train(LazyContext* ctx, const std::vector<std::string>& devices,
                               const std::vector<std::pair<ir::Literal, ir::Literal>>& batches,
                               std::vector<double>* losses) {
  DataParallel dp(ctx, devices);
  const std::string& lead = dp.lead_device();
  std::vector<Tensor> params = {ctx->FromLiteral(Random(Shape(ElementType::kF32, {8, 16}), 1), lead),
                                ctx->FromLiteral(ir::Literal(Shape(ElementType::kF32, {16})), lead),
                                ctx->FromLiteral(Random(Shape(ElementType::kF32, {16, 3}), 2), lead)};
  const bool parallel = devices.size() > 1;
  if (parallel) {
    EXPECT_TRUE(dp.ReplicateAll(&params).ok());
  }
  Sgd sgd(0.1, 0.9);
  for (const auto& [images, labels] : batches) {
    Tensor x = parallel ? *dp.Shard(images) : ctx->FromLiteral(images, lead);
    Tensor y = parallel ? *dp.Shard(labels) : ctx->FromLiteral(labels, lead);
    Tensor h = Relu(Matmul(x, params[0]) + params[1]);
    Tensor loss = SoftmaxCrossEntropy(Matmul(h, params[2]), OneHot(y, 3));
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

TEST_P(DataParallelTest, UnevenBatchesAreRefused) {
  DataParallel dp(ctx_.get(), Devices(GetParam(), 4));
  auto shard = dp.Shard(ir::Literal(Shape(ElementType::kF32, {10, 2})));
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr("4 equal shards"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, DataParallelTest, ::testing::Values("cpu", "tpu"));

}  // namespace
}  // namespace kiln::client
