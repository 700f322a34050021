// Infeed, outfeed and device loops against a real kiln-server: a loop of N
// steps equals N lazy steps; a producer in another process with a token;
// a refused producer without one; a wrong-shape value; a producer that dies
// mid-value; cancelling the consumer; outfeed order; other calls keep being
// served while a loop waits.
#include <cmath>
#include <random>
#include <thread>

#include "client/client.h"
#include "client/grpc_transport.h"
#include "client/lazy.h"
#include "client/loop.h"
#include "examples/fashion_mnist/trainer.h"
#include "client/loop_test_util.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using client::Tensor;
using ir::ElementType;
using ir::Shape;
using client::testing::F32;
using client::testing::SumInfeeds;
using client::testing::Values;
constexpr auto VecOn = client::testing::Vec;

class FeedE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(server_.address().empty()) << "kiln-server did not start";
    auto c = client::Client::Connect(server_.address());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    ctx_ = client::LazyContext::Create(client_.get());
  }
  Tensor Vec(std::vector<float> v) { return VecOn(ctx_.get(), std::move(v)); }
  // Runs a producer process; returns its one-line report.
  std::string Produce(const std::string& token, int count, bool cut = false) {
    int fd = -1;
    std::vector<std::string> argv = {std::string(KILN_BIN_DIR) + "/feed_producer",
                                     server_.address(), token, std::to_string(count)};
    if (cut) argv.push_back("cut");
    pid_t pid = testing::SpawnWithStdout(argv, &fd);
    std::string line;
    testing::ReadLine(fd, &line, 30000);
    testing::StopProcess(pid, SIGTERM, 5000);
    close(fd);
    return line;
  }

  testing::ServerProcess server_{{"--infeed_timeout_seconds=4"}};
  std::unique_ptr<client::Client> client_;
  std::shared_ptr<client::LazyContext> ctx_;
};

TEST_F(FeedE2E, LoopOfNStepsMatchesNLazySteps) {
  constexpr int kSteps = 4, kBatch = 8;
  std::mt19937 rng(7);
  std::normal_distribution<float> pixel;
  std::vector<std::vector<float>> images(kSteps, std::vector<float>(kBatch * 784));
  std::vector<std::vector<int32_t>> labels(kSteps, std::vector<int32_t>(kBatch));
  for (int s = 0; s < kSteps; ++s) {
    for (float& p : images[s]) p = pixel(rng);
    for (int i = 0; i < kBatch; ++i) labels[s][i] = (s * 3 + i) % 10;
  }
  examples::TrainerOptions options;
  options.learning_rate = 0.05;
  options.momentum = 0.9;
  // Step mode.
  auto step_model = examples::MakeModel("mlp", ctx_.get(), "cpu:0", 3);
  ASSERT_TRUE(step_model.ok());
  examples::Trainer stepper(ctx_.get(), step_model->get(), "cpu:0", options);
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_TRUE(stepper.TrainStep(images[s].data(), labels[s].data(), kBatch).ok());
  }
  // Loop mode: the same batches through the infeed.
  auto loop_model = examples::MakeModel("mlp", ctx_.get(), "cpu:0", 3);
  ASSERT_TRUE(loop_model.ok());
  examples::Trainer looper(ctx_.get(), loop_model->get(), "cpu:0", options);
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in.ok());
  for (int s = 0; s < kSteps; ++s) {
    ir::Literal x(Shape(ElementType::kF32, {kBatch, 784}));
    std::memcpy(x.mutable_bytes().data(), images[s].data(), images[s].size() * 4);
    ir::Literal y(Shape(ElementType::kS32, {kBatch}));
    std::memcpy(y.mutable_bytes().data(), labels[s].data(), labels[s].size() * 4);
    std::vector<ir::Literal> pair;
    pair.push_back(std::move(x));
    pair.push_back(std::move(y));
    ASSERT_TRUE((*in)->Write(ir::Literal::Tuple(std::move(pair))).ok());
  }
  ASSERT_TRUE((*in)->Finish().ok());
  absl::Status st = looper.TrainLoop(kSteps, kBatch);
  ASSERT_TRUE(st.ok()) << st;
  // The losses came out in order, one per step.
  client::OutfeedOptions out_options;
  out_options.max_values = kSteps;
  out_options.timeout = absl::Seconds(10);
  auto reader = client_->OpenOutfeed("cpu:0", out_options);
  for (int s = 0; s < kSteps; ++s) {
    auto loss = (*reader)->Next();
    ASSERT_TRUE(loss.ok() && loss->has_value()) << loss.status();
    EXPECT_TRUE(std::isfinite((**loss).GetAsDouble(0)));
  }
  const auto& a = (*step_model)->params();
  const auto& b = (*loop_model)->params();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto va = a[i].ToHost(), vb = b[i].ToHost();
    ASSERT_TRUE(va.ok() && vb.ok());
    for (int64_t k = 0; k < va->element_count(); ++k) {
      const double x = va->GetAsDouble(k), y = vb->GetAsDouble(k);
      worst = std::max(worst, std::abs(x - y) / (1e-3 + std::abs(x)));
    }
  }
  EXPECT_LT(worst, 1e-3) << "loop weights differ from step weights";
  // And the weights did move: the comparison is not between two initial states.
  auto fresh = examples::MakeModel("mlp", ctx_.get(), "cpu:0", 3);
  auto w0 = (*fresh)->params()[0].ToHost(), w1 = b[0].ToHost();
  double moved = 0;
  for (int64_t k = 0; k < w0->element_count(); ++k) {
    moved = std::max(moved, std::abs(w0->GetAsDouble(k) - w1->GetAsDouble(k)));
  }
  EXPECT_GT(moved, 1e-5);
}

