#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/host/test_util.h"
#include "runtime/tpusim/layout.h"
#include "runtime/tpusim/tpusim_device.h"

namespace kiln::tpusim {
namespace {

using host::F32;
using host::RunHlo;
using host::Values;
using ::testing::HasSubstr;

constexpr char kDot[] = R"(
HloModule dot
ENTRY main {
  a = f32[1,2] parameter(0)
  b = f32[2,1] parameter(1)
  ROOT d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";

constexpr char kDotHighest[] = R"(
HloModule dot
ENTRY main {
  a = f32[1,2] parameter(0)
  b = f32[2,1] parameter(1)
  ROOT d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}
})";

TEST(TpuSimNumericsTest, DotRoundsInputsToBf16) {
  // 1 + 2^-10 has no bf16 form (8 significant bits): it rounds to 1.
  const float x = 1.0f + std::ldexp(1.0f, -10);
  const std::vector<ir::Literal> args = {F32({1, 2}, {x, 1.0f}), F32({2, 1}, {1.0f, 1.0f})};
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto on_tpu = RunHlo(kDot, args, &tpu, &compiler);
  ASSERT_TRUE(on_tpu.ok()) << on_tpu.status();
  EXPECT_EQ(Values(*on_tpu)[0], 2.0);
  auto on_cpu = RunHlo(kDot, args);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_EQ(Values(*on_cpu)[0], 2.0 + std::ldexp(1.0, -10));
  auto highest = RunHlo(kDotHighest, args, &tpu, &compiler);
  ASSERT_TRUE(highest.ok()) << highest.status();
  EXPECT_EQ(Values(*highest)[0], 2.0 + std::ldexp(1.0, -10));
}

TEST(TpuSimNumericsTest, ConvolutionRoundsInputsToBf16) {
  constexpr char kConv[] = R"(
HloModule conv
ENTRY main {
  x = f32[1,2,1,1] parameter(0)
  w = f32[2,1,1,1] parameter(1)
  ROOT c = f32[1,1,1,1] convolution(x, w), window={size=2x1}, dim_labels=b01f_01io->b01f
})";
  const float x = 1.0f + std::ldexp(1.0f, -10);
  const std::vector<ir::Literal> args = {F32({1, 2, 1, 1}, {x, 1.0f}),
                                         F32({2, 1, 1, 1}, {1.0f, 1.0f})};
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto on_tpu = RunHlo(kConv, args, &tpu, &compiler);
  ASSERT_TRUE(on_tpu.ok()) << on_tpu.status();
  EXPECT_EQ(Values(*on_tpu)[0], 2.0);
}

TEST(TpuSimNumericsTest, ElementwiseStaysF32) {
  constexpr char kAdd[] = R"(
HloModule add
ENTRY main {
  a = f32[2] parameter(0)
  ROOT s = f32[2] add(a, a)
})";
  const float x = 1.0f + std::ldexp(1.0f, -10);
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto out = RunHlo(kAdd, {F32({2}, {x, 3.0f})}, &tpu, &compiler);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values(*out)[0], 2.0 * x);
}

TEST(TpuSimTypesTest, F64ModuleIsRefusedNamingTheInstruction) {
  constexpr char kF64[] = R"(
HloModule f64
ENTRY main {
  a = f32[2] parameter(0)
  wide = f64[2] convert(a)
  ROOT back = f32[2] convert(wide)
})";
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto out = RunHlo(kF64, {F32({2}, {1, 2})}, &tpu, &compiler);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("instruction wide"));
  EXPECT_THAT(out.status().message(), HasSubstr("no f64"));
  EXPECT_TRUE(RunHlo(kF64, {F32({2}, {1, 2})}).ok()) << "the CPU has f64";
}

