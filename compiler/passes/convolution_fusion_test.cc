#include "compiler/passes/convolution_fusion.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/passes/cpu_pipeline.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

int CountConvolutionFusions(const ir::Module& module) {
  int n = 0;
  for (const auto& c : module.computations()) n += IsConvolutionFusion(*c) ? 1 : 0;
  return n;
}

// A LeNet-5 layer, channels last: relu(conv(x, k) + bias).
constexpr char kLayer[] = R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(bias), dimensions={3}
  pre = f32[2,8,8,4] add(c, b)
  zero = f32[] constant(0)
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  ROOT r = f32[2,8,8,4] maximum(pre, z)
}
)";

// The bias and the relu, the sum's one reader, join the convolution.
TEST(ConvolutionFusionTest, TheBiasAndTheReluJoinTheConvolution) {
  auto module = Parse(kLayer);
  ASSERT_NE(module, nullptr);
  ConvolutionFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
fused_convolution {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  p2 = f32[4] parameter(2)
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  pre = f32[2,8,8,4] add(c, b)
  zero = f32[] constant(0)
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  ROOT r = f32[2,8,8,4] maximum(pre, z)
}
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  ROOT f = f32[2,8,8,4] call(x, k, bias), to_apply=fused_convolution
}
)"));
  const ir::Computation* fused = module->FindComputation("fused_convolution");
  ASSERT_NE(fused, nullptr);
  std::optional<ConvolutionFusionForm> form = MatchConvolutionFusion(*fused);
  ASSERT_TRUE(form.has_value());
  EXPECT_EQ(form->convolution->opcode(), ir::Opcode::kConvolution);
  EXPECT_TRUE(form->relu);
}

// Where the sum is read again (a relu's gradient that reads the
// pre-activation), the bias joins the convolution and the relu stays
// outside, reading the call.
TEST(ConvolutionFusionTest, AReluWhoseOperandIsReadAgainStaysOutside) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(bias), dimensions={3}
  pre = f32[2,8,8,4] add(c, b)
  zero = f32[] constant(0)
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  r = f32[2,8,8,4] maximum(pre, z)
  m = pred[2,8,8,4] compare(pre, z), direction=GE
  ROOT t = (f32[2,8,8,4], pred[2,8,8,4]) tuple(r, m)
}
)");
  ASSERT_NE(module, nullptr);
  ConvolutionFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
fused_convolution {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  p2 = f32[4] parameter(2)
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  ROOT pre = f32[2,8,8,4] add(c, b)
}
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  f = f32[2,8,8,4] call(x, k, bias), to_apply=fused_convolution
  zero = f32[] constant(0)
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  r = f32[2,8,8,4] maximum(f, z)
  m = pred[2,8,8,4] compare(f, z), direction=GE
  ROOT t = (f32[2,8,8,4], pred[2,8,8,4]) tuple(r, m)
}
)"));
  std::optional<ConvolutionFusionForm> form =
      MatchConvolutionFusion(*module->FindComputation("fused_convolution"));
  ASSERT_TRUE(form.has_value());
  EXPECT_FALSE(form->relu);
}

// Only a maximum with +0 is a relu: with -0 or another constant the
// maximum stays outside.
TEST(ConvolutionFusionTest, AMaximumWithAnythingButPlusZeroStaysOutside) {
  for (const char* constant : {"-0", "0.5", "-1"}) {
    auto module = Parse(absl::StrCat(R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(bias), dimensions={3}
  pre = f32[2,8,8,4] add(c, b)
  zero = f32[] constant()", constant, R"()
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  ROOT r = f32[2,8,8,4] maximum(z, pre)
}
)"));
    ASSERT_NE(module, nullptr) << constant;
    ConvolutionFusion pass;
    EXPECT_TRUE(RunPass(pass, *module)) << constant;
    EXPECT_EQ(module->entry()->root()->opcode(), ir::Opcode::kMaximum) << constant;
    std::optional<ConvolutionFusionForm> form =
        MatchConvolutionFusion(*module->FindComputation("fused_convolution"));
    ASSERT_TRUE(form.has_value()) << constant;
    EXPECT_FALSE(form->relu) << constant;
  }
}

// Either operand order of the add, and features in any dimension (here the
// second, channels first).
TEST(ConvolutionFusionTest, TheBiasMayComeFirstAndTheFeaturesAnywhere) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[2,1,8,8] parameter(0)
  k = f32[4,1,3,3] parameter(1)
  bias = f32[4] parameter(2)
  c = f32[2,4,6,6] convolution(x, k), window={size=3x3}, dim_labels=bf01_oi01->bf01
  b = f32[2,4,6,6] broadcast(bias), dimensions={1}
  ROOT pre = f32[2,4,6,6] add(b, c)
}
)");
  ASSERT_NE(module, nullptr);
  ConvolutionFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(CountConvolutionFusions(*module), 1);
  EXPECT_EQ(module->entry()->root()->opcode(), ir::Opcode::kCall);
}

