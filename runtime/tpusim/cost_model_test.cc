// The cost model's pricing of fused regions, precision, feeds, static
// estimates and trip counts, against hand-computed values.
#include "runtime/tpusim/cost_model.h"

#include "compiler/passes/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/host/test_util.h"
#include "runtime/tpusim/layout.h"
#include "runtime/tpusim/tpusim_device.h"

namespace kiln::tpusim {
namespace {

using ::testing::HasSubstr;

using passes::Find;
using passes::Parse;

constexpr double kPeak = 2.0 * 2 * 128 * 128 * 940e6;
constexpr double kHbm = 0.85 * 450e9;   // reached HBM bytes/s
constexpr double kOverhead = 0.5e-6;    // per region

TEST(TpuFusionTest, BiasAndActivationFuseIntoTheDot) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[256,512] parameter(0)
  w = f32[512,256] parameter(1)
  b = f32[256] parameter(2)
  d = f32[256,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[256,256] broadcast(b), dimensions={1}
  a = f32[256,256] add(d, bb)
  z = f32[] constant(0)
  zb = f32[256,256] broadcast(z), dimensions={}
  ROOT r = f32[256,256] maximum(a, zb)
})");
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  ASSERT_EQ(prices.plan().regions().size(), 1u);
  const FusedRegion* region = prices.plan().RegionRootedAt(Find(*module, "r"));
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->members.size(), 6u);  // d, bb, a, z, zb, r
  // Reads x, w and the bias (one (8,128) tile), writes r once: the dot's
  // result and the sum never reach HBM.
  const int64_t bytes = (256 * 512 + 512 * 256 + 256 * 256) * 4 + 4096;
  const runtime::CostCounters c = prices.StepCost({Find(*module, "r")});
  EXPECT_EQ(c.hbm_bytes, bytes);
  EXPECT_EQ(c.matrix_flops, int64_t{2} * 256 * 512 * 256);
  // HBM bounds it: max(matrix / 0.9 + vector, bytes / (0.85 * 450e9)).
  const double matrix = 2.0 * 256 * 512 * 256 / kPeak / 0.9;
  const double vector = 2.0 * 256 * 256 / (1024 * 940e6);
  ASSERT_GT(bytes / kHbm, matrix + vector);
  EXPECT_DOUBLE_EQ(c.hbm_seconds, bytes / kHbm + kOverhead);
  EXPECT_DOUBLE_EQ(c.matrix_seconds, 0);
  // The other members cost nothing of their own.
  EXPECT_EQ(prices.StepCost({Find(*module, "a")}).hbm_bytes, 0);
}

TEST(TpuFusionTest, AValueTwoRegionsReadIsWrittenOnce) {
  auto module = Parse(R"(
HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[64,128] parameter(0)
  e = f32[64,128] exponential(x)
  zero = f32[] constant(0)
  r = f32[64] reduce(e, zero), dimensions={1}, to_apply=sum
  n = f32[64,128] negate(e)
  ROOT t = (f32[64], f32[64,128]) tuple(r, n)
})");
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  const FusionPlan& plan = prices.plan();
  // e has users in two regions: it is its own region, written once and
  // read by both.
  ASSERT_NE(plan.RegionRootedAt(Find(*module, "e")), nullptr);
  ASSERT_NE(plan.RegionRootedAt(Find(*module, "r")), nullptr);
  ASSERT_NE(plan.RegionRootedAt(Find(*module, "n")), nullptr);
  const int64_t x_bytes = 64 * 128 * 4;
  EXPECT_EQ(prices.StepCost({Find(*module, "e")}).hbm_bytes, 2 * x_bytes);
  // The reduce runs in e's pass (multi-output fusion of producer and
  // consumer): it reads nothing and writes f32[64] (one tile). The negate
  // reads e.
  EXPECT_EQ(prices.StepCost({Find(*module, "r")}).hbm_bytes, 4096);
  EXPECT_EQ(prices.StepCost({Find(*module, "n")}).hbm_bytes, 2 * x_bytes);
}

