// Lazy tensors over the embedded service: tracing, barriers, the compile
// cache, recompile explanations, device and precision errors, eager mode.
#include "client/tensor.h"

#include <cmath>
#include <sstream>

#include "client/autodiff.h"
#include "client/lazy.h"
#include "client/loop.h"
#include "client/loop_test_util.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using testing::Values;

class TensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    embedded::Options options;
    options.devices = "cpu:2";
    client_ = *embedded::Connect(options);
    ctx_ = LazyContext::Create(client_.get());
  }
  Tensor Vec(std::vector<float> v, const std::string& device = "cpu:0") {
    return ctx_->FromVector<float>(ElementType::kF32, {int64_t(v.size())}, v, device);
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

// The generator CounterUniform is documented to compute, on the host.
double HostCounterUniform(uint64_t seed, uint32_t counter, uint32_t i) {
  const uint32_t key = static_cast<uint32_t>(seed ^ (seed >> 32));
  auto fmix = [](uint32_t h) {
    h = (h ^ (h >> 16)) * 0x85EBCA6Bu;
    h = (h ^ (h >> 13)) * 0xC2B2AE35u;
    return h ^ (h >> 16);
  };
  const uint32_t h = fmix((i * 0x9E3779B1u) ^ fmix(counter * 0x85EBCA77u + key));
  return static_cast<double>(h >> 8) / 16777216.0;
}

TEST_F(TensorTest, CounterUniformIsAHashOfSeedCounterAndIndex) {
  auto counter = [&](uint32_t c) {
    return ctx_->FromVector<uint32_t>(ElementType::kU32, {}, {c}, "cpu:0");
  };
  std::vector<double> a = Values(CounterUniform(counter(5), 11, {40, 50}));
  ASSERT_EQ(a.size(), 2000u);
  double sum = 0;
  for (uint32_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], HostCounterUniform(11, 5, i)) << i;
    ASSERT_GE(a[i], 0);
    ASSERT_LT(a[i], 1);
    sum += a[i];
  }
  // 2000 uniform draws: the mean is 0.5 +- 0.0065 (one sigma).
  EXPECT_NEAR(sum / a.size(), 0.5, 0.03);
  // The same seed and count give the same numbers in another program;
  // another count or seed gives others.
  EXPECT_EQ(Values(CounterUniform(counter(5), 11, {2000})), a);
  std::vector<double> next = Values(CounterUniform(counter(6), 11, {2000}));
  std::vector<double> other = Values(CounterUniform(counter(5), 12, {2000}));
  int same_next = 0, same_other = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_next += next[i] == a[i];
    same_other += other[i] == a[i];
  }
  EXPECT_LT(same_next, 5);
  EXPECT_LT(same_other, 5);
  // Nor is the next counter's sequence this one shifted by a few places.
  for (int shift = 1; shift < 64; ++shift) {
    int same = 0;
    for (size_t i = 0; i + shift < a.size(); ++i) same += next[i] == a[i + shift];
    ASSERT_LT(same, 5) << "shift " << shift;
  }
  // Misuse is an error tensor, not a crash.
  EXPECT_FALSE(CounterUniform(Vec({1}), 1, {3}).status().ok());
  EXPECT_FALSE(CounterUniform(counter(0), 1, {3}, ElementType::kS32).status().ok());
  EXPECT_FALSE(Iota(Vec({1}), ir::Shape(ElementType::kF32, {3}), 0).status().ok());
  EXPECT_FALSE(Iota(Vec({1}), ir::Shape(ElementType::kS32, {3}), 1).status().ok());
  EXPECT_FALSE(Iota(Vec({1}), ir::Shape(ElementType::kS32, {}), 0).status().ok());
  EXPECT_EQ(Values(Iota(Vec({1}), ir::Shape(ElementType::kS32, {2, 3}), 1)),
            (std::vector<double>{0, 1, 2, 0, 1, 2}));
}

// A chain of 200,000 recorded ops dies without recursing once per node
// (which would overflow the stack), both when nothing else holds its
// operands and when a handle still holds one of them.
TEST_F(TensorTest, LongChainsDieWithoutRecursion) {
  Tensor a = Vec({1});
  Tensor kept;
  {
    Tensor x = a;
    for (int i = 0; i < 200000; ++i) {
      x = x + a;
      if (i == 100000) kept = x;
    }
  }
  EXPECT_TRUE(kept.status().ok());
  kept = Tensor();
  EXPECT_EQ(Values(a + a), (std::vector<double>{2}));
}