TEST(TpuSimTypesTest, S64IsRefused) {
  constexpr char kS64[] = R"(
HloModule s64
ENTRY main {
  ROOT i = s64[4] iota(), iota_dimension=0
})";
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto out = RunHlo(kS64, {}, &tpu, &compiler);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("64-bit integers"));
}

TEST(TpuSimLayoutTest, PaddedSizesMatchHandComputedTiles) {
  using ir::ElementType;
  using ir::Shape;
  // f32[3,5]: one (8,128) tile of 4-byte elements.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kF32, {3, 5})), 8 * 128 * 4);
  // bf16[3,5]: one (16,128) tile of 2-byte elements.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kBF16, {3, 5})), 16 * 128 * 2);
  // f32[2,9,130]: 2 x (16 rows x 256 lanes); it keeps its minor pair.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kF32, {2, 9, 130})), 2 * 16 * 256 * 4);
  // f32[1000]: 8 rows of 128 lanes, one tile.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kF32, {1000})), 8 * 128 * 4);
  // f32[1100]: 9 rows -> two tiles.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kF32, {1100})), 16 * 128 * 4);
  EXPECT_EQ(PaddedBytes(Shape::Scalar(ElementType::kF32)), 8 * 128 * 4);
  // pred[40,1]: (32,128) tiles of bytes; the 40 go to the lanes and the 1
  // takes 32 rows, where the other way round would take 64 rows of 128.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kPred, {40, 1})), 32 * 128);
  // An NHWC image batch with 3 channels: the batch of 128 goes to the lanes
  // and a spatial dimension to the rows (28 -> 32), not 3 channels to 128
  // lanes (a 43x waste).
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kF32, {128, 28, 28, 3})), 128 * 28 * 32 * 3 * 4);
  // bf16[128,256] fills its tiles exactly.
  EXPECT_EQ(PaddedBytes(Shape(ElementType::kBF16, {128, 256})), 128 * 256 * 2);
}

TEST(TpuSimMemoryTest, AccountingCountsPadding) {
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  auto a = tpu.TransferToDevice(F32({3, 5}, std::vector<float>(15, 1.0f)));
  ASSERT_TRUE(a.ok());
  ir::Literal half(ir::Shape(ir::ElementType::kBF16, {3, 5}));
  auto b = tpu.TransferToDevice(half);
  ASSERT_TRUE(b.ok());
  const runtime::MemoryStats stats = tpu.memory_stats();
  EXPECT_EQ(stats.bytes_in_use, 8 * 128 * 4 + 16 * 128 * 2);
  EXPECT_EQ(stats.live_buffers, 2);
  EXPECT_EQ((*a)->charged_bytes(), 4096);
  EXPECT_EQ((*a)->size_bytes(), 60);
}

TEST(TpuSimMemoryTest, OutOfHbmIsResourceExhaustedListingLargestBuffers) {
  TpuSimDeviceOptions options;
  options.chip.hbm_bytes = 1 << 20;
  TpuSimDevice tpu(options);
  TpuSimCompiler compiler(options.chip);
  auto big = tpu.TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {512, 384})));
  ASSERT_TRUE(big.ok()) << big.status();
  auto small = tpu.TransferToDevice(F32({2}, {1, 2}));
  ASSERT_TRUE(small.ok());
  auto refused =
      tpu.TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {512, 128})));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("largest: f32[512,384] (786432 bytes)"));
  // A program whose temporaries do not fit fails the same way, and the
  // device keeps working afterwards.
  auto out = RunHlo(R"(
HloModule big
ENTRY main {
  a = f32[] parameter(0)
  ROOT b = f32[1024,1024] broadcast(a), dimensions={}
})", {F32({}, {1})}, &tpu, &compiler);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(out.status().message(), HasSubstr("f32[512,384]"));
  big->reset();
  EXPECT_TRUE(tpu.TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {512, 128}))).ok());
}