// What is left alone: a convolution read elsewhere too, a bias along
// another dimension, a broadcast scalar, an addend of the whole shape, a
// convolution of another type.
TEST(ConvolutionFusionTest, LeavesOtherAddsAlone) {
  for (const char* entry : {
           // The convolution's result is also an output.
           R"(
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(bias), dimensions={3}
  pre = f32[2,8,8,4] add(c, b)
  ROOT t = (f32[2,8,8,4], f32[2,8,8,4]) tuple(pre, c)
)",
           // The vector broadcast along a spatial dimension.
           R"(
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  s = f32[8] slice(v8), slice={[0:8]}
  b = f32[2,8,8,4] broadcast(s), dimensions={2}
  ROOT pre = f32[2,8,8,4] add(c, b)
)",
           // A vector as long as the features, broadcast along a spatial
           // dimension of that length.
           R"(
  x6 = f32[2,6,6,1] parameter(4)
  c = f32[2,4,4,4] convolution(x6, k), window={size=3x3}, dim_labels=b01f_01io->b01f
  b = f32[2,4,4,4] broadcast(bias), dimensions={1}
  ROOT pre = f32[2,4,4,4] add(c, b)
)",
           // A scalar added everywhere.
           R"(
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  one = f32[] constant(1)
  b = f32[2,8,8,4] broadcast(one), dimensions={}
  ROOT pre = f32[2,8,8,4] add(c, b)
)",
           // An addend of the result's shape.
           R"(
  c = f32[2,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ROOT pre = f32[2,8,8,4] add(c, c)
)",
           // An input dilated as a data gradient reads it (no library
           // convolution adds a bias there).
           R"(
  g = f32[2,4,4,4] parameter(4)
  kd = f32[3,3,4,4] parameter(5)
  c = f32[2,8,8,4] convolution(g, kd), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
  b = f32[2,8,8,4] broadcast(bias), dimensions={3}
  ROOT pre = f32[2,8,8,4] add(c, b)
)",
           // A bf16 convolution.
           R"(
  xh = bf16[2,8,8,1] convert(x)
  kh = bf16[3,3,1,4] convert(k)
  c = bf16[2,8,8,4] convolution(xh, kh), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bh = bf16[4] convert(bias)
  b = bf16[2,8,8,4] broadcast(bh), dimensions={3}
  ROOT pre = bf16[2,8,8,4] add(c, b)
)",
       }) {
    auto module = Parse(std::string(R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  v8 = f32[8] parameter(3)
)") + entry + "}\n");
    ASSERT_NE(module, nullptr) << entry;
    ConvolutionFusion pass;
    EXPECT_FALSE(RunPass(pass, *module)) << entry;
    EXPECT_EQ(CountConvolutionFusions(*module), 0) << entry;
  }
}

// What a client may send as a call of a "fused" computation: only the
// exact form passes the check a backend makes.
TEST(ConvolutionFusionTest, TheFormCheckRefusesNearMisses) {
  for (const char* callee : {
           // A subtraction at the root.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  ROOT r = f32[2,8,8,4] subtract(c, b)
})",
           // The convolution added to itself, the bias unread.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  ROOT r = f32[2,8,8,4] add(c, c)
})",
           // The bias computed from parameter 2, not parameter 2 itself.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  e = f32[4] exponential(p2)
  b = f32[2,8,8,4] broadcast(e), dimensions={3}
  ROOT r = f32[2,8,8,4] add(c, b)
})",
           // A relu of the bias, not of the sum.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  a = f32[2,8,8,4] add(c, b)
  zero = f32[] constant(0)
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  ROOT r = f32[2,8,8,4] maximum(b, z)
})",
           // A maximum with 1, not a relu.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  a = f32[2,8,8,4] add(c, b)
  one = f32[] constant(1)
  z = f32[2,8,8,4] broadcast(one), dimensions={}
  ROOT r = f32[2,8,8,4] maximum(a, z)
})",
           // A minimum, not a relu.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  a = f32[2,8,8,4] add(c, b)
  zero = f32[] constant(0)
  z = f32[2,8,8,4] broadcast(zero), dimensions={}
  ROOT r = f32[2,8,8,4] minimum(a, z)
})",
           // A maximum with the bias: more than the form.
           R"(
fused {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  a = f32[2,8,8,4] add(c, b)
  ROOT r = f32[2,8,8,4] maximum(a, b)
})",
       }) {
    auto module = Parse(std::string("HloModule m\n") + callee + R"(
ENTRY main {
  a = f32[2,8,8,1] parameter(0)
  b = f32[3,3,1,4] parameter(1)
  c = f32[4] parameter(2)
  ROOT r = f32[2,8,8,4] call(a, b, c), to_apply=fused
}
)");
    ASSERT_NE(module, nullptr) << callee;
    EXPECT_FALSE(IsConvolutionFusion(*module->FindComputation("fused"))) << callee;
  }
}

// In the CPU pipeline the bias and the relu join the convolution before
// loop fusion, and the fused computation is not fused into again.
TEST(ConvolutionFusionTest, TheCpuPipelineFusesTheBiasAndReluBeforeTheLoop) {
  auto module = Parse(kLayer);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<Pipeline> cpu = CpuPipeline(/*verify=*/true);
  ASSERT_TRUE(cpu->Run(module.get()).ok());
  EXPECT_EQ(CountConvolutionFusions(*module), 1) << ir::PrintModule(*module);
  const ir::Instruction* root = module->entry()->root();
  ASSERT_EQ(root->opcode(), ir::Opcode::kCall) << ir::PrintModule(*module);
  std::optional<ConvolutionFusionForm> form = MatchConvolutionFusion(*root->called(0));
  ASSERT_TRUE(form.has_value()) << ir::PrintModule(*module);
  EXPECT_TRUE(form->relu);
}

}  // namespace
}  // namespace kiln::passes