// Unary ops take the element types the IR's rules allow, asked once per
// (op, type): a float op on integers fails with the IR's message, every
// time it is asked, and the allowed ones run.
TEST_F(TensorTest, UnaryOpsCheckTheirElementType) {
  Tensor ints =
      ctx_->FromVector<int32_t>(ElementType::kS32, {3}, std::vector<int32_t>{1, -2, 3}, "cpu:0");
  for (int i = 0; i < 2; ++i) {
    Tensor e = Exp(ints);
    ASSERT_FALSE(e.status().ok());
    EXPECT_NE(std::string(e.status().message()).find("exponential"), std::string::npos)
        << e.status();
  }
  EXPECT_EQ(Values(Abs(ints)), (std::vector<double>{1, 2, 3}));
  const std::vector<double> t = Values(Tanh(Vec({0, 1})));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[1], std::tanh(1.0), 1e-6);
}

TEST_F(TensorTest, SortsArgsortsAndTopK) {
  Tensor x = Vec({3, 1, 2, 1, 5});
  // Stable: the two ones keep their order either way.
  EXPECT_EQ(Values(Argsort(x)), (std::vector<double>{1, 3, 2, 0, 4}));
  EXPECT_EQ(Values(Argsort(x, 0, true)), (std::vector<double>{4, 0, 2, 1, 3}));
  EXPECT_EQ(Values(Sort(x)), (std::vector<double>{1, 1, 2, 3, 5}));
  Tensor m = ctx_->FromVector<float>(ElementType::kF32, {2, 3}, {4, 9, 1, 7, 2, 8}, "cpu:0");
  EXPECT_EQ(Values(Sort(m, 0)), (std::vector<double>{4, 2, 1, 7, 9, 8}));
  EXPECT_EQ(Values(Sort(m, 1, true)), (std::vector<double>{9, 4, 1, 8, 7, 2}));
  TopKResult top = TopK(m, 2);
  EXPECT_EQ(top.values.shape().dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values(top.values), (std::vector<double>{9, 4, 8, 7}));
  EXPECT_EQ(Values(top.indices), (std::vector<double>{1, 0, 2, 0}));
  Tensor picks = ctx_->FromVector<int32_t>(ElementType::kS32, {2, 1}, {2, 1}, "cpu:0");
  EXPECT_EQ(Values(TakeAlong(m, picks, 1)), (std::vector<double>{1, 2}));
  EXPECT_FALSE(TopK(m, 4).values.status().ok());
  EXPECT_FALSE(Argsort(Sum(x)).status().ok());
  EXPECT_FALSE(TakeAlong(m, Vec({0}), 1).status().ok());
}

TEST_F(TensorTest, CorrectCountCountsRowsWhoseLargestEntryIsTheLabel) {
  Tensor logits =
      ctx_->FromVector<float>(ElementType::kF32, {3, 3}, {1, 3, 2, 5, 0, 1, 0, 0, 9}, "cpu:0");
  Tensor labels = ctx_->FromVector<int32_t>(ElementType::kS32, {3}, {1, 0, 0}, "cpu:0");
  Tensor correct = CorrectCount(logits, labels);
  EXPECT_EQ(correct.dtype(), ElementType::kF32);
  EXPECT_EQ(Values(correct), (std::vector<double>{2}));
}

TEST_F(TensorTest, DynamicSlicesTakeTheirStartsFromTheDevice) {
  Tensor x = ctx_->FromVector<float>(ElementType::kF32, {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}, "cpu:0");
  Tensor one = ctx_->FromVector<int32_t>(ElementType::kS32, {}, {1}, "cpu:0");
  Tensor zero = ctx_->FromVector<int32_t>(ElementType::kS32, {}, {0}, "cpu:0");
  auto s = DynamicSlice(x, {zero, one * 2}, {2, 2}).ToHost();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ToText(), "{{2, 3}, {6, 7}}");
  // Clamped: a start of 3 for 2 columns of 4 becomes 2.
  auto clamped = DynamicSlice(x, {one, one * 3}, {1, 2}).ToHost();
  ASSERT_TRUE(clamped.ok());
  EXPECT_EQ(clamped->ToText(), "{{6, 7}}");
  Tensor patch = ctx_->FromVector<float>(ElementType::kF32, {1, 2}, {-1, -2}, "cpu:0");
  auto updated = DynamicUpdateSlice(x, patch, {one, one}).ToHost();
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->ToText(), "{{0, 1, 2, 3}, {4, -1, -2, 7}}");
  EXPECT_FALSE(DynamicSlice(x, {one}, {1, 2}).status().ok());  // a start per dimension
}