// Batch statistics as XLA's batch-norm expander computes them: E[x] and
// E[x^2] read x in one pass; a variance of x - E[x] must wait for E[x].
TEST(TpuFusionTest, IndependentSiblingReductionsShareTheirRead) {
  auto module = Parse(R"(
HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[256,128] parameter(0)
  zero = f32[] constant(0)
  s1 = f32[128] reduce(x, zero), dimensions={0}, to_apply=sum
  sq = f32[256,128] multiply(x, x)
  s2 = f32[128] reduce(sq, zero), dimensions={0}, to_apply=sum
  b1 = f32[256,128] broadcast(s1), dimensions={1}
  c = f32[256,128] subtract(x, b1)
  c2 = f32[256,128] multiply(c, c)
  s3 = f32[128] reduce(c2, zero), dimensions={0}, to_apply=sum
  ROOT t = (f32[128], f32[128], f32[128]) tuple(s1, s2, s3)
})");
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  const int64_t x_bytes = 256 * 128 * 4, out = 4096;
  const int64_t s1 = prices.StepCost({Find(*module, "s1")}).hbm_bytes;
  const int64_t s2 = prices.StepCost({Find(*module, "s2")}).hbm_bytes;
  // One of the two pays for x.
  EXPECT_EQ(s1 + s2, x_bytes + 2 * out);
  // s3 reads x and s1 itself.
  EXPECT_EQ(prices.StepCost({Find(*module, "s3")}).hbm_bytes, x_bytes + out + out);
}

TEST(TpuFusionTest, ElementwiseProducersFuseIntoAReduction) {
  auto module = Parse(R"(
HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[512,1024] parameter(0)
  sq = f32[512,1024] multiply(x, x)
  zero = f32[] constant(0)
  ROOT r = f32[512] reduce(sq, zero), dimensions={1}, to_apply=sum
})");
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  ASSERT_EQ(prices.plan().regions().size(), 1u);
  // x read once; f32[512] written as 4 rows of 128 -> one (8,128) tile.
  const runtime::CostCounters c = prices.StepCost({Find(*module, "r")});
  EXPECT_EQ(c.hbm_bytes, 512 * 1024 * 4 + 4096);
}

// A producer read by a region that recomputes it and by a region that
// does not stays a region of its own, written once: the recomputing
// region must not swallow its operand.
TEST(TpuFusionTest, AValueARecomputedMemberStillNeedsIsWritten) {
  auto module = Parse(R"(
HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY main {
  p = f32[] parameter(0)
  x = f32[] negate(p)
  d = f32[4,8] broadcast(x), dimensions={}
  s = f32[4,8] sort(d), dimensions={1}, to_apply=lt
  y = f32[4,8] add(d, s)
  ROOT r = f32[8] reduce(y, x), dimensions={0}, to_apply=sum
})");
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  EXPECT_NE(prices.plan().RegionRootedAt(Find(*module, "x")), nullptr);
  EXPECT_NE(prices.plan().RegionRootedAt(Find(*module, "d")), nullptr);
}

TEST(TpuCostTest, PrecisionPricesBf16Passes) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[2048,2048] parameter(0)
  b = f32[2048,2048] parameter(1)
  d = f32[2048,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h = f32[2048,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}
  g = f32[2048,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={high,default}
  ROOT t = (f32[2048,2048], f32[2048,2048], f32[2048,2048]) tuple(d, h, g)
})");
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  const double one = 2.0 * 2048 * 2048 * 2048 / kPeak;
  EXPECT_DOUBLE_EQ(model.MatrixSeconds(1, 2048, 2048, 2048), one);
  // Default: one bf16 pass; high: 3; highest: 6 (the dearer operand wins).
  EXPECT_DOUBLE_EQ(prices.StepCost({Find(*module, "d")}).matrix_seconds, one / 0.9 + kOverhead);
  EXPECT_DOUBLE_EQ(prices.StepCost({Find(*module, "g")}).matrix_seconds,
                   3 * one / 0.9 + kOverhead);
  EXPECT_DOUBLE_EQ(prices.StepCost({Find(*module, "h")}).matrix_seconds,
                   6 * one / 0.9 + kOverhead);
}

