// CompiledFunction over the embedded service: replayed calls compute what
// traced ones do, and each reason to trace again traces again.

#include "client/compiled_function.h"

#include "client/autodiff.h"
#include "client/lazy.h"
#include "client/loop_test_util.h"
#include "client/optimizers.h"
#include "base/status_macros.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using testing::Values;
using testing::Vec;

std::unique_ptr<Client> Connect(const std::string& backend_config = "") {
  return testing::ConnectEmbedded(backend_config);
}

// w fitted to y = w * x by SGD with momentum; the loss is sum((w x - y)^2).
struct Fit {
  explicit Fit(LazyContext* ctx) : w(Vec(ctx, {1, -2, 3, 0.5})), sgd(0.05, 0.9) {
    sgd.InitState({w});
  }
  absl::StatusOr<std::vector<Tensor>> Step(const Tensor& x, const Tensor& y) {
    const Tensor d = w * x - y;
    Tensor loss = Sum(d * d);
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, Grad(loss, {w}));
    ASSIGN_OR_RETURN(std::vector<Tensor> updated, sgd.Step({w}, grads));
    w = updated[0];
    return std::vector<Tensor>{loss};
  }
  std::vector<Tensor*> State() {
    return {&w, &sgd.velocity()[0], sgd.learning_rate_tensor()};
  }
  Tensor w;
  Sgd sgd;
};

// Arguments that only the call holds (an initializer list keeps its own
// copies until the call returns, so nothing it holds can be donated).
std::vector<Tensor> Args(Tensor x, Tensor y) {
  std::vector<Tensor> args;
  args.push_back(std::move(x));
  args.push_back(std::move(y));
  return args;
}

std::vector<float> Batch(int step, float scale) {
  return {scale * step, 1.0f + step, -0.5f * step, 2.0f};
}

// Losses of `steps` steps traced the plain way, and the weights after them;
// the learning rate becomes `rates[step]` before each step that has one.
std::pair<std::vector<double>, std::vector<double>> Traced(Client* client, int steps,
                                                          const std::vector<double>& rates = {}) {
  auto ctx = LazyContext::Create(client);
  Fit fit(ctx.get());
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    if (step < static_cast<int>(rates.size())) fit.sgd.set_learning_rate(rates[step]);
    auto loss = fit.Step(Vec(ctx.get(), Batch(step, 1)), Vec(ctx.get(), Batch(step, 0.5)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(ctx->Barrier("cpu:0").ok());
    losses.push_back((*loss)[0].Item().value_or(-1));
  }
  return {losses, Values(fit.w)};
}

class CompiledFunctionTest : public ::testing::TestWithParam<bool> {};

TEST_P(CompiledFunctionTest, ReplayedStepsComputeWhatTracedStepsDo) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int kSteps = 6;
  const auto traced = Traced(client.get(), kSteps);

  auto ctx = LazyContext::Create(client.get());
  ctx->set_pipelined(GetParam());
  Fit fit(ctx.get());
  CompiledFunction step(ctx.get(), fit.State(), [&](const std::vector<Tensor>& args) {
    return fit.Step(args[0], args[1]);
  });
  std::vector<Tensor> losses;
  int64_t traced_ops = 0, donated = 0;
  for (int i = 0; i < kSteps; ++i) {
    auto out = step(Args(Vec(ctx.get(), Batch(i, 1)), Vec(ctx.get(), Batch(i, 0.5))));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    if (GetParam()) {
      EXPECT_TRUE(fit.w.node()->in_flight());
    }
    losses.push_back((*out)[0]);
    if (i == 0) {
      traced_ops = ctx->metrics().traced_ops;
      donated = ctx->metrics().donated_arguments;
    }
  }
  std::vector<double> read;
  for (const Tensor& l : losses) read.push_back(l.Item().value_or(-1));
  EXPECT_EQ(read, traced.first);
  EXPECT_EQ(Values(fit.w), traced.second);
  EXPECT_EQ(step.traces(), 1);
  EXPECT_EQ(step.replays(), kSteps - 1);
  EXPECT_EQ(ctx->metrics().replays, kSteps - 1);
  EXPECT_EQ(ctx->metrics().uncached_compiles + ctx->metrics().cached_compiles, 1);
  // A replay records no op.
  EXPECT_EQ(ctx->metrics().traced_ops, traced_ops);
  // Each replay gives the program the weights and velocity it replaces and
  // the batch (x, y); the learning rate stays.
  EXPECT_EQ(ctx->metrics().donated_arguments - donated, 4 * (kSteps - 1));
}

