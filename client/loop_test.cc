// Device loops over the embedded service: carried state, captured values,
// infeed and outfeed order, shape errors, feeds from another client with a
// token, cancellation, and the background loader.
#include "client/loop.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "base/status_macros.h"
#include "client/autodiff.h"
#include "client/checkpoint.h"
#include "client/feeds.h"
#include "client/lazy.h"
#include "client/nn.h"
#include "client/nn_test_util.h"
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

// Host values made while the body is traced (a learning rate uploaded by
// an optimizer's first step in a loop, a constant) are values of the loop
// like the ones made before it.
TEST_F(LoopTest, ValuesMadeInsideTheBodyAreCaptured) {
  Tensor x = Vec({1, 2});
  auto out = While(3, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s) {
    Tensor two = ctx_->FromVector<float>(ElementType::kF32, {}, {2.0f}, "cpu:0");
    return absl::StatusOr<std::vector<Tensor>>({s[0] * two});
  });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{8, 16}));
  // A second loop over the first one's results, again with a new value.
  auto again = While(2, *out, [&](DeviceLoop&, const std::vector<Tensor>& s) {
    Tensor three = ctx_->FromVector<float>(ElementType::kF32, {}, {3.0f}, "cpu:0");
    return absl::StatusOr<std::vector<Tensor>>({s[0] + three});
  });
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Values((*again)[0]), (std::vector<double>{14, 22}));
}

// An optimizer whose learning rate changes between two loops uploads the
// new rate while the second body is traced.
TEST_F(LoopTest, LearningRateChangesBetweenLoops) {
  Tensor w = Vec({1, 2});
  Sgd sgd(0.5, 0.9);
  sgd.InitState({w});
  std::vector<std::pair<std::string, Tensor*>> carried = {{"w", &w}};
  for (auto& s : sgd.NamedState()) carried.push_back(s);
  for (double lr : {0.5, 0.25}) {
    sgd.set_learning_rate(lr);
    absl::Status st = WhileCarrying(2, carried, [&](DeviceLoop&) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<Tensor> next, sgd.Step({w}, {w}));
      w = next[0];
      return absl::OkStatus();
    });
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(ctx_->Realize({w}).ok());
  }
  // v: w, then 0.9 v + w; w -= lr v, two steps at 0.5 then two at 0.25.
  double a = 1, v = 0;
  for (double lr : {0.5, 0.5, 0.25, 0.25}) {
    v = 0.9 * v + a;
    a -= lr * v;
  }
  EXPECT_NEAR(Values(w)[0], a, 1e-6);
  EXPECT_NEAR(Values(w)[1], 2 * a, 1e-6);
}

// Reading a loop's results one at a time runs the loop once: the first
// read realizes every result still held (a second run would find the
// infeed drained and wait).
TEST_F(LoopTest, ReadingTheStateTensorByTensorRunsTheLoopOnce) {
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in.ok()) << in.status();
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE((*in)->Write(F32({float(i), float(i)})).ok());
  ASSERT_TRUE((*in)->Finish().ok());
  Tensor a = Vec({0, 0}), b = Vec({1, 1});
  std::vector<std::pair<std::string, Tensor*>> state = {{"a", &a}, {"b", &b}};
  ASSERT_TRUE(WhileCarrying(2, state, [&](DeviceLoop& loop) {
                Tensor x = loop.Infeed(Shape(ElementType::kF32, {2}));
                a = a + x;
                b = b * x;
                return absl::OkStatus();
              }).ok());
  const int64_t before = ctx_->metrics().executions;
  EXPECT_EQ(Values(a), (std::vector<double>{3, 3}));
  EXPECT_EQ(Values(b), (std::vector<double>{2, 2}));
  EXPECT_EQ(ctx_->metrics().executions, before + 1);
}

// A device loop inside a loop body: 3 outer iterations of 4 doublings.
TEST_F(LoopTest, LoopsNest) {
  auto out = While(3, {Vec({1})}, [](DeviceLoop&, const std::vector<Tensor>& outer)
                                      -> absl::StatusOr<std::vector<Tensor>> {
    return While(4, {outer[0]}, [](DeviceLoop&, const std::vector<Tensor>& inner)
                                    -> absl::StatusOr<std::vector<Tensor>> {
      return std::vector<Tensor>{inner[0] * 2.0};
    });
  });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{4096}));
}

