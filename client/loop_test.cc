// Device loops over the embedded service: carried state, captured values,
// infeed and outfeed order, shape errors, feeds from another client with a
// token, cancellation, and the background loader.
#include "client/loop.h"

#include <thread>

#include "client/feeds.h"
#include "client/lazy.h"
#include "client/optimizers.h"
#include "client/loop_test_util.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using ir::Shape;
using testing::F32;
using testing::SumInfeeds;
using testing::Values;
constexpr auto VecOn = testing::Vec;

class LoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect();
    ctx_ = LazyContext::Create(client_.get());
  }
  Tensor Vec(std::vector<float> v) { return VecOn(ctx_.get(), std::move(v)); }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

TEST_F(LoopTest, CarriedStateAndCapturedValues) {
  Tensor x = Vec({1, 2});
  Tensor scale = Vec({3, 3});  // device data read inside the body: a capture
  auto out = While(4, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s) {
    return absl::StatusOr<std::vector<Tensor>>({s[0] * scale + 1.0});
  });
  ASSERT_TRUE(out.ok()) << out.status();
  auto lit = (*out)[0].ToHost();
  ASSERT_TRUE(lit.ok()) << lit.status();
  // x -> 3x + 1, four times: 1 -> 4 -> 13 -> 40 -> 121; 2 -> 7 -> 22 -> 67 -> 202.
  EXPECT_EQ(Values(*lit), (std::vector<double>{121, 202}));
  EXPECT_EQ(ctx_->metrics().executions, 1);
}

TEST_F(LoopTest, BodyMustKeepTheStateShapes) {
  auto out = While(2, {Vec({1, 2})}, [&](DeviceLoop&, const std::vector<Tensor>& s) {
    return absl::StatusOr<std::vector<Tensor>>({Sum(s[0])});
  });
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("enters as f32[2]"), std::string::npos) << out.status();
}

TEST_F(LoopTest, InfeedAndOutfeedKeepOrder) {
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in.ok()) << in.status();
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE((*in)->Write(F32({float(i), float(10 * i)})).ok());
  ASSERT_TRUE((*in)->Finish().ok());
  auto out = While(5, {Vec({0, 0})}, SumInfeeds);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(ctx_->Realize(*out).ok());
  OutfeedOptions options;
  options.max_values = 5;
  options.timeout = absl::Seconds(5);
  auto reader = client_->OpenOutfeed("cpu:0", options);
  ASSERT_TRUE(reader.ok());
  double a = 0;
  for (int i = 1; i <= 5; ++i) {
    auto v = (*reader)->Next();
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    a += i;
    EXPECT_EQ(Values(**v), (std::vector<double>{a, 10 * a}));
  }
  auto end = (*reader)->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST_F(LoopTest, WrongShapeInfeedFailsTheProgramAndItsFeeds) {
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE((*in)->Write(F32({1, 2, 3})).ok());  // the program wants f32[2]
  ASSERT_TRUE((*in)->Write(F32({4, 5})).ok());
  auto out = While(1, {Vec({0, 0})}, SumInfeeds);
  ASSERT_TRUE(out.ok());
  absl::Status st = ctx_->Realize(*out);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("infeed expected f32[2] but the queue held f32[3]"),
            std::string::npos)
      << st;
  // The producer learns why: its stream fails with the program's error, and
  // what it had queued for that program is gone.
  absl::Status refused = (*in)->Write(F32({6, 7}));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("the program on cpu:0 failed"), std::string::npos) << refused;
  // A new stream feeds the next loop.
  auto in2 = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE((*in2)->Write(F32({8, 9})).ok());
  auto again = While(1, {Vec({0, 0})}, SumInfeeds);
  auto lit = (*again)[0].ToHost();
  ASSERT_TRUE(lit.ok()) << lit.status();
  EXPECT_EQ(Values(*lit), (std::vector<double>{8, 9}));
}

TEST_F(LoopTest, ProducerWithTokenFromAnotherClient) {
  auto token = client_->CreateFeedToken("cpu:0");
  ASSERT_TRUE(token.ok()) << token.status();
  // A token this server did not issue: refused.
  auto other = embedded::Connect();  // another service: tokens do not cross servers
  auto foreign = (*other)->OpenInfeed("cpu:0", *token);
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ((*foreign)->Write(F32({1, 1})).code(), absl::StatusCode::kPermissionDenied);
  // With it, into this session's queue.
  auto in = client_->OpenInfeed("cpu:0", *token);
  ASSERT_TRUE((*in)->Write(F32({7, 8})).ok());
  auto out = While(1, {Vec({0, 0})}, SumInfeeds);
  auto lit = (*out)[0].ToHost();
  ASSERT_TRUE(lit.ok()) << lit.status();
  EXPECT_EQ(Values(*lit), (std::vector<double>{7, 8}));
}

TEST_F(LoopTest, CancelStopsAStarvedLoop) {
  auto out = While(1000, {Vec({0, 0})}, SumInfeeds);
  ASSERT_TRUE(out.ok());
  // Run the program by hand so the call can be cancelled.
  CallCanceller cancel;
  absl::Status st;
  std::thread runner([&]() { st = ctx_->Realize(*out, std::source_location::current(), &cancel); });
  // One iteration runs (its outfeed arrives), then the loop starves: cancel
  // it there. (The runner is joined on every path.)
  auto in = client_->OpenInfeed("cpu:0");
  OutfeedOptions bounded;
  bounded.timeout = absl::Seconds(60);
  auto sums = client_->OpenOutfeed("cpu:0", bounded);
  absl::StatusOr<std::optional<ir::Literal>> first = absl::UnknownError("no outfeed");
  if (in.ok() && sums.ok() && (*in)->Write(F32({1, 2})).ok()) first = (*sums)->Next();
  cancel.Cancel();
  runner.join();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ(Values(**first), (std::vector<double>{1, 2}));
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  // The service keeps serving.
  auto lit = (Vec({1}) + 1.0).ToHost();
  ASSERT_TRUE(lit.ok()) << lit.status();
}

TEST_F(LoopTest, LoaderKeepsTheInfeedFull) {
  auto stream = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(stream.ok());
  int produced = 0;
  InfeedLoader loader(
      *std::move(stream),
      [&]() -> absl::StatusOr<std::optional<std::vector<ir::Literal>>> {
        if (produced == 40) return std::optional<std::vector<ir::Literal>>();
        ++produced;
        return std::optional<std::vector<ir::Literal>>(
            std::vector<ir::Literal>{F32({1, float(produced)})});
      },
      /*prefetch=*/4);
  // 40 values through a queue of 16: the loop runs while the loader feeds it.
  auto out = While(40, {Vec({0, 0})}, [](DeviceLoop& loop, const std::vector<Tensor>& s) {
    return absl::StatusOr<std::vector<Tensor>>({s[0] + loop.Infeed(Shape(ElementType::kF32, {2}))});
  });
  auto lit = (*out)[0].ToHost();
  ASSERT_TRUE(lit.ok()) << lit.status();
  EXPECT_EQ(Values(*lit), (std::vector<double>{40, 40 * 41 / 2}));
  ASSERT_TRUE(loader.Wait().ok());
  EXPECT_EQ(loader.batches_written(), 40);
}

}  // namespace
}  // namespace kiln::client