INSTANTIATE_TEST_SUITE_P(SynchronousAndPipelined, CompiledFunctionTest, ::testing::Bool());

TEST(CompiledFunction, ANewLearningRateReachesAReplayedStep) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<double> rates = {0.05, 0.05, 0.02, 0.02, 0.02, 0.01, 0.01};
  const auto traced = Traced(client.get(), 7, rates);
  auto ctx = LazyContext::Create(client.get());
  Fit fit(ctx.get());
  CompiledFunction step(ctx.get(), fit.State(), [&](const std::vector<Tensor>& args) {
    return fit.Step(args[0], args[1]);
  });
  std::vector<double> losses;
  for (int i = 0; i < 7; ++i) {
    fit.sgd.set_learning_rate(rates[i]);
    auto out = step({Vec(ctx.get(), Batch(i, 1)), Vec(ctx.get(), Batch(i, 0.5))});
    ASSERT_TRUE(out.ok()) << out.status();
    losses.push_back((*out)[0].Item().value_or(-1));
    if (i == 2) {
      EXPECT_EQ(step.trace_reason(), "state 2 undefined");
    }
  }
  EXPECT_EQ(losses, traced.first);
  EXPECT_EQ(Values(fit.w), traced.second);
  // The first call, and one per new rate.
  EXPECT_EQ(step.traces(), 3);
  EXPECT_EQ(step.replays(), 4);
}

TEST(CompiledFunction, ANewShapeTracesOnceAndBothProgramsStay) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction f(ctx.get(), {}, [](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{args[0] * 2.0 + 1.0});
  });
  const std::vector<std::vector<float>> calls = {{1, 2, 3, 4}, {5, 6, 7}, {0, 1, 2, 3}, {-1, 0, 1}};
  for (const auto& v : calls) {
    auto out = f({Vec(ctx.get(), v)});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> want;
    for (float e : v) want.push_back(e * 2.0 + 1.0);
    EXPECT_EQ(Values((*out)[0]), want);
    if (f.traces() == 2 && f.replays() == 0) {
      EXPECT_EQ(f.trace_reason(), "input 0 f32[4] -> f32[3]");
    }
  }
  EXPECT_EQ(f.traces(), 2);
  EXPECT_EQ(f.replays(), 2);
}

TEST(CompiledFunction, ArgumentsThatAreOneTensorAreTracedApart) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction difference(ctx.get(), {}, [](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{args[0] - args[1]});
  });
  Tensor x = Vec(ctx.get(), {1, 2});
  auto zero = difference({x, x});
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(Values((*zero)[0]), (std::vector<double>{0, 0}));
  // The program traced for (x, x) reads one parameter: it cannot run (x, y).
  auto apart = difference({x, Vec(ctx.get(), {5, 1})});
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(Values((*apart)[0]), (std::vector<double>{-4, 1}));
  EXPECT_EQ(difference.traces(), 2);
  EXPECT_EQ(difference.trace_reason(), "input 1 is its own tensor, traced as input 0");
  auto again = difference({Vec(ctx.get(), {3, 3}), Vec(ctx.get(), {1, 4})});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Values((*again)[0]), (std::vector<double>{2, -1}));
  EXPECT_EQ(difference.replays(), 1);
}