// Gradients through device loops against central differences of the same
// loop run in double precision on the host: x <- x * w + sin(x) three
// times with w captured, then loss = sum(c * x).
TEST_F(LoopTest, GradientsFlowThroughDeviceLoops) {
  const std::vector<double> x0 = {0.3, -0.7}, w0 = {1.1, 0.6}, c = {1.5, -2};
  auto host_loss = [&](std::vector<double> x, const std::vector<double>& w) {
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 2; ++i) x[i] = x[i] * w[i] + std::sin(x[i]);
    }
    return c[0] * x[0] + c[1] * x[1];
  };
  Tensor x = Vec({0.3f, -0.7f}), w = Vec({1.1f, 0.6f});
  auto out = While(3, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s)
                               -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{s[0] * w + Sin(s[0])};
  });
  ASSERT_TRUE(out.ok()) << out.status();
  auto grads = Grad(Sum((*out)[0] * Vec({1.5f, -2.0f})), {x, w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const std::vector<double> dx = Values((*grads)[0]), dw = Values((*grads)[1]);
  ASSERT_EQ(dx.size(), 2u);
  ASSERT_EQ(dw.size(), 2u);
  const double eps = 1e-6;
  for (int i = 0; i < 2; ++i) {
    std::vector<double> up = x0, down = x0;
    up[i] += eps;
    down[i] -= eps;
    EXPECT_NEAR(dx[i], (host_loss(up, w0) - host_loss(down, w0)) / (2 * eps), 1e-4) << "dx " << i;
    up = w0;
    down = w0;
    up[i] += eps;
    down[i] -= eps;
    EXPECT_NEAR(dw[i], (host_loss(x0, up) - host_loss(x0, down)) / (2 * eps), 1e-4) << "dw " << i;
  }
}

// An integer counter in the state steers the body (x <- x * (1 + k/10),
// k <- k + 1); a loop nested in the body (x <- x * w twice, twice: w^4);
// no iterations at all.
TEST_F(LoopTest, GradientsThroughLoopsWithCountersNestingAndNoIterations) {
  Tensor x = Vec({2.0f});
  Tensor k0 = ctx_->FromVector<int32_t>(ElementType::kS32, {}, {0}, "cpu:0");
  auto counted = While(3, {x, k0}, [](DeviceLoop&, const std::vector<Tensor>& s)
                                       -> absl::StatusOr<std::vector<Tensor>> {
    Tensor factor = Cast(s[1], ElementType::kF32) * 0.1 + 1.0;
    return std::vector<Tensor>{s[0] * factor, s[1] + 1.0};
  });
  ASSERT_TRUE(counted.ok()) << counted.status();
  auto dx = Grad(Sum((*counted)[0]), {x});
  ASSERT_TRUE(dx.ok()) << dx.status();
  EXPECT_NEAR(Values((*dx)[0])[0], 1.0 * 1.1 * 1.2, 1e-6);

  Tensor w = Vec({1.5f});
  auto nested = While(2, {x}, [&](DeviceLoop&, const std::vector<Tensor>& outer)
                                  -> absl::StatusOr<std::vector<Tensor>> {
    return While(2, {outer[0]}, [&](DeviceLoop&, const std::vector<Tensor>& inner)
                                    -> absl::StatusOr<std::vector<Tensor>> {
      return std::vector<Tensor>{inner[0] * w};
    });
  });
  ASSERT_TRUE(nested.ok()) << nested.status();
  auto both = Grad(Sum((*nested)[0]), {x, w});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_NEAR(Values((*both)[0])[0], std::pow(1.5, 4), 1e-5);           // w^4
  EXPECT_NEAR(Values((*both)[1])[0], 4 * 2.0 * std::pow(1.5, 3), 1e-4);  // 4 x w^3

  auto none = While(0, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s)
                                -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{s[0] * w};
  });
  ASSERT_TRUE(none.ok());
  auto passed = Grad(Sum((*none)[0] * 3.0), {x, w});
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_EQ(Values((*passed)[0]), (std::vector<double>{3}));
  EXPECT_EQ(Values((*passed)[1]), (std::vector<double>{0}));
}

