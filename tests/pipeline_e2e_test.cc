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

// A server lost mid-step is an error that may pass: the step's outputs are
// left to be computed again (their graph kept, no error stuck on them), and
// the error is reported once, by the call that waited.
TEST(PipelineE2E, AStepLostWithItsServerIsLeftToBeComputedAgain) {
  testing::ServerProcess server({"--threads=1"});
  ASSERT_FALSE(server.address().empty()) << "kiln-server did not start";
  auto client = client::Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto ctx = LazyContext::Create(client->get());
  ctx->set_pipelined(true);
  // About 86 GFLOP: seconds on one thread, so the server dies mid-step.
  Tensor a = ctx->RandomNormal(ir::Shape(ir::ElementType::kF32, {1024, 1024}), 0, 0.03, 1, "cpu:0");
  ASSERT_TRUE(a.status().ok()) << a.status();
  Tensor y = a;
  for (int i = 0; i < 40; ++i) y = client::Matmul(y, a);
  Tensor total = client::Sum(y, {});
  // `a` keeps its handle, so the step donates nothing.
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  ASSERT_EQ(ctx->metrics().donated_arguments, 0);
  ASSERT_TRUE(total.node()->in_flight());
  ASSERT_EQ(kill(server.pid(), SIGKILL), 0);
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
TEST(PipelineE2E, ALostStepThatDonatedKeepsItsError) {
  testing::ServerProcess server({"--threads=1"});
  ASSERT_FALSE(server.address().empty()) << "kiln-server did not start";
  auto client = client::Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto ctx = LazyContext::Create(client->get());
  ctx->set_pipelined(true);
  Tensor a = ctx->RandomNormal(ir::Shape(ir::ElementType::kF32, {1024, 1024}), 0, 0.03, 1, "cpu:0");
  ASSERT_TRUE(a.status().ok()) << a.status();
  Tensor y = a;
  for (int i = 0; i < 40; ++i) y = client::Matmul(y, a);
  Tensor total = client::Sum(y, {});
  a = Tensor();
  y = Tensor();
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  ASSERT_EQ(ctx->metrics().donated_arguments, 1);
  ASSERT_EQ(kill(server.pid(), SIGKILL), 0);
  EXPECT_EQ(ctx->Sync().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(total.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(total.Item().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kiln
