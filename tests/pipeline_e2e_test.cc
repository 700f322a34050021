// End to end: pipelined barriers against a real kiln-server that goes away
// while a step is in flight.
#include <csignal>

#include "client/lazy.h"
#include "client/tensor.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using client::LazyContext;
using client::Tensor;

// A kiln-server computing on one thread, and a client of it.
class PipelineE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = client::Client::Connect(server_.address());
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return;
    client_ = *std::move(c);
    ctx_ = LazyContext::Create(client_.get());
    ctx_->set_pipelined(true);
  }
  // The sum of a (1024x1024, random) multiplied by itself 40 times: about
  // 86 GFLOP, seconds on one thread, so a server killed at once dies
  // mid-step. `a` and `y` get the matrix and the product.
  static Tensor LongStep(LazyContext& ctx, Tensor& a, Tensor& y) {
    a = ctx.RandomNormal(ir::Shape(ir::ElementType::kF32, {1024, 1024}), 0, 0.03, 1, "cpu:0");
    y = a;
    for (int i = 0; i < 40; ++i) y = client::Matmul(y, a);
    return client::Sum(y, {});
  }

  testing::ServerProcess server_{{"--threads=1"}};
  std::unique_ptr<client::Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

// A server lost mid-step is an error that may pass: the step's outputs are
// left to be computed again (their graph kept, no error stuck on them), and
// the error is reported once, by the call that waited.
TEST_F(PipelineE2E, AStepLostWithItsServerIsLeftToBeComputedAgain) {
  ASSERT_NE(ctx_, nullptr) << "no kiln-server to run on";
  LazyContext* ctx = ctx_.get();
  Tensor a, y;
  Tensor total = LongStep(*ctx, a, y);
  // `a` keeps its handle, so the step donates nothing.
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  ASSERT_EQ(ctx->metrics().donated_arguments, 0);
  ASSERT_TRUE(total.node()->in_flight());
  ASSERT_EQ(kill(server_.pid(), SIGKILL), 0);
  absl::Status lost = ctx->Sync();
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_TRUE(total.status().ok()) << total.status();
  EXPECT_FALSE(total.node()->realized());
  EXPECT_FALSE(total.node()->operands.empty());
  EXPECT_TRUE(ctx->Sync().ok());  // reported once
  // Computing it again reaches for the server and says it is gone.
  auto again = total.Item();
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
}

// A step that gave up its arguments cannot run again: the error stays.
TEST_F(PipelineE2E, ALostStepThatDonatedKeepsItsError) {
  ASSERT_NE(ctx_, nullptr) << "no kiln-server to run on";
  LazyContext* ctx = ctx_.get();
  Tensor a, y;
  Tensor total = LongStep(*ctx, a, y);
  a = Tensor();
  y = Tensor();
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  ASSERT_EQ(ctx->metrics().donated_arguments, 1);
  ASSERT_EQ(kill(server_.pid(), SIGKILL), 0);
  EXPECT_EQ(ctx->Sync().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(total.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(total.Item().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kiln