TEST(TpuCostTest, CoresOfOneChipShareItsHostLink) {
  const CostModel model{ChipConfig{}};
  runtime::CostCounters c;
  c.feed_bytes = 1 << 20;
  const double alone = (1 << 20) / 15.75e9;
  EXPECT_DOUBLE_EQ(model.Profile(c, 1).infeed_seconds, alone);
  EXPECT_DOUBLE_EQ(model.Profile(c, 2).infeed_seconds, 2 * alone);
  // Eight replicas: still two per chip.
  EXPECT_DOUBLE_EQ(model.Profile(c, 8).infeed_seconds, 2 * alone);
}

TEST(TpuCostTest, TransfersFollowTheTorus) {
  const CostModel model{ChipConfig{}};
  // Cores 0 and 1 share chip 0; core 2 is on chip 1 (one link away); core
  // 6 on chip 3 at (1,1), two hops from chip 0.
  EXPECT_DOUBLE_EQ(model.TransferSeconds(4096, 0, 1), 4096 / 450e9);
  EXPECT_DOUBLE_EQ(model.TransferSeconds(4096, 0, 2), 4096 / 82e9 + 2e-6);
  EXPECT_DOUBLE_EQ(model.TransferSeconds(4096, 0, 6), 4096 / 82e9 + 2 * 2e-6);
  // An all-reduce over the two cores of chip 2 stays on that chip; one
  // over a core of each chip uses both torus dimensions.
  EXPECT_DOUBLE_EQ(model.AllReduceSeconds(1 << 20, std::vector<int64_t>{4, 5}),
                   (1 << 20) / 450e9 + 2 * 2e-6);
  EXPECT_DOUBLE_EQ(model.AllReduceSeconds(1 << 20, std::vector<int64_t>{0, 2, 4, 6}),
                   2.0 * 3 / 4 * (1 << 20) / (4 * 82e9) + 2 * 2 * 2e-6);
}

TEST(TpuCostTest, AnAllReduceAcrossServersAddsTheRingBetweenThem) {
  const CostModel model{ChipConfig{}};
  runtime::CostCounters c;
  c.all_replica_reduce_bytes = 1 << 20;
  c.all_replica_reduce_calls = 2;
  // Sixteen replicas on two servers: each server's eight cores reduce as
  // eight replicas on one chip do, then the two servers exchange.
  const double on_each = model.Profile(c, 8).interconnect_seconds;
  EXPECT_GT(on_each, 0);
  EXPECT_DOUBLE_EQ(model.Profile(c, 16, 2).interconnect_seconds,
                   on_each + 2.0 * 1 / 2 * (1 << 20) / 12.5e9 + 2 * 1 * 2 * 10e-6);
  EXPECT_DOUBLE_EQ(model.HostsAllReduceSeconds(1 << 20, 3, 1),
                   2.0 * 2 / 3 * (1 << 20) / 12.5e9 + 2 * 2 * 10e-6);
  EXPECT_EQ(model.HostsAllReduceSeconds(1 << 20, 1, 1), 0);
  // A group of one server prices as the server alone.
  EXPECT_DOUBLE_EQ(model.Profile(c, 8, 1).interconnect_seconds, on_each);
}

constexpr char kLoop[] = R"(
HloModule loop
cond {
  p = (s32[], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[256,256] get-tuple-element(p), index=1
  y = f32[256,256] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[256,256] tanh(y)
  ROOT t = (s32[], f32[256,256]) tuple(next, e)
}
ENTRY main {
  x = f32[256,256] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[256,256]) tuple(zero, x)
  w = (s32[], f32[256,256]) while(init), condition=cond, body=body
  ROOT r = f32[256,256] get-tuple-element(w), index=1
})";

