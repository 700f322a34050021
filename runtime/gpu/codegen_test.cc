// The GPU code generator on any machine with the CUDA toolkit (no GPU
// needed): every module of the corpus becomes CUDA C++ that NVRTC compiles
// for Hopper and for an older architecture.
#include "runtime/gpu/codegen.h"


#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/gpu/gpu_executable.h"
#include "runtime/gpu/nvrtc.h"
#include "runtime/gpu/test_util.h"

namespace kiln::gpu {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  EXPECT_TRUE(ir::Verify(**module).ok());
  return *std::move(module);
}

class CorpusCodegenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusCodegenTest, CompilesWithNvrtc) {
  auto module = Parse(CorpusText(GetParam()));
  ASSERT_NE(module, nullptr);
  for (const char* arch : {"sm_90", "sm_80"}) {
    GpuCompileReport report;
    auto compiled = CompileForGpu(*module, {}, arch, /*load=*/false, &report);
    ASSERT_TRUE(compiled.ok()) << arch << ": " << compiled.status();
    EXPECT_GT(report.kernels + report.host_steps + report.gemms, 0) << "nothing to run in " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusCodegenTest, ::testing::ValuesIn(CorpusModules()),
                         [](const auto& info) { return info.param; });

TEST(CodegenTest, ElementwiseKernelReadsEachOperandOnce) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[4,8] parameter(0)
  b = f32[4,8] parameter(1)
  ROOT c = f32[4,8] add(a, b)
})");
  ASSERT_NE(module, nullptr);
  KernelEmitter emitter;
  auto info = emitter.Emit(*module->entry()->root());
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->launches.size(), 1u);
  EXPECT_EQ(info->launches[0].iterations, 32);
  EXPECT_FALSE(info->launches[0].one_thread);
  EXPECT_THAT(emitter.source(), HasSubstr("r0[i] = ((a0[i]) + (a1[i]))"));
}

TEST(CodegenTest, LongReductionsWithFewOutputsShareABlockPerOutput) {
  auto module = Parse(R"(
HloModule m
add {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT s = f32[] add(p0, p1)
}
ENTRY main {
  a = f32[4,5000] parameter(0)
  z = f32[] constant(0)
  long = f32[4] reduce(a, z), dimensions={1}, to_apply=add
  short = f32[5000] reduce(a, z), dimensions={0}, to_apply=add
  ROOT t = (f32[4], f32[5000]) tuple(long, short)
})");
  ASSERT_NE(module, nullptr);
  KernelEmitter emitter;
  const ir::Computation& entry = *module->entry();
  auto long_fold = emitter.Emit(*entry.instructions()[2]);
  auto short_fold = emitter.Emit(*entry.instructions()[3]);
  ASSERT_TRUE(long_fold.ok()) << long_fold.status();
  ASSERT_TRUE(short_fold.ok()) << short_fold.status();
  EXPECT_GT(long_fold->launches[0].block_per_iteration, 0);
  EXPECT_EQ(short_fold->launches[0].block_per_iteration, 0);
  ASSERT_TRUE(CompileToCubin(emitter.source(), "sm_90").ok());
}

TEST(CodegenTest, ElementwiseChainsFuseIntoOneKernel) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[16] parameter(0)
  b = f32[16] parameter(1)
  s = f32[] parameter(2)
  m = f32[16] multiply(a, b)
  e = f32[16] exponential(m)
  ROOT r = f32[16] clamp(s, e, s)
})");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const ir::Instruction& m = *entry.instructions()[3];
  const ir::Instruction& e = *entry.instructions()[4];
  ASSERT_TRUE(CanFuse(m, e));
  ASSERT_TRUE(CanFuse(e, *entry.root()));
  KernelEmitter emitter;
  auto info = emitter.Emit(*entry.root(), {&m, &e});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(emitter.kernel_count(), 1);
  ASSERT_EQ(info->inputs.size(), 3u);
  // clamp(s, e, s) reads s once, as input 0.
  EXPECT_EQ(info->inputs[0]->name(), "s");
  EXPECT_EQ(info->inputs[1]->name(), "a");
  EXPECT_EQ(info->inputs[2]->name(), "b");
  EXPECT_THAT(emitter.source(),
              HasSubstr("kiln_fmax<float>(expf(((a1[i]) * (a2[i]))), a0[0]), a0[0])"));
  GpuCompileReport report;
  ASSERT_TRUE(CompileForGpu(*module, {}, "sm_90", /*load=*/false, &report).ok());
  EXPECT_EQ(report.kernels, 1);
}

TEST(CodegenTest, BroadcastsAndIotasFuseIntoTheirConsumer) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,3] parameter(0)
  bias = f32[3] parameter(1)
  b = f32[4,3] broadcast(bias), dimensions={1}
  i = f32[4,3] iota(), iota_dimension=0
  s = f32[4,3] add(x, b)
  ROOT r = f32[4,3] multiply(s, i)
})");
  ASSERT_NE(module, nullptr);
  GpuCompileReport report;
  ASSERT_TRUE(CompileForGpu(*module, {}, "sm_90", /*load=*/false, &report).ok());
  EXPECT_EQ(report.kernels, 1);
  EXPECT_THAT(report.source, HasSubstr("a1[(o1)]"));
  EXPECT_THAT(report.source, HasSubstr("((float)(o0))"));
}