TEST_F(FeedE2E, ProducerInAnotherProcessWithToken) {
  auto token = client_->CreateFeedToken("cpu:0");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(Produce(*token, 6), "done 6");
  auto out = client::While(6, {Vec({0, 0})}, SumInfeeds);
  auto lit = (*out)[0].ToHost();
  ASSERT_TRUE(lit.ok()) << lit.status();
  EXPECT_EQ(Values(*lit), (std::vector<double>{21, -21}));
  // The outfeed kept the order of the iterations.
  client::OutfeedOptions options;
  options.max_values = 6;
  options.timeout = absl::Seconds(10);
  auto reader = client_->OpenOutfeed("cpu:0", options);
  double sum = 0;
  for (int i = 1; i <= 6; ++i) {
    auto v = (*reader)->Next();
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    sum += i;
    EXPECT_EQ(Values(**v), (std::vector<double>{sum, -sum}));
  }
}

TEST_F(FeedE2E, ProducerWithoutTokenIsRefused) {
  EXPECT_NE(Produce("f-00000000000000000000000000000000", 1).find("PERMISSION_DENIED"),
            std::string::npos);
  // A target with neither a session nor a token.
  auto transport =
      client::ConnectGrpc(server_.address());
  ASSERT_TRUE(transport.ok());
  v1::FeedTarget nobody;
  nobody.set_device("cpu:0");
  auto stream = (*transport)->OpenInfeed(nobody, 1 << 20);
  ASSERT_TRUE(stream.ok());
  (*stream)->Write(F32({1, 2})).IgnoreError();
  EXPECT_EQ((*stream)->Finish().status().code(), absl::StatusCode::kPermissionDenied);
  v1::OutfeedRequest read;
  *read.mutable_target() = nobody;
  auto reader = (*transport)->OpenOutfeed(read);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->Next().status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(FeedE2E, WrongShapeIsRefusedWithAClearError) {
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE((*in)->Write(F32({1, 2, 3})).ok());
  ASSERT_TRUE((*in)->Finish().ok());
  auto out = client::While(1, {Vec({0, 0})}, SumInfeeds);
  absl::Status st = ctx_->Realize(*out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("infeed expected f32[2] but the queue held f32[3]"),
            std::string::npos)
      << st;
}

TEST_F(FeedE2E, ProducerDyingMidValueGivesADeadlineNotAHang) {
  auto token = client_->CreateFeedToken("cpu:0");
  EXPECT_EQ(Produce(*token, 1, /*cut=*/true), "cut");
  auto out = client::While(2, {Vec({0, 0})}, SumInfeeds);
  // The whole value arrived; the cut one never enters the queue, so the
  // second iteration waits until the infeed timeout.
  const absl::Time start = absl::Now();
  auto exe_status = ctx_->Realize(*out);
  EXPECT_EQ(exe_status.code(), absl::StatusCode::kDeadlineExceeded) << exe_status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// Cancelling the consumer stops its loop, drains the session's queues and
// leaves other clients served. With two values per queue the loop stalls on
// its full outfeed, so both queues hold values when it is cancelled.
TEST(FeedCancelE2E, CancellingTheConsumerStopsTheLoopDrainsItsQueuesAndOthersKeepWorking) {
  testing::ServerProcess server({"--feed_queue_capacity=2", "--infeed_timeout_seconds=60"});
  ASSERT_FALSE(server.address().empty()) << "kiln-server did not start";
  auto c = client::Client::Connect(server.address());
  ASSERT_TRUE(c.ok()) << c.status();
  auto ctx = client::LazyContext::Create(c->get());
  auto out = client::While(100000, {VecOn(ctx.get(), {0, 0})}, SumInfeeds);
  ASSERT_TRUE(out.ok()) << out.status();
  client::CallCanceller cancel;
  absl::Status loop_status;
  std::thread runner([&]() {
    loop_status = ctx->Realize(*out, std::source_location::current(), &cancel);
  });
  // While the loop waits on its infeed, another client is served.
  auto other = client::Client::Connect(server.address());
  absl::StatusOr<ir::Literal> doubled = absl::UnknownError("not connected");
  if (other.ok()) {
    auto other_ctx = client::LazyContext::Create(other->get());
    auto x = VecOn(other_ctx.get(), {1, 2});
    doubled = (x * 2.0).ToHost();
  }
  // Five values: the loop reads three, outfeeds two and stalls pushing the
  // third sum; the last two values stay in the infeed. Finish returns once
  // the server has queued all five, so the loop has stalled by then.
  auto in = (*c)->OpenInfeed("cpu:0");
  bool fed = in.ok();
  for (int i = 0; fed && i < 5; ++i) fed = (*in)->Write(F32({1, 1})).ok();
  fed = fed && (*in)->Finish().ok();
  cancel.Cancel();
  runner.join();
  ASSERT_TRUE(doubled.ok()) << doubled.status();
  EXPECT_EQ(Values(*doubled), (std::vector<double>{2, 4}));
  ASSERT_TRUE(fed) << "the five values were not all queued";
  EXPECT_EQ(loop_status.code(), absl::StatusCode::kCancelled) << loop_status;
  // The call ends at once on the client; the server stops the program at
  // its next poll, drains the queues and then counts the cancellation.
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; ++i) {
    auto m = (*c)->Metrics();
    ASSERT_TRUE(m.ok());
    for (const auto& counter : m->counters()) {
      if (counter.name() == "executes_cancelled" && counter.value() >= 1) stopped = true;
    }
    if (!stopped) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(stopped) << "the server did not report the cancelled execution";
  // The session still works and its queues start empty: a leftover infeed
  // value would make the sum (6, 6), a leftover outfeed sum would be read
  // before this loop's.
  // The loop runs before its value is sent, so that leftovers (which would
  // fill the queue) cannot block the send.
  auto again = client::While(1, {VecOn(ctx.get(), {5, 5})}, SumInfeeds);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<ir::Literal> lit = absl::UnknownError("not run");
  std::thread second([&]() { lit = (*again)[0].ToHost(); });
  auto in2 = (*c)->OpenInfeed("cpu:0");
  const bool sent = in2.ok() && (*in2)->Write(F32({1, 2})).ok() && (*in2)->Finish().ok();
  second.join();
  EXPECT_TRUE(sent);
  ASSERT_TRUE(lit.ok()) << lit.status();
  EXPECT_EQ(Values(*lit), (std::vector<double>{6, 7}));
  client::OutfeedOptions bounded;
  bounded.timeout = absl::Seconds(30);
  auto sums = (*c)->OpenOutfeed("cpu:0", bounded);
  ASSERT_TRUE(sums.ok());
  auto first = (*sums)->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ(Values(**first), (std::vector<double>{6, 7}));
}

}  // namespace
}  // namespace kiln