TEST(TpuEstimateTest, AStaticLoopIsPricedAsItRuns) {
  auto module = Parse(kLoop);
  EXPECT_EQ(StaticTripCount(*Find(*module, "w")), 10);
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto exe = compiler.Compile(*module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<runtime::ExecutionProfile> estimate = (*exe)->Estimate(1);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  runtime::ExecutionProfile ran;
  ASSERT_TRUE(host::RunHlo(kLoop, {ir::Literal(ir::Shape(ir::ElementType::kF32, {256, 256}))},
                           &tpu, &compiler, &ran)
                  .ok());
  EXPECT_DOUBLE_EQ(estimate->simulated_seconds, ran.simulated_seconds);
  EXPECT_EQ(estimate->matrix_flops, ran.matrix_flops);
  EXPECT_EQ(estimate->matrix_flops, int64_t{10} * 2 * 256 * 256 * 256);
  EXPECT_EQ(estimate->hbm_bytes, ran.hbm_bytes);
}

TEST(TpuEstimateTest, ALoopWithoutAStaticTripCountIsNamed) {
  // The limit is an argument, carried in the loop state.
  auto module = Parse(R"(
HloModule loop
cond {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  n = s32[] get-tuple-element(p), index=1
  ROOT t = (s32[], s32[]) tuple(next, n)
}
ENTRY main {
  n = s32[] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], s32[]) tuple(zero, n)
  ROOT spin = (s32[], s32[]) while(init), condition=cond, body=body
})");
  EXPECT_EQ(StaticTripCount(*Find(*module, "spin")), -1);
  TpuSimCompiler compiler({});
  auto exe = compiler.Compile(*module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<runtime::ExecutionProfile> estimate = (*exe)->Estimate(1);
  EXPECT_EQ(estimate.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(estimate.status().message(), HasSubstr("loop spin"));
}

// A loop of 2^40 iterations, each moving 8 MiB, passes what the counters
// hold: refused, not wrapped. A float counter has no static trip count.
TEST(TpuEstimateTest, WorkPastTheCountersIsRefused) {
  auto module = Parse(R"(
HloModule loop
cond {
  p = (s64[], f32[1024,1024]) parameter(0)
  i = s64[] get-tuple-element(p), index=0
  n = s64[] constant(1099511627776)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s64[], f32[1024,1024]) parameter(0)
  i = s64[] get-tuple-element(p), index=0
  one = s64[] constant(1)
  next = s64[] add(i, one)
  x = f32[1024,1024] get-tuple-element(p), index=1
  e = f32[1024,1024] negate(x)
  ROOT t = (s64[], f32[1024,1024]) tuple(next, e)
}
ENTRY main {
  x = f32[1024,1024] parameter(0)
  zero = s64[] constant(0)
  init = (s64[], f32[1024,1024]) tuple(zero, x)
  w = (s64[], f32[1024,1024]) while(init), condition=cond, body=body
  ROOT r = f32[1024,1024] get-tuple-element(w), index=1
})");
  EXPECT_EQ(StaticTripCount(*Find(*module, "w")), int64_t{1} << 40);
  const CostModel model{ChipConfig{}};
  const ModulePrices prices(*module, model);
  absl::StatusOr<runtime::CostCounters> estimate = prices.Estimate();
  EXPECT_EQ(estimate.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(estimate.status().message(), HasSubstr("more work than the estimate can count"));

  auto floats = Parse(R"(
HloModule loop
cond {
  p = (f32[]) parameter(0)
  i = f32[] get-tuple-element(p), index=0
  n = f32[] constant(10)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (f32[]) parameter(0)
  i = f32[] get-tuple-element(p), index=0
  step = f32[] constant(1.5)
  next = f32[] add(i, step)
  ROOT t = (f32[]) tuple(next)
}
ENTRY main {
  zero = f32[] constant(0)
  init = (f32[]) tuple(zero)
  ROOT w = (f32[]) while(init), condition=cond, body=body
})");
  EXPECT_EQ(StaticTripCount(*Find(*floats, "w")), -1);
}

}  // namespace
}  // namespace kiln::tpusim