// A chain of thousands of elementwise operations compiles: fusion cuts it
// into kernels of bounded depth instead of one expression nested as deep.
TEST(CodegenTest, LongElementwiseChainsAreCutIntoKernels) {
  std::string text = "HloModule chain\nENTRY main {\n  v0 = f32[8] parameter(0)\n";
  constexpr int kLength = 2000;
  for (int i = 1; i <= kLength; ++i) {
    text += absl::StrCat("  ", i == kLength ? "ROOT " : "", "v", i, " = f32[8] ",
                         i % 2 ? "negate" : "exponential", "(v", i - 1, ")\n");
  }
  text += "}\n";
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  GpuCompileReport report;
  auto compiled = CompileForGpu(*module, {}, "sm_90", /*load=*/false, &report);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_GE(report.kernels, kLength / 24);
  EXPECT_LT(report.kernels, kLength / 10);
}

TEST(CodegenTest, HalfValuesAreRoundedAfterEachOperation) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = bf16[3] parameter(0)
  ROOT b = bf16[3] multiply(a, a)
})");
  ASSERT_NE(module, nullptr);
  KernelEmitter emitter;
  ASSERT_TRUE(emitter.Emit(*module->entry()->root()).ok());
  EXPECT_THAT(emitter.source(),
              HasSubstr("kiln_f_to_bf16(kiln_round_bf16(((kiln_bf16_to_f(a0[i])) * "));
}

// As on the host: sums and products of halves accumulate in float and
// round once; other reducers (and other types) fold through the reducer's
// own code, rounding after each step.
TEST(CodegenTest, HalfSumsAccumulateInFloat) {
  auto module = Parse(R"(
HloModule m
add_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
max_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
ENTRY main {
  x = bf16[4,6] parameter(0)
  y = f32[4,6] parameter(1)
  zero = bf16[] constant(0)
  low = bf16[] constant(-inf)
  zf = f32[] constant(0)
  s = bf16[4] reduce(x, zero), dimensions={1}, to_apply=add_bf16
  m = bf16[4] reduce(x, low), dimensions={1}, to_apply=max_bf16
  w = bf16[4,3] reduce-window(x, zero), window={size=1x2 stride=1x2}, to_apply=add_bf16
  f = f32[4] reduce(y, zf), dimensions={1}, to_apply=add_f32
  ROOT out = (bf16[4], bf16[4], bf16[4,3], f32[4]) tuple(s, m, w, f)
})");
  ASSERT_NE(module, nullptr);
  KernelEmitter emitter;
  const ir::Computation& entry = *module->entry();
  for (const char* name : {"s", "m", "w", "f"}) {
    const ir::Instruction* instr = nullptr;
    for (const auto& i : entry.instructions()) {
      if (i->name() == name) instr = i.get();
    }
    ASSERT_NE(instr, nullptr) << name;
    ASSERT_TRUE(emitter.Emit(*instr).ok()) << name;
  }
  const std::string& source = emitter.source();
  EXPECT_THAT(source, HasSubstr("void kiln_acc_add(float a, float b, float* out)"));
  // The sum and the window sum call it; the maximum and the f32 sum do not.
  size_t calls = 0;
  for (size_t at = source.find("kiln_acc_add("); at != std::string::npos;
       at = source.find("kiln_acc_add(", at + 1)) {
    ++calls;
  }
  EXPECT_EQ(calls, 3u);  // the definition and two kernels
  EXPECT_THAT(source, HasSubstr("kiln_fn0"));
  ASSERT_TRUE(CompileToCubin(source, "sm_90").ok());
}

TEST(CodegenTest, ReducerThatIsNotScalarCodeIsUnimplemented) {
  auto module = Parse(R"(
HloModule m
add_vec {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  s = f32[] add(p0, p1)
  i = s32[2] iota(), iota_dimension=0
  ROOT r = f32[] add(s, p1)
}
ENTRY main {
  a = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=add_vec
})");
  ASSERT_NE(module, nullptr);
  auto compiled = CompileForGpu(*module, {}, "sm_90", /*load=*/false);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(compiled.status().message(), HasSubstr("r: "));
  EXPECT_THAT(compiled.status().message(), HasSubstr("add_vec"));
}

TEST(NvrtcTest, CompileErrorsCarryTheLog) {
  auto cubin = CompileToCubin("extern \"C\" __global__ void k() { undefined_name; }", "sm_90");
  ASSERT_FALSE(cubin.ok());
  EXPECT_EQ(cubin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cubin.status().message(), HasSubstr("undefined_name"));
}

TEST(NvrtcTest, ReportsItsVersion) {
  auto version = NvrtcVersion();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_THAT(*version, ::testing::MatchesRegex("[0-9]+\\.[0-9]+"));
}

}  // namespace
}  // namespace kiln::gpu