TEST_F(TensorTest, SamePoolingPadsLikeTensorFlowAndIgnoresThePadding) {
  Tensor x = ctx_->FromVector<float>(ElementType::kF32, {1, 3, 3, 1},
                                     {1, 2, 3, 4, 5, 6, 7, 8, 9}, "cpu:0");
  auto max = MaxPool2D(x, 2, 2, "SAME").ToHost();
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(max->shape().ToString(), "f32[1,2,2,1]");
  EXPECT_EQ(max->ToText(), "{{{{5}, {6}}, {{8}, {9}}}}");
  // The mean of what each window covers: 4, 2, 2 and 1 elements.
  auto avg = AvgPool2D(x, 2, 2, "SAME").ToHost();
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_EQ(avg->ToText(), "{{{{3}, {4.5}}, {{7.5}, {9}}}}");
  // All-negative values: padding (-inf for the maximum) is never taken.
  auto neg = MaxPool2D(x * -1.0, 3, 1, "SAME").ToHost();
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(neg->ToText(), "{{{{-1}, {-1}, {-2}}, {{-1}, {-1}, {-2}}, {{-4}, {-4}, {-5}}}}");
  EXPECT_FALSE(MaxPool2D(x, 2, 2, "FULL").status().ok());
}

TEST_F(TensorTest, OpsOnlyRecordUntilABarrier) {
  Tensor a = Vec({1, 2, 3});
  Tensor b = (a * 2.0 + 1.0) * a;
  EXPECT_EQ(ctx_->metrics().executions, 0);
  EXPECT_FALSE(b.node()->realized());
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  EXPECT_EQ(ctx_->metrics().executions, 1);
  EXPECT_TRUE(b.node()->realized());
  EXPECT_EQ(Values(b), (std::vector<double>{3, 10, 21}));
}

// A small value from the host rides along with the first execution that
// reads it (no upload of its own) and is kept on the device for the next;
// reading it back needs no server at all.
TEST_F(TensorTest, SmallHostValuesTravelWithTheirFirstExecution) {
  ASSERT_GE(client_->protocol_version(), 4u);
  Tensor x = Vec({1, 2, 3});
  EXPECT_TRUE(x.node()->host_only());
  EXPECT_EQ(ctx_->metrics().bytes_to_device, 0);
  EXPECT_EQ(Values(x), (std::vector<double>{1, 2, 3}));  // from the host copy
  Tensor y = x * 2.0;
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  EXPECT_EQ(ctx_->metrics().bytes_to_device, 12);
  // x still has a handle: the server kept it.
  EXPECT_FALSE(x.node()->host_only());
  ASSERT_NE(x.node()->data, nullptr);
  auto back = client_->TransferFromDevice(*x.node()->data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data<float>()[2], 3.0f);
  // The next program reads the kept buffer: nothing is sent again.
  Tensor z = x + y;
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  EXPECT_EQ(ctx_->metrics().bytes_to_device, 12);
  EXPECT_EQ(Values(z), (std::vector<double>{3, 6, 9}));
}

// A batch nothing reads after its step is donated: the server does not
// keep it, and nothing of it stays charged.
TEST_F(TensorTest, AHostValueReadOnlyByItsStepIsNotKept) {
  Tensor w = Vec({1, 2, 3});
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  const int64_t before = client_->MemoryInfo("cpu:0")->bytes_in_use();
  for (int step = 0; step < 3; ++step) {
    Tensor batch = Vec({10, 20, 30});
    w = w + batch;
    batch = Tensor();
    ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
    ASSERT_TRUE(client_->FlushReleases().ok());
  }
  EXPECT_EQ(Values(w), (std::vector<double>{31, 62, 93}));
  // Only w, replaced in place of the first: the batches were not kept.
  EXPECT_EQ(client_->MemoryInfo("cpu:0")->bytes_in_use() - before, 12);
}