// A loop that reads its infeed would read other values if it ran again:
// no gradient through it.
TEST_F(LoopTest, NoGradientsThroughLoopsWithFeeds) {
  Tensor x = Vec({1, 2});
  auto out = While(2, {x}, [](DeviceLoop& loop, const std::vector<Tensor>& s)
                               -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{s[0] * loop.Infeed(Shape(ElementType::kF32, {2}))};
  });
  ASSERT_TRUE(out.ok()) << out.status();
  auto grads = Grad(Sum((*out)[0]), {x});
  ASSERT_FALSE(grads.ok());
  EXPECT_EQ(grads.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(grads.status().message().find("feeds"), std::string::npos) << grads.status();
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

// One infeed value may be a tuple of arrays, read in one infeed and taken
// apart in the body; a tuple of the wrong shape fails the program naming
// both shapes.
TEST_F(LoopTest, TupleInfeedReadsSeveralArraysAtOnce) {
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in.ok()) << in.status();
  for (int i = 1; i <= 3; ++i) {
    std::vector<ir::Literal> pair;
    pair.push_back(F32({float(i), float(2 * i)}));
    pair.push_back(ir::Literal::FromVector<int32_t>(ElementType::kS32, {3}, {i, i, i}));
    ASSERT_TRUE((*in)->Write(ir::Literal::Tuple(std::move(pair))).ok());
  }
  ASSERT_TRUE((*in)->Finish().ok());
  const std::vector<Shape> shapes = {Shape(ElementType::kF32, {2}), Shape(ElementType::kS32, {3})};
  auto out = While(3, {Vec({0, 0})}, [&](DeviceLoop& loop, const std::vector<Tensor>& s) {
    std::vector<Tensor> pair = loop.InfeedTuple(shapes);
    Tensor count = Cast(Sum(pair[1]), ElementType::kF32);
    return absl::StatusOr<std::vector<Tensor>>({s[0] + pair[0] * count});
  });
  ASSERT_TRUE(out.ok()) << out.status();
  // sum over i of (i, 2i) * 3i: 3 * (1 + 4 + 9) = 42, and 84.
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{42, 84}));

  auto in2 = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in2.ok());
  std::vector<ir::Literal> wrong;
  wrong.push_back(F32({1, 2}));
  wrong.push_back(F32({1, 2, 3}));
  ASSERT_TRUE((*in2)->Write(ir::Literal::Tuple(std::move(wrong))).ok());
  auto bad = While(1, {Vec({0, 0})}, [&](DeviceLoop& loop, const std::vector<Tensor>& s) {
    std::vector<Tensor> pair = loop.InfeedTuple(shapes);
    return absl::StatusOr<std::vector<Tensor>>({s[0] + pair[0]});
  });
  ASSERT_TRUE(bad.ok()) << bad.status();
  auto value = (*bad)[0].ToHost();
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.status().message().find("(f32[2], s32[3])"), std::string::npos)
      << value.status();
  // A nested tuple is not a feed value at all.
  auto in3 = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in3.ok());
  std::vector<ir::Literal> inner;
  inner.push_back(F32({1}));
  std::vector<ir::Literal> outer;
  outer.push_back(ir::Literal::Tuple(std::move(inner)));
  EXPECT_FALSE((*in3)->Write(ir::Literal::Tuple(std::move(outer))).ok());
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

// A model with state besides its weights: batch normalization's running
// statistics and dropout's counter.
class NormDropNet : public testing::TwoLayerNet {
 public:
  explicit NormDropNet(LazyContext* ctx) : TwoLayerNet(ctx, 6, 12, 3, 0.3, 5) {}
};

// One training step, traced the same way in step mode and in a loop body.
absl::StatusOr<Tensor> TraceStep(NormDropNet& net, Optimizer& optimizer, const Tensor& x,
                                 const Tensor& labels) {
  Tensor loss = SoftmaxCrossEntropy(net.Forward(x), OneHot(labels, 3));
  ASSIGN_OR_RETURN(std::vector<Tensor> grads, Grad(loss, net.Parameters()));
  ASSIGN_OR_RETURN(std::vector<Tensor> updated, optimizer.Step(net.Parameters(), grads));
  RETURN_IF_ERROR(net.SetParameters(updated));
  return loss;
}

ir::Literal RandomBatch(ir::Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ir::Literal lit(shape);
  for (int64_t i = 0; i < lit.element_count(); ++i) {
    lit.SetFromDouble(i, shape.type() == ElementType::kS32 ? double(rng() % 3)
                                                           : double(rng() % 2001) / 500 - 2);
  }
  return lit;
}

