#include "compiler/passes/dot_bias_fusion.h"

#include <string>

#include "compiler/passes/cpu_pipeline.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

int CountDotBiasFusions(const ir::Module& module) {
  int n = 0;
  for (const auto& c : module.computations()) n += IsDotBiasFusion(*c) ? 1 : 0;
  return n;
}

// A dense layer: relu(dot(x, w) + bias).
constexpr char kLayer[] = R"(
HloModule m
ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  bias = f32[4] parameter(2)
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[8,4] broadcast(bias), dimensions={1}
  pre = f32[8,4] add(d, b)
  zero = f32[] constant(0)
  z = f32[8,4] broadcast(zero), dimensions={}
  ROOT r = f32[8,4] maximum(pre, z)
}
)";

// The bias and the relu, the sum's one reader, join the product.
TEST(DotBiasFusionTest, TheBiasAndTheReluJoinTheProduct) {
  auto module = Parse(kLayer);
  ASSERT_NE(module, nullptr);
  DotBiasFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
fused_dot_bias {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  p2 = f32[4] parameter(2)
  b = f32[8,4] broadcast(p2), dimensions={1}
  pre = f32[8,4] add(d, b)
  zero = f32[] constant(0)
  z = f32[8,4] broadcast(zero), dimensions={}
  ROOT r = f32[8,4] maximum(pre, z)
}
ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  bias = f32[4] parameter(2)
  ROOT f = f32[8,4] call(x, w, bias), to_apply=fused_dot_bias
}
)"));
  std::optional<DotBiasFusionForm> form =
      MatchDotBiasFusion(*module->FindComputation("fused_dot_bias"));
  ASSERT_TRUE(form.has_value());
  EXPECT_EQ(form->dot->opcode(), ir::Opcode::kDot);
  EXPECT_TRUE(form->relu);
}

// The bias alone (no relu, or a relu whose operand is read again, as a
// gradient that reads the pre-activation does), either operand order, the
// product's operands transposed.
TEST(DotBiasFusionTest, TheBiasJoinsAloneWhereTheSumIsReadAgain) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[16,8] parameter(0)
  w = f32[4,16] parameter(1)
  bias = f32[4] parameter(2)
  d = f32[8,4] dot(x, w), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  b = f32[8,4] broadcast(bias), dimensions={1}
  pre = f32[8,4] add(b, d)
  zero = f32[] constant(0)
  z = f32[8,4] broadcast(zero), dimensions={}
  r = f32[8,4] maximum(pre, z)
  m = pred[8,4] compare(pre, z), direction=GE
  ROOT t = (f32[8,4], pred[8,4]) tuple(r, m)
}
)");
  ASSERT_NE(module, nullptr);
  DotBiasFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  ASSERT_EQ(CountDotBiasFusions(*module), 1);
  std::optional<DotBiasFusionForm> form =
      MatchDotBiasFusion(*module->FindComputation("fused_dot_bias"));
  ASSERT_TRUE(form.has_value());
  EXPECT_FALSE(form->relu);
  // The relu and the compare read the call.
  const ir::Instruction* r = module->entry()->root()->operand(0);
  ASSERT_EQ(r->opcode(), ir::Opcode::kMaximum);
  EXPECT_EQ(r->operand(0)->opcode(), ir::Opcode::kCall);
}