TEST(TpuSimCostTest, DotCostMatchesTheFormula) {
  constexpr char kBigDot[] = R"(
HloModule dot
ENTRY main {
  a = f32[1024,1024] parameter(0)
  b = f32[1024,1024] parameter(1)
  ROOT d = f32[1024,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  const ChipConfig chip;
  ir::Literal m(ir::Shape(ir::ElementType::kF32, {1024, 1024}));
  runtime::ExecutionProfile profile;
  ASSERT_TRUE(RunHlo(kBigDot, {m, m}, &tpu, &compiler, &profile).ok());
  // 2 * 1024^3 flops at 2 units * 128^2 * 2 flops * 940 MHz, at 90% of
  // that peak; HBM moves 3 * 4 MiB at 85% of 450 GB/s in less time, so the
  // region is matrix-bound, and it adds its 0.5 us of overhead.
  const double peak = 2.0 * 2 * 128 * 128 * 940e6;
  const double matrix = 2.0 * 1024 * 1024 * 1024 / peak;
  const double region = matrix / 0.9 + 0.5e-6;
  EXPECT_LT(3 * 4 * 1024 * 1024 / (0.85 * 450e9), matrix / 0.9);
  EXPECT_DOUBLE_EQ(chip.PeakMatrixFlops(), peak);
  EXPECT_DOUBLE_EQ(profile.matrix_seconds, region);
  EXPECT_DOUBLE_EQ(profile.hbm_seconds, 0);
  EXPECT_DOUBLE_EQ(profile.simulated_seconds, region);
  EXPECT_EQ(profile.matrix_flops, int64_t{2} * 1024 * 1024 * 1024);
  EXPECT_EQ(profile.hbm_bytes, 3 * 4 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(profile.matrix_utilization, matrix / region);
  EXPECT_DOUBLE_EQ(profile.padding_waste, 0.0);

  // A small dot is padded to the unit's shape and bound by HBM.
  constexpr char kSmallDot[] = R"(
HloModule dot
ENTRY main {
  a = f32[256,512] parameter(0)
  b = f32[512,300] parameter(1)
  ROOT d = f32[256,300] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  ASSERT_TRUE(RunHlo(kSmallDot,
                     {ir::Literal(ir::Shape(ir::ElementType::kF32, {256, 512})),
                      ir::Literal(ir::Shape(ir::ElementType::kF32, {512, 300}))},
                     &tpu, &compiler, &profile)
                  .ok());
  // Layout puts the 300 on the rows (304) and the other dimension on the
  // lanes: f32[512,300] takes 304 x 512, f32[256,300] 304 x 256.
  const int64_t bytes = (256 * 512 + 304 * 512 + 304 * 256) * 4;
  EXPECT_EQ(profile.hbm_bytes, bytes);
  EXPECT_DOUBLE_EQ(profile.hbm_seconds, bytes / (0.85 * 450e9) + 0.5e-6);
  EXPECT_DOUBLE_EQ(profile.matrix_seconds, 0);
  EXPECT_DOUBLE_EQ(compiler.cost_model().MatrixSeconds(1, 256, 512, 300),
                   2.0 * 256 * 512 * 384 / peak);
  EXPECT_EQ(profile.matrix_flops, int64_t{2} * 256 * 512 * 300);
}

TEST(TpuSimCostTest, MatrixCostPadsRowsToEight) {
  // The matrix unit works on 8-row by 128-column tiles: one row costs
  // eight, and a partial tile of the other dimensions a whole one.
  TpuSimCompiler compiler({});
  const double peak = ChipConfig().PeakMatrixFlops();
  EXPECT_DOUBLE_EQ(compiler.cost_model().MatrixSeconds(1, 1, 128, 128),
                   2.0 * 8 * 128 * 128 / peak);
  EXPECT_DOUBLE_EQ(compiler.cost_model().MatrixSeconds(2, 9, 100, 129),
                   2.0 * 2 * 16 * 128 * 256 / peak);
}

TEST(TpuSimCostTest, ElementwiseCostMatchesTheFormula) {
  constexpr char kAdd[] = R"(
HloModule add
ENTRY main {
  a = f32[3,5] parameter(0)
  b = f32[3,5] parameter(1)
  ROOT s = f32[3,5] add(a, b)
})";
  TpuSimDevice tpu({});
  TpuSimCompiler compiler({});
  ir::Literal x(ir::Shape(ir::ElementType::kF32, {3, 5}));
  runtime::ExecutionProfile profile;
  ASSERT_TRUE(RunHlo(kAdd, {x, x}, &tpu, &compiler, &profile).ok());
  // Two tiles read, one written; 1024 padded elements of vector work take
  // one cycle, far less than the HBM time.
  EXPECT_EQ(profile.hbm_bytes, 3 * 4096);
  EXPECT_DOUBLE_EQ(profile.hbm_seconds, 3 * 4096 / (0.85 * 450e9) + 0.5e-6);
  EXPECT_DOUBLE_EQ(profile.vector_seconds, 0);
  EXPECT_DOUBLE_EQ(profile.padding_waste, 1.0 - 60.0 / 4096.0);

  // Ten fused exponentials over one tile: 10 * 4 ops per element is more
  // than the memory time, so the fused region is vector-bound (and adds
  // its overhead there).
  std::string chain = "HloModule chain\nENTRY main {\n  v0 = f32[8,128] parameter(0)\n";
  for (int i = 1; i <= 10; ++i) {
    chain += "  v" + std::to_string(i) + " = f32[8,128] exponential(v" + std::to_string(i - 1) + ")\n";
  }
  chain += "  ROOT out = f32[8,128] negate(v10)\n}\n";
  ASSERT_TRUE(RunHlo(chain, {ir::Literal(ir::Shape(ir::ElementType::kF32, {8, 128}))},
                     &tpu, &compiler, &profile)
                  .ok());
  const double vector = (10 * 4 + 1) * 1024 / (1024 * 940e6);
  EXPECT_DOUBLE_EQ(profile.vector_seconds, vector + 0.5e-6);
  EXPECT_DOUBLE_EQ(profile.hbm_seconds, 0);
  EXPECT_EQ(profile.hbm_bytes, 2 * 4096);
  EXPECT_DOUBLE_EQ(compiler.cost_model().VectorSeconds(41 * 1024), vector);
}

TEST(TpuSimConfigTest, ConfigTextOverridesDefaultsAndRejectsUnknownFields) {
  ChipConfig chip;
  ASSERT_TRUE(chip.Apply("# small chip\ncores = 2\nhbm_bytes = 1048576\nclock_hz=1e9\n").ok());
  EXPECT_EQ(chip.cores, 2);
  EXPECT_EQ(chip.hbm_bytes, 1048576);
  EXPECT_EQ(chip.clock_hz, 1e9);
  EXPECT_EQ(chip.matrix_unit_size, 128);
  ChipConfig reread;
  ASSERT_TRUE(reread.Apply(chip.ToString()).ok());
  EXPECT_EQ(reread.ToString(), chip.ToString());
  absl::Status bad = chip.Apply("cores = 2\nwarp_drive = 1\n");
  EXPECT_THAT(bad.message(), HasSubstr("line 2"));
  EXPECT_THAT(bad.message(), HasSubstr("warp_drive"));
  EXPECT_FALSE(chip.Apply("cores = -1").ok());
}

TEST(TpuSimConfigTest, ShippedConfigFileIsTheDefaultChip) {
  auto chip = LoadChipConfig(std::string(KILN_SOURCE_DIR) + "/deploy/tpu_v3_8.cfg");
  ASSERT_TRUE(chip.ok()) << chip.status();
  EXPECT_EQ(chip->ToString(), ChipConfig().ToString());
  EXPECT_EQ(LoadChipConfig("/nonexistent/chip.cfg").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::tpusim