// The Done-when of device loops: N steps traced in step mode (one program
// and barrier per step) and the same N steps as one device loop fed
// through the infeed end with the same weights, running statistics,
// dropout counters, Adam moments and losses.
TEST_F(LoopTest, StepModeAndLoopModeTrainTheSameModel) {
  constexpr int kSteps = 4;
  const Shape x_shape(ElementType::kF32, {8, 6}), y_shape(ElementType::kS32, {8});
  std::vector<ir::Literal> xs, ys;
  for (int i = 0; i < kSteps; ++i) {
    xs.push_back(RandomBatch(x_shape, 100 + i));
    ys.push_back(RandomBatch(y_shape, 200 + i));
  }

  NormDropNet stepped(ctx_.get());
  AdamW stepped_opt(0.05, 0.01);
  std::vector<double> step_losses;
  for (int i = 0; i < kSteps; ++i) {
    auto loss = TraceStep(stepped, stepped_opt, ctx_->FromLiteral(xs[i], "cpu:0"),
                          ctx_->FromLiteral(ys[i], "cpu:0"));
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
    step_losses.push_back(Values(*loss)[0]);
  }

  NormDropNet looped(ctx_.get());
  AdamW looped_opt(0.05, 0.01);
  auto in = client_->OpenInfeed("cpu:0");
  ASSERT_TRUE(in.ok()) << in.status();
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_TRUE((*in)->Write(xs[i]).ok());
    ASSERT_TRUE((*in)->Write(ys[i]).ok());
  }
  ASSERT_TRUE((*in)->Finish().ok());
  std::vector<std::pair<std::string, Tensor*>> carried = nn::TrainingState(looped, looped_opt);
  absl::Status st = WhileCarrying(kSteps, carried, [&](DeviceLoop& loop) -> absl::Status {
    Tensor x = loop.Infeed(x_shape);
    Tensor y = loop.Infeed(y_shape);
    ASSIGN_OR_RETURN(Tensor loss, TraceStep(looped, looped_opt, x, y));
    loop.Outfeed(loss);
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  std::vector<Tensor> finals;
  for (const auto& [name, t] : carried) finals.push_back(*t);
  ASSERT_TRUE(ctx_->Realize(finals).ok());

  OutfeedOptions options;
  options.max_values = kSteps;
  options.timeout = absl::Seconds(5);
  auto reader = client_->OpenOutfeed("cpu:0", options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (int i = 0; i < kSteps; ++i) {
    auto v = (*reader)->Next();
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_NEAR(Values(**v)[0], step_losses[i], 1e-5 * (1 + std::abs(step_losses[i])))
        << "loss of step " << i;
  }

  std::vector<std::pair<std::string, Tensor*>> expected = nn::TrainingState(stepped, stepped_opt);
  ASSERT_EQ(expected.size(), carried.size());
  bool dropped_some = false;
  for (size_t k = 0; k < carried.size(); ++k) {
    ASSERT_EQ(carried[k].first, expected[k].first);
    std::vector<double> got = Values(*carried[k].second), want = Values(*expected[k].second);
    ASSERT_EQ(got.size(), want.size()) << carried[k].first;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << carried[k].first << "[" << i << "]";
    }
    if (carried[k].first == "dropout.counter") {
      EXPECT_EQ(got, (std::vector<double>{kSteps}));
      dropped_some = true;
    }
  }
  EXPECT_TRUE(dropped_some);
  // And training moved the weights (the comparison above is not of two
  // untouched models).
  NormDropNet fresh(ctx_.get());
  EXPECT_NE(Values(*fresh.NamedParameters()[0].second), Values(*carried[0].second));
}

// The complete example of docs/tensors.md ("A complete example"), as it
// stands there: a module with batch normalization and dropout, mixed
// precision, AdamW, one step in step mode, three in a device loop fed
// through the infeed, and a checkpoint restored into a fresh model.
class DocsNet : public testing::TwoLayerNet {
 public:
  explicit DocsNet(LazyContext* ctx) : TwoLayerNet(ctx, 784, 64, 10, 0.2, 3) {}
};

absl::Status DocsExample(Client* client, LazyContext* ctx, const std::string& dir) {
  DocsNet net(ctx);
  net.SetComputeType(ElementType::kBF16);  // matrix work in bf16 on f32 weights
  AdamW optimizer(1e-3, /*weight_decay=*/0.01);

  // One training step, traced the same way in step mode and in a loop.
  auto step = [&](const Tensor& images, const Tensor& labels) -> absl::StatusOr<Tensor> {
    Tensor loss = SoftmaxCrossEntropy(net.Forward(images), OneHot(labels, 10));
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, Grad(loss, net.Parameters()));
    ASSIGN_OR_RETURN(std::vector<Tensor> updated, optimizer.Step(net.Parameters(), grads));
    RETURN_IF_ERROR(net.SetParameters(updated));
    return loss;
  };

  // Everything the run carries, by name: weights, statistics, dropout's
  // counter, the optimizer's moments and step count.
  std::vector<std::pair<std::string, Tensor*>> state = nn::TrainingState(net, optimizer);

  // Step mode: one program per step.
  ir::Literal images(Shape(ElementType::kF32, {32, 784}));
  ir::Literal labels(Shape(ElementType::kS32, {32}));
  for (int64_t i = 0; i < images.element_count(); ++i) images.SetFromDouble(i, (i % 7) / 7.0);
  for (int64_t i = 0; i < labels.element_count(); ++i) labels.SetFromDouble(i, i % 10);
  ASSIGN_OR_RETURN(Tensor loss,
                   step(ctx->FromLiteral(images, "cpu:0"), ctx->FromLiteral(labels, "cpu:0")));
  RETURN_IF_ERROR(ctx->Barrier("cpu:0"));

  // Loop mode: three steps as one program, each reading (images, labels)
  // from the infeed and writing its loss to the outfeed.
  ASSIGN_OR_RETURN(std::unique_ptr<InfeedStream> infeed, client->OpenInfeed("cpu:0"));
  for (int i = 0; i < 3; ++i) {
    std::vector<ir::Literal> pair = {images, labels};
    RETURN_IF_ERROR(infeed->Write(ir::Literal::Tuple(std::move(pair))));
  }
  RETURN_IF_ERROR(infeed->Finish().status());
  RETURN_IF_ERROR(WhileCarrying(3, state, [&](DeviceLoop& loop) -> absl::Status {
    std::vector<Tensor> batch =
        loop.InfeedTuple({Shape(ElementType::kF32, {32, 784}), Shape(ElementType::kS32, {32})});
    ASSIGN_OR_RETURN(Tensor l, step(batch[0], batch[1]));
    loop.Outfeed(l);
    return absl::OkStatus();
  }));

  // A checkpoint of the whole state (reading it runs the loop), restored
  // into a fresh model and optimizer.
  std::vector<std::pair<std::string, const Tensor*>> saved(state.begin(), state.end());
  RETURN_IF_ERROR(SaveCheckpoint(dir, /*step=*/4, saved));
  DocsNet restored(ctx);
  AdamW restored_optimizer(1e-3, 0.01);
  std::vector<std::pair<std::string, Tensor*>> targets =
      nn::TrainingState(restored, restored_optimizer);
  ASSIGN_OR_RETURN(std::optional<Checkpoint> latest, LoadLatestCheckpoint(dir));
  if (!latest.has_value()) return absl::NotFoundError("no checkpoint");
  return RestoreTensors(*latest, targets, ctx, "cpu:0");
}