TEST_F(TensorTest, HostValuesForAnUnknownDeviceFailAtOnceAndLargeOnesUploadAtOnce) {
  Tensor bad = Vec({1}, "cpu:7");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("unknown device 'cpu:7'"), std::string::npos)
      << bad.status();
  const int64_t n = kInlineArgumentMaxBytes / 4 + 1;
  Tensor big = ctx_->FromLiteral(ir::Literal(ir::Shape(ElementType::kF32, {n})), "cpu:0");
  ASSERT_TRUE(big.status().ok()) << big.status();
  EXPECT_FALSE(big.node()->host_only());
  EXPECT_EQ(ctx_->metrics().bytes_to_device, n * 4);
}

// A step that replaces its state donates the old values: no handle and no
// other node can read them afterwards. Values with a handle, or read by a
// node outside the step, are kept.
TEST_F(TensorTest, AStepDonatesTheStateItReplaces) {
  Tensor w = Vec({1, 2, 3});
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  for (int step = 0; step < 3; ++step) {
    w = w * 2.0;  // the old w loses its last handle
    ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  }
  EXPECT_EQ(ctx_->metrics().donated_arguments, 3);
  EXPECT_EQ(Values(w), (std::vector<double>{8, 16, 24}));

  Tensor kept = Vec({1, 1});
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  Tensor doubled = kept * 2.0;
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  EXPECT_EQ(ctx_->metrics().donated_arguments, 3);  // `kept` has a handle
  EXPECT_EQ(Values(kept), (std::vector<double>{1, 1}));

  Tensor x = Vec({5});
  ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  Tensor later = x + 1.0;  // recorded, not run: it reads x
  Tensor now = x * 3.0;
  x = Tensor();
  ASSERT_TRUE(ctx_->Realize({now}).ok());
  EXPECT_EQ(ctx_->metrics().donated_arguments, 3);  // `later` still reads x
  EXPECT_EQ(Values(later), (std::vector<double>{6}));
  EXPECT_EQ(Values(now), (std::vector<double>{15}));
}

// An intermediate the user holds a handle to, over an argument nobody holds.
TEST_F(TensorTest, ReadingOneValueKeepsArgumentsOfIntermediatesWithAHandle) {
  Tensor x = Vec({5});
  Tensor h = x * 2.0;  // unrealized, has a handle, reads x
  Tensor now = h * 3.0;
  x = Tensor();  // x: no handle; only h's operand edge refers to it
  ASSERT_TRUE(ctx_->Realize({now}).ok());
  EXPECT_EQ(Values(now), (std::vector<double>{30}));
  EXPECT_EQ(ctx_->metrics().donated_arguments, 0);
  EXPECT_EQ(Values(h), (std::vector<double>{10}));
}

// An intermediate without a handle, shared with another pending value
// (e.g. Reshape(FromLiteral(batch)) read by the loss and by a gradient):
// Item() on one of them before the barrier.
TEST_F(TensorTest, ItemBeforeTheBarrierKeepsArgumentsOfSharedIntermediates) {
  Tensor later, now;
  {
    Tensor x = Vec({5});
    Tensor t = x * 2.0;
    later = t + 1.0;
    now = t * 3.0;
  }  // x and t: no handles; x is read only through t
  absl::StatusOr<double> v = now.Item();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 30);
  EXPECT_EQ(Values(later), (std::vector<double>{11}));
  EXPECT_TRUE(ctx_->Barrier("cpu:0").ok());
}

TEST_F(TensorTest, PrintsShapeDeviceAndValuesInShortestForm) {
  EXPECT_EQ(Tensor().ToString(), "Tensor(undefined)");
  // Printing reads the value, so it forces execution.
  Tensor scaled = Vec({4, 0.1f, 1e-7f}) * 10.0;
  EXPECT_FALSE(scaled.node()->realized());
  EXPECT_EQ(scaled.ToString(), "Tensor(f32[3] on cpu:0 [40, 1, 1e-06])");
  EXPECT_TRUE(scaled.node()->realized());
  EXPECT_EQ(Vec({10, 0.1f, 1e-7f, -2.5f}).ToString(),
            "Tensor(f32[4] on cpu:0 [10, 0.1, 1e-07, -2.5])");
  EXPECT_EQ(Sum(Vec({1, 2}), {}).ToString(), "Tensor(f32[] on cpu:0 3)");
  // bf16 storage prints the shortest decimal that rounds to the same bf16.
  EXPECT_EQ(Vec({40, 0.1f}).ToReducedPrecision().ToString(),
            "Tensor(f32[2] stored as bf16 on cpu:0 [40, 0.1])");
  EXPECT_EQ(Cast(Vec({40, 0.1f}), ElementType::kBF16).ToString(),
            "Tensor(bf16[2] on cpu:0 [40, 0.1])");
  Tensor m = ctx_->FromVector<int32_t>(ElementType::kS32, {2, 2, 2},
                                       std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}, "cpu:1");
  std::ostringstream printed;
  printed << m;
  EXPECT_EQ(printed.str(),
            "Tensor(s32[2,2,2] on cpu:1\n"
            "[[[1, 2],\n"
            "  [3, 4]],\n"
            "\n"
            " [[5, 6],\n"
            "  [7, 8]]])");
}