// What is left alone: a product read elsewhere too, a bias along the rows,
// a scalar, an addend of the whole shape (dot-fusion's), a batched or f64
// product.
TEST(DotBiasFusionTest, LeavesOtherAddsAlone) {
  for (const char* entry : {
           R"(
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[8,4] broadcast(bias), dimensions={1}
  pre = f32[8,4] add(d, b)
  ROOT t = (f32[8,4], f32[8,4]) tuple(pre, d)
)",
           R"(
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[8,4] broadcast(rows), dimensions={0}
  ROOT pre = f32[8,4] add(d, b)
)",
           R"(
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = f32[] constant(1)
  b = f32[8,4] broadcast(one), dimensions={}
  ROOT pre = f32[8,4] add(d, b)
)",
           R"(
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT pre = f32[8,4] add(d, c)
)",
           R"(
  x3 = f32[2,8,16] parameter(5)
  w3 = f32[2,16,4] parameter(6)
  d = f32[2,8,4] dot(x3, w3), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  b = f32[2,8,4] broadcast(bias), dimensions={2}
  ROOT pre = f32[2,8,4] add(d, b)
)",
           R"(
  xd = f64[8,16] convert(x)
  wd = f64[16,4] convert(w)
  d = f64[8,4] dot(xd, wd), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bd = f64[4] convert(bias)
  b = f64[8,4] broadcast(bd), dimensions={1}
  ROOT pre = f64[8,4] add(d, b)
)",
       }) {
    auto module = Parse(std::string(R"(
HloModule m
ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  bias = f32[4] parameter(2)
  rows = f32[8] parameter(3)
  c = f32[8,4] parameter(4)
)") + entry + "}\n");
    ASSERT_NE(module, nullptr) << entry;
    DotBiasFusion pass;
    EXPECT_FALSE(RunPass(pass, *module)) << entry;
    EXPECT_EQ(CountDotBiasFusions(*module), 0) << entry;
  }
}

// What a client may send as a call of a "fused" computation: only the
// exact form passes the check a backend makes.
TEST(DotBiasFusionTest, TheFormCheckRefusesNearMisses) {
  for (const char* callee : {
           // A subtraction at the root.
           R"(
fused {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[8,4] broadcast(p2), dimensions={1}
  ROOT r = f32[8,4] subtract(d, b)
})",
           // The operands of the product swapped.
           R"(
fused {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[4,8] dot(p1, p0), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  b = f32[4,8] broadcast(p2), dimensions={0}
  ROOT r = f32[4,8] add(d, b)
})",
           // A maximum with 1, not a relu.
           R"(
fused {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[8,4] broadcast(p2), dimensions={1}
  a = f32[8,4] add(d, b)
  one = f32[] constant(1)
  z = f32[8,4] broadcast(one), dimensions={}
  ROOT r = f32[8,4] maximum(a, z)
})",
           // A relu of the bias, not of the sum.
           R"(
fused {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[8,4] broadcast(p2), dimensions={1}
  a = f32[8,4] add(d, b)
  zero = f32[] constant(0)
  z = f32[8,4] broadcast(zero), dimensions={}
  ROOT r = f32[8,4] maximum(b, z)
})",
       }) {
    auto module = Parse(std::string("HloModule m\n") + callee + R"(
ENTRY main {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  c = f32[4] parameter(2)
  ROOT r = call(a, b, c), to_apply=fused
}
)");
    ASSERT_NE(module, nullptr) << callee;
    EXPECT_FALSE(IsDotBiasFusion(*module->FindComputation("fused"))) << callee;
  }
}

// In the CPU pipeline the layer becomes one call, not fused into again.
TEST(DotBiasFusionTest, TheCpuPipelineMakesTheLayerOneCall) {
  auto module = Parse(kLayer);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<Pipeline> cpu = CpuPipeline(/*verify=*/true);
  ASSERT_TRUE(cpu->Run(module.get()).ok());
  EXPECT_EQ(CountDotBiasFusions(*module), 1) << ir::PrintModule(*module);
  const ir::Instruction* root = module->entry()->root();
  ASSERT_EQ(root->opcode(), ir::Opcode::kCall) << ir::PrintModule(*module);
  std::optional<DotBiasFusionForm> form = MatchDotBiasFusion(*root->called(0));
  ASSERT_TRUE(form.has_value()) << ir::PrintModule(*module);
  EXPECT_TRUE(form->relu);
}

}  // namespace
}  // namespace kiln::passes