// The documented contract, as jax.jit's: a tensor the body reads that is
// neither an argument nor state is read as it was at the trace.
TEST(CompiledFunction, CapturedValuesAreReadAsTraced) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  Tensor offset = Vec(ctx.get(), {1, 1});
  CompiledFunction shift(ctx.get(), {}, [&](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{args[0] + offset});
  });
  ASSERT_TRUE(shift({Vec(ctx.get(), {1, 2})}).ok());
  offset = Vec(ctx.get(), {5, 5});
  auto out = shift({Vec(ctx.get(), {3, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{4, 5}));
  EXPECT_EQ(shift.replays(), 1);
}

// A tensor the body captures that is the node of one of its inputs when it
// traces (the starting weights, kept to pull the weights toward) stays
// that value on replays, apart from the input.
TEST(CompiledFunction, ACapturedCopyOfAnInputStaysApartFromIt) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  Tensor w = Vec(ctx.get(), {1, 2});
  const Tensor start = w;
  CompiledFunction pull(ctx.get(), {&w}, [&](const std::vector<Tensor>& args) {
    const Tensor distance = Sum((w - start) * (w - start));
    w = w + args[0];
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{distance});
  });
  std::vector<double> distances;
  for (int i = 0; i < 3; ++i) {
    auto out = pull({Vec(ctx.get(), {1, 1})});
    ASSERT_TRUE(out.ok()) << out.status();
    distances.push_back((*out)[0].Item().value_or(-1));
  }
  // w - start: (0, 0), (1, 1), (2, 2).
  EXPECT_EQ(distances, (std::vector<double>{0, 2, 8}));
  EXPECT_EQ(Values(w), (std::vector<double>{4, 5}));
  EXPECT_EQ(Values(start), (std::vector<double>{1, 2}));
  EXPECT_EQ(pull.replays(), 2);
}

// State the body only reads keeps its own tensor, traced or replayed.
TEST(CompiledFunction, StateTheBodyLeavesAloneKeepsItsTensor) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  ctx->set_pipelined(true);
  Tensor scale = Vec(ctx.get(), {2, 3});
  Tensor w = Vec(ctx.get(), {1, 1});
  const std::shared_ptr<Node> scale_node = scale.node();
  CompiledFunction step(ctx.get(), {&w, &scale}, [&](const std::vector<Tensor>& args) {
    w = w * scale + args[0];
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{});
  });
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(step({Vec(ctx.get(), {1, 0})}).ok());
    EXPECT_EQ(scale.node(), scale_node) << "call " << i;
  }
  // w: (1,1) -> (3,3) -> (7,9) -> (15,27).
  EXPECT_EQ(Values(w), (std::vector<double>{15, 27}));
  EXPECT_EQ(step.replays(), 2);
}

TEST(CompiledFunction, ABodyThatReadsAnArgumentIsTracedEveryCall) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction scaled(
      ctx.get(), {}, [](const std::vector<Tensor>& args) -> absl::StatusOr<std::vector<Tensor>> {
        // The scale, read on the host, becomes a constant of the trace.
        ASSIGN_OR_RETURN(double k, args[1].Item());
        return std::vector<Tensor>{args[0] * k};
      });
  for (float k : {2.0f, 3.0f}) {
    auto out = scaled({Vec(ctx.get(), {1, 2}), Vec(ctx.get(), {k})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<double>{k, 2 * k}));
  }
  EXPECT_EQ(scaled.traces(), 2);
  EXPECT_EQ(scaled.replays(), 0);
  EXPECT_EQ(scaled.trace_reason(), "the body runs a program or reads a value (traced every call)");
}

// A read of another context's value inside the body stops replays too.
TEST(CompiledFunction, ABodyThatReadsAnotherContextsValueIsTracedEveryCall) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  auto other = LazyContext::Create(client.get());
  Tensor k = Vec(other.get(), {3});
  CompiledFunction scaled(
      ctx.get(), {}, [&](const std::vector<Tensor>& args) -> absl::StatusOr<std::vector<Tensor>> {
        ASSIGN_OR_RETURN(double factor, k.Item());
        return std::vector<Tensor>{args[0] * factor};
      });
  for (float v : {1.0f, 2.0f}) {
    k = Vec(other.get(), {v + 1});
    auto out = scaled({Vec(ctx.get(), {1, 2})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<double>{v + 1, 2 * (v + 1)}));
  }
  EXPECT_EQ(scaled.replays(), 0);
}

TEST(CompiledFunction, AnUndefinedResultStaysUndefined) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction f(ctx.get(), {}, [](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{Tensor(), args[0] + 1.0});
  });
  for (float k : {1.0f, 2.0f}) {
    auto out = f({Vec(ctx.get(), {k})});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 2u);
    EXPECT_FALSE((*out)[0].defined());
    EXPECT_EQ(Values((*out)[1]), (std::vector<double>{k + 1}));
  }
  EXPECT_EQ(f.replays(), 1);
}