TEST_F(TensorTest, PrintingElidesTheMiddleOfLargeTensors) {
  std::vector<float> v(2000);
  for (int i = 0; i < 2000; ++i) v[i] = i;
  Tensor t = ctx_->FromVector<float>(ElementType::kF32, {2, 1000}, v, "cpu:0");
  EXPECT_EQ(t.ToString(),
            "Tensor(f32[2,1000] on cpu:0\n"
            "[[0, 1, 2, ..., 997, 998, 999],\n"
            " [1000, 1001, 1002, ..., 1997, 1998, 1999]])");
  // 1000 elements or fewer print whole.
  EXPECT_EQ(Vec(std::vector<float>(7, 1)).ToString(),
            "Tensor(f32[7] on cpu:0 [1, 1, 1, 1, 1, 1, 1])");
}

TEST_F(TensorTest, PrintingAFailedTensorShowsTheError) {
  Tensor bad = Vec({1, 2}) + Vec({1, 2, 3});
  const std::string text = bad.ToString();
  EXPECT_EQ(text.rfind("Tensor(", 0), 0u) << text;
  EXPECT_NE(text.find("INVALID_ARGUMENT"), std::string::npos) << text;
}

// A failed execution's error stays on its tensors: reading them again
// reports it without running the program again.
TEST_F(TensorTest, AFailedExecutionsErrorStaysOnTheTensor) {
  embedded::Options small;
  small.backend_config = "cpu.memory_bytes=4096";
  auto client = *embedded::Connect(small);
  auto ctx = LazyContext::Create(client.get());
  Tensor x = ctx->FromVector<float>(ElementType::kF32, {4}, {1, 2, 3, 4}, "cpu:0");
  // 4096 bytes of device memory cannot hold the 64 KiB product (summed over
  // its middle dimension, which no loop folds as it computes, so the
  // product is written out).
  Tensor big = Sum(Sum(BroadcastTo(x, {64, 64, 4}) * 2.0, {1}), {});
  auto first = big.Item();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kResourceExhausted) << first.status();
  const int64_t executions = ctx->metrics().executions;
  const int64_t failed_runs = [&] {
    auto m = client->Metrics();
    for (const auto& c : m->counters()) {
      if (c.name() == "execute_errors") return c.value();
    }
    return int64_t{-1};
  }();
  auto again = big.Item();
  EXPECT_EQ(again.status(), first.status());
  auto m = client->Metrics();
  for (const auto& c : m->counters()) {
    if (c.name() == "execute_errors") {
      EXPECT_EQ(c.value(), failed_runs);
    }
  }
  EXPECT_EQ(ctx->metrics().executions, executions);
  EXPECT_EQ(failed_runs, 1);
}

// The same program on two devices is two executables: each runs where its
// inputs are.
TEST_F(TensorTest, TheSameProgramOnTwoDevicesRunsOnEach) {
  for (const std::string device : {"cpu:0", "cpu:1", "cpu:0"}) {
    Tensor t = Sum(Vec({1, 2, 3}, device) * 2.0, {});
    EXPECT_EQ(t.device(), device);
    auto v = t.Item();
    ASSERT_TRUE(v.ok()) << device << ": " << v.status();
    EXPECT_EQ(*v, 12);
  }
  // The server compiled once (its cache serves every device of a backend);
  // cpu:1 was a server cache hit, the second cpu:0 this context's own.
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 1);
  EXPECT_EQ(ctx_->metrics().cached_compiles, 2);
}

TEST_F(TensorTest, ReportShowsCompileCountAndTime) {
  Tensor a = Vec({1, 2, 3});
  Tensor s = Sum(a * 3.0, {});
  ASSERT_TRUE(s.Item().ok());
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 1);
  EXPECT_GT(ctx_->metrics().compile_seconds, 0);
  EXPECT_GE(ctx_->metrics().compile_call_seconds, ctx_->metrics().compile_seconds);
  const std::string report = ctx_->Report();
  EXPECT_NE(report.find("uncached compiles    1 ("), std::string::npos) << report;
  EXPECT_NE(report.find("s compiling on the server)"), std::string::npos) << report;
  EXPECT_NE(report.find("compile calls"), std::string::npos) << report;
}