TEST_F(LoopTest, TheCompleteExampleOfTheDocsRuns) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("kiln-docs-example-" + std::to_string(::getpid())))
                              .string();
  absl::Status st = DocsExample(client_.get(), ctx_.get(), dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(st.ok()) << st;
  OutfeedOptions options;
  options.max_values = 3;
  options.timeout = absl::Seconds(5);
  auto reader = client_->OpenOutfeed("cpu:0", options);
  ASSERT_TRUE(reader.ok());
  for (int i = 0; i < 3; ++i) {
    auto v = (*reader)->Next();
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_TRUE(std::isfinite(Values(**v)[0]));
  }
}

TEST_F(LoopTest, WhileCarryingNamesWhatItCannotCarry) {
  Tensor a = Vec({1, 2});
  Tensor missing;
  absl::Status st = WhileCarrying(2, {{"a", &a}, {"momentum", &missing}},
                                  [](DeviceLoop&) { return absl::OkStatus(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("'momentum'"), std::string::npos) << st;
  st = WhileCarrying(2, {{"a", &a}}, [&](DeviceLoop&) {
    a = Sum(a);
    return absl::OkStatus();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'a' enters the loop as f32[2]"), std::string::npos) << st;
  // The failed loop left `a` as it was.
  EXPECT_EQ(Values(a), (std::vector<double>{1, 2}));
  st = WhileCarrying(3, {{"a", &a}}, [&](DeviceLoop&) {
    a = a * 2.0;
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Values(a), (std::vector<double>{8, 16}));
}

}  // namespace
}  // namespace kiln::client