TEST(CompiledFunction, ABodyThatRunsAProgramIsTracedEveryCall) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction scaled(
      ctx.get(), {}, [](const std::vector<Tensor>& args) -> absl::StatusOr<std::vector<Tensor>> {
        // Reading a value runs a program inside the body.
        ASSIGN_OR_RETURN(double total, Sum(args[0]).Item());
        return std::vector<Tensor>{args[0] * total};
      });
  for (float k : {1.0f, 2.0f, 3.0f}) {
    auto out = scaled({Vec(ctx.get(), {k, k})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<double>{2 * k * k, 2 * k * k}));
  }
  EXPECT_EQ(scaled.traces(), 3);
  EXPECT_EQ(scaled.replays(), 0);
  EXPECT_EQ(scaled.trace_reason(), "the body runs a program or reads a value (traced every call)");
}

TEST(CompiledFunction, EagerModeTracesEveryCall) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  ctx->set_eager(true);
  CompiledFunction twice(ctx.get(), {}, [](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{args[0] * 2.0});
  });
  for (float k : {1.0f, 4.0f}) {
    auto out = twice({Vec(ctx.get(), {k})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<double>{2 * k}));
  }
  EXPECT_EQ(twice.traces(), 2);
  EXPECT_EQ(twice.trace_reason(), "eager mode");
}

TEST(CompiledFunction, LazyArgumentsAreComputedFirst) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction square(ctx.get(), {}, [](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{args[0] * args[0]});
  });
  for (float k : {2.0f, 3.0f}) {
    // A lazy argument: k + 1 is computed before the call's program.
    auto out = square({Vec(ctx.get(), {k}) + 1.0});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<double>{(k + 1) * (k + 1)}));
  }
  EXPECT_EQ(square.traces(), 1);
  EXPECT_EQ(square.replays(), 1);
}

TEST(CompiledFunction, AnUndefinedOrFailedArgumentIsAnError) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  CompiledFunction id(ctx.get(), {}, [](const std::vector<Tensor>& args) {
    return absl::StatusOr<std::vector<Tensor>>(args);
  });
  auto undefined = id({Tensor()});
  EXPECT_EQ(undefined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(undefined.status().message().find("argument 0 is undefined"), std::string::npos);
  auto failed = id({Vec(ctx.get(), {1, 2}) + Vec(ctx.get(), {1, 2, 3})});
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(id.traces(), 0);
}

// A replay the device cannot hold fails with its error on what it returns;
// the state it would have replaced is still there and still right.
TEST(CompiledFunction, AFailedReplayKeepsItsErrorAndLeavesTheStateAsItWas) {
  auto client = Connect("cpu.memory_bytes=65536");
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  Tensor w = ctx->FromVector<float>(ElementType::kF32, {1024}, std::vector<float>(1024, 1), "cpu:0");
  // State the body writes without reading: the program does not hold it.
  Tensor total = Vec(ctx.get(), {0});
  CompiledFunction step(ctx.get(), {&w, &total}, [&](const std::vector<Tensor>& args) {
    w = w * 2.0 + args[0];
    total = Reshape(Sum(w), {1});
    return absl::StatusOr<std::vector<Tensor>>(std::vector<Tensor>{Sum(w)});
  });
  auto ones = [&] {
    return ctx->FromVector<float>(ElementType::kF32, {1024}, std::vector<float>(1024, 1), "cpu:0");
  };
  auto first = step({ones()});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)[0].Item().value_or(-1), 3 * 1024);
  // Most of the device's memory taken; the old weights kept by a handle
  // (so not given to the program).
  Tensor filler = ctx->FromVector<float>(ElementType::kF32, {7000},
                                         std::vector<float>(7000, 1), "cpu:0");
  Tensor filled = filler + 1.0;
  ASSERT_TRUE(ctx->Realize({filled}).ok());
  const Tensor before = w;
  const Node* total_before = total.node().get();
  auto second = step({ones()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_EQ(step.replays(), 1);
  EXPECT_EQ(w.node(), before.node());
  EXPECT_EQ(total.node().get(), total_before);
  EXPECT_EQ(Values(total), (std::vector<double>{3 * 1024}));
  // With the memory back, the same call replays and continues from w.
  filler = Tensor();
  filled = Tensor();
  ASSERT_TRUE(client->FlushReleases().ok());
  auto third = step({ones()});
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)[0].Item().value_or(-1), 7 * 1024);
  EXPECT_EQ(step.replays(), 2);
}

}  // namespace
}  // namespace kiln::client