TEST_F(TensorTest, ItemForcesOnlyWhatItNeeds) {
  Tensor a = Vec({1, 2, 3});
  Tensor unrelated = a * 100.0;
  Tensor s = Sum(a);
  auto v = s.Item();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 6);
  EXPECT_FALSE(unrelated.node()->realized());
}

TEST_F(TensorTest, BroadcastingReductionsAndShapes) {
  Tensor m = ctx_->FromVector<float>(ElementType::kF32, {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}, "cpu:0");
  Tensor row = Vec({10, 20, 30});
  EXPECT_EQ(Values(m + row), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(Values(Sum(m, {0})), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(Values(Mean(m, {1})), (std::vector<double>{2, 5}));
  EXPECT_EQ(Values(ReduceMax(m, {1}, true)), (std::vector<double>{3, 6}));
  EXPECT_EQ(Values(Transpose(m, {1, 0})), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(Values(Argmax(m, 1)), (std::vector<double>{2, 2}));
  Tensor labels = ctx_->FromVector<int>(ElementType::kS32, {2}, std::vector<int>{2, 0}, "cpu:0");
  EXPECT_EQ(Values(OneHot(labels, 3)), (std::vector<double>{0, 0, 1, 1, 0, 0}));
  auto sm = Values(Softmax(m, 1));
  EXPECT_NEAR(sm[0] + sm[1] + sm[2], 1.0, 1e-6);
  EXPECT_NEAR(sm[2], 0.66524096, 1e-6);
}

TEST_F(TensorTest, SameGraphHitsTheCacheAndANewShapeIsExplained) {
  auto step = [&](int n) {
    std::vector<float> v(n, 1.0f);
    Tensor x = Vec(v);
    Tensor y = Exp(x) * 3.0;
    EXPECT_TRUE(ctx_->Barrier("cpu:0").ok());
    return Values(y)[0];
  };
  EXPECT_NEAR(step(4), 3 * 2.718281828, 1e-5);
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 1);
  for (int i = 0; i < 5; ++i) step(4);  // new data, same shapes
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 1);
  EXPECT_EQ(ctx_->metrics().cached_compiles, 5);
  step(7);  // one new compile, explained
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 2);
  ASSERT_EQ(ctx_->recompile_explanations().size(), 1u);
  EXPECT_NE(ctx_->recompile_explanations()[0].find("input 0 shape f32[4] -> f32[7]"),
            std::string::npos)
      << ctx_->recompile_explanations()[0];
  EXPECT_NE(ctx_->Report().find("recompiles:"), std::string::npos);
}

TEST_F(TensorTest, ChangedOpIsExplained) {
  for (bool subtract : {false, true}) {
    Tensor x = Vec({1, 2});
    Tensor y = subtract ? x - x : x + x;
    ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  }
  ASSERT_EQ(ctx_->recompile_explanations().size(), 1u);
  EXPECT_NE(ctx_->recompile_explanations()[0].find("changed from add to subtract"),
            std::string::npos)
      << ctx_->recompile_explanations()[0];
}

TEST_F(TensorTest, MixingDevicesIsAnErrorNamingBoth) {
  Tensor a = Vec({1, 2}, "cpu:0");
  Tensor b = Vec({3, 4}, "cpu:1");
  EXPECT_EQ(a.device(), "cpu:0");
  EXPECT_EQ(b.device(), "cpu:1");
  Tensor c = a + b;
  ASSERT_FALSE(c.status().ok());
  EXPECT_NE(c.status().message().find("cpu:0 and cpu:1"), std::string::npos) << c.status();
  EXPECT_FALSE((c * 2.0).status().ok());  // errors propagate
  EXPECT_FALSE(c.Item().ok());
  // An explicit copy makes it work.
  auto moved = b.ToDevice("cpu:0");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->device(), "cpu:0");
  EXPECT_EQ(Values(a + *moved), (std::vector<double>{4, 6}));
}

TEST_F(TensorTest, ReducedPrecisionRoundTripAndMixingError) {
  Tensor a = Vec({1.0f, 1.00390625f, 3.0f});
  Tensor r = a.ToReducedPrecision();
  EXPECT_TRUE(r.IsReducedPrecision());
  EXPECT_FALSE(a.IsReducedPrecision());
  Tensor back = r.ToFullPrecision();
  EXPECT_FALSE(back.IsReducedPrecision());
  EXPECT_EQ(Values(back), (std::vector<double>{1, 1, 3}));  // rounded through bf16
  Tensor mixed = a + r;
  ASSERT_FALSE(mixed.status().ok());
  EXPECT_NE(mixed.status().message().find("reduced precision"), std::string::npos);
  EXPECT_EQ(Values(r * r), (std::vector<double>{1, 1, 9}));
}

// Reduced precision is a property of the storage: the tensor stays f32
// (its type, its values read on the host), is stored and computed in bf16,
// and so are the results of ops on it; mixing stays an error.
TEST_F(TensorTest, ReducedPrecisionKeepsTheLogicalType) {
  Tensor a = Vec({1.0f, 1.00390625f, 3.0f});
  Tensor r = a.ToReducedPrecision();
  EXPECT_EQ(r.dtype(), ElementType::kF32);
  EXPECT_EQ(r.storage_type(), ElementType::kBF16);
  auto host = r.ToHost();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->shape(), ir::Shape(ElementType::kF32, {3}));
  EXPECT_EQ(Values(r), (std::vector<double>{1, 1, 3}));
  auto stored = r.ReadStorage();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->shape(), ir::Shape(ElementType::kBF16, {3}));
  // Results of ops on it (with scalars, reductions, broadcasts, zeros like
  // it) are reduced precision; a comparison's is pred.
  for (const Tensor& t : {r * r, r * 2.0, 1.0 - r, Sum(r), Exp(r), ZerosLike(r),
                          BroadcastTo(Sum(r), {2, 3}), Select(Greater(r, r), r, r)}) {
    ASSERT_TRUE(t.status().ok()) << t.status();
    EXPECT_TRUE(t.IsReducedPrecision()) << t.ToString();
    EXPECT_EQ(t.dtype(), ElementType::kF32) << t.ToString();
  }
  EXPECT_EQ(Values(r * 2.0), (std::vector<double>{2, 2, 6}));
  EXPECT_FALSE(Greater(r, r).IsReducedPrecision());
  EXPECT_EQ(Greater(r, r).dtype(), ElementType::kPred);
  // A bf16 tensor by conversion is a bf16 tensor, not a reduced f32 one,
  // whether it was full or reduced precision; a reduced one cast to f32 is
  // full precision.
  Tensor genuine = Cast(a, ElementType::kBF16);
  EXPECT_EQ(genuine.dtype(), ElementType::kBF16);
  EXPECT_FALSE(genuine.IsReducedPrecision());
  Tensor recast = Cast(r, ElementType::kBF16);
  EXPECT_EQ(recast.dtype(), ElementType::kBF16);
  EXPECT_FALSE(recast.IsReducedPrecision());
  EXPECT_EQ(Values(recast), (std::vector<double>{1, 1, 3}));
  EXPECT_EQ(Cast(r, ElementType::kF32).storage_type(), ElementType::kF32);
  EXPECT_FALSE(Cast(r, ElementType::kF32).IsReducedPrecision());
  // Converting twice, or what is not full-precision f32, changes nothing.
  EXPECT_EQ(r.ToReducedPrecision().node(), r.node());
  Tensor ints = ctx_->FromVector<int32_t>(ElementType::kS32, {2}, {1, 2}, "cpu:0");
  EXPECT_EQ(ints.ToReducedPrecision().node(), ints.node());
  EXPECT_EQ(a.ToFullPrecision().node(), a.node());
  Tensor back = r.ToFullPrecision();
  EXPECT_EQ(back.storage_type(), ElementType::kF32);
  EXPECT_FALSE(back.IsReducedPrecision());
  // Mixing reduced and full precision in one op is an error.
  Tensor mixed = a * r;
  ASSERT_FALSE(mixed.status().ok());
  EXPECT_NE(mixed.status().message().find("mixes reduced precision"), std::string::npos);
  // Copies to another device stay reduced.
  auto moved = r.ToDevice("cpu:1");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_TRUE(moved->IsReducedPrecision());
  EXPECT_EQ(Values(*moved), (std::vector<double>{1, 1, 3}));
}

// Reduced precision survives device loops, conditionals and gradients.
TEST_F(TensorTest, ReducedPrecisionThroughLoopsConditionalsAndGradients) {
  Tensor r = Vec({0.5f, 2.0f}).ToReducedPrecision();
  auto looped = While(3, {r}, [](DeviceLoop&, const std::vector<Tensor>& s)
                                  -> absl::StatusOr<std::vector<Tensor>> {
    EXPECT_TRUE(s[0].IsReducedPrecision());
    return std::vector<Tensor>{s[0] * 2.0};
  });
  ASSERT_TRUE(looped.ok()) << looped.status();
  EXPECT_TRUE((*looped)[0].IsReducedPrecision());
  EXPECT_EQ(Values((*looped)[0]), (std::vector<double>{4, 16}));
  ir::Literal yes(ir::Shape::Scalar(ElementType::kPred));
  yes.SetFromDouble(0, 1);
  auto branched = Cond(
      ctx_->FromLiteral(yes, "cpu:0"), {r},
      [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[0] + 1.0};
      },
      [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[0]};
      });
  ASSERT_TRUE(branched.ok()) << branched.status();
  EXPECT_TRUE((*branched)[0].IsReducedPrecision());
  EXPECT_EQ(Values((*branched)[0]), (std::vector<double>{1.5, 3}));
  auto grads = Grad(Sum(r * r), {r});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE((*grads)[0].IsReducedPrecision());
  EXPECT_EQ((*grads)[0].dtype(), ElementType::kF32);
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{1, 4}));
}

TEST_F(TensorTest, EagerModeRunsEveryOp) {
  ctx_->set_eager(true);
  Tensor a = Vec({1, 2});
  Tensor b = a * a;
  EXPECT_TRUE(b.node()->realized());
  Tensor c = b + a;
  EXPECT_TRUE(c.node()->realized());
  EXPECT_EQ(Values(c), (std::vector<double>{2, 6}));
  EXPECT_GE(ctx_->metrics().executions, 2);
}

// Gradients reach back through eager ops: each value keeps the graph that
// made it until the next barrier, which then lets it go.
TEST_F(TensorTest, EagerValuesKeepTheirGraphForGradientsUntilABarrier) {
  ctx_->set_eager(true);
  Tensor w = Vec({1, 2});
  Tensor loss = Sum(w * w + w);
  ASSERT_TRUE(loss.node()->realized());
  auto grads = Grad(loss, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{3, 5}));
  EXPECT_FALSE(loss.node()->operands.empty());
  ASSERT_TRUE(ctx_->Barrier(loss.device()).ok());
  EXPECT_TRUE(loss.node()->operands.empty());
  EXPECT_EQ(Values(loss), (std::vector<double>{8}));
}

TEST_F(TensorTest, EagerValuesComputedWithoutGradientsAreConstants) {
  ctx_->set_eager(true);
  Tensor w = Vec({1, 2});
  Tensor squared;
  {
    NoGradients scope(*ctx_);
    EXPECT_FALSE(ctx_->record_gradients());
    squared = w * w;
    Tensor loss = Sum(squared + w);
    ASSERT_TRUE(loss.node()->realized());
    EXPECT_TRUE(loss.node()->operands.empty());
    EXPECT_EQ(Values(loss), (std::vector<double>{8}));
    auto grads = Grad(loss, {w});
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{0, 0}));
  }
  EXPECT_TRUE(ctx_->record_gradients());
  // Recorded again: the gradient reaches w through the add, not through
  // the square computed without gradients.
  Tensor loss = Sum(squared + w);
  auto grads = Grad(loss, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{1, 1}));
}

TEST_F(TensorTest, LazyValuesRecordedWithoutGradientsAreConstants) {
  Tensor w = Vec({1, 2});
  Tensor squared;
  {
    NoGradients scope(*ctx_);
    squared = w * w;  // traced, not computed yet
  }
  EXPECT_FALSE(squared.node()->realized());
  Tensor loss = Sum(squared + w);
  auto grads = Grad(loss, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{1, 1}));
  EXPECT_EQ(Values(loss), (std::vector<double>{8}));
}

TEST_F(TensorTest, ShapeErrorsAreStatuses) {
  Tensor a = Vec({1, 2, 3});
  Tensor b = Vec({1, 2});
  EXPECT_NE((a + b).status().message().find("do not broadcast"), std::string::npos);
  EXPECT_FALSE(Reshape(a, {2, 2}).status().ok());
  EXPECT_FALSE(Matmul(a, b).status().ok());
}

}  // namespace
}  // namespace kiln::client
