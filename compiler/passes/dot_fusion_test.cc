#include "compiler/passes/dot_fusion.h"

#include <string>

#include "compiler/passes/cpu_pipeline.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

int CountDotFusions(const ir::Module& module) {
  int n = 0;
  for (const auto& c : module.computations()) n += IsDotFusion(*c) ? 1 : 0;
  return n;
}

// SGD's momentum update v' = momentum v + x^T g.
std::string MomentumUpdate(const char* momentum) {
  return std::string(R"(
HloModule m
ENTRY main {
  x = f32[16,8] parameter(0)
  g = f32[16,4] parameter(1)
  v = f32[8,4] parameter(2)
  d = f32[8,4] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  momentum = f32[] constant()") +
         momentum + R"()
  b = f32[8,4] broadcast(momentum), dimensions={}
  scaled = f32[8,4] multiply(v, b)
  ROOT v2 = f32[8,4] add(scaled, d)
}
)";
}

// The momentum update becomes one call whose GEMM accumulates into v.
TEST(DotFusionTest, AScaledAddendJoinsTheProduct) {
  auto module = Parse(MomentumUpdate("0.9"));
  ASSERT_NE(module, nullptr);
  DotFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
fused_dot {
  p0 = f32[16,8] parameter(0)
  p1 = f32[16,4] parameter(1)
  d = f32[8,4] dot(p0, p1), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  p2 = f32[8,4] parameter(2)
  momentum = f32[] constant(0.9)
  b = f32[8,4] broadcast(momentum), dimensions={}
  scaled = f32[8,4] multiply(p2, b)
  ROOT v2 = f32[8,4] add(d, scaled)
}
ENTRY main {
  x = f32[16,8] parameter(0)
  g = f32[16,4] parameter(1)
  v = f32[8,4] parameter(2)
  ROOT f = f32[8,4] call(x, g, v), to_apply=fused_dot
}
)"));
  const ir::Computation* fused = module->FindComputation("fused_dot");
  ASSERT_NE(fused, nullptr);
  std::optional<DotFusionForm> form = MatchDotFusion(*fused);
  ASSERT_TRUE(form.has_value());
  EXPECT_FLOAT_EQ(form->beta, 0.9);
}

// A bias of the product's shape, or any value, is added with beta 1; a
// scaled value read elsewhere too stays a value of its own.
TEST(DotFusionTest, AnyAddendOfTheProductsShapeJoinsWithBetaOne) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,6] parameter(1)
  v = f32[4,6] parameter(2)
  d = f32[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  two = f32[] constant(2)
  b = f32[4,6] broadcast(two), dimensions={}
  scaled = f32[4,6] multiply(b, v)
  s = f32[4,6] add(d, scaled)
  ROOT t = (f32[4,6], f32[4,6]) tuple(s, scaled)
}
)");
  ASSERT_NE(module, nullptr);
  DotFusion pass;
  EXPECT_TRUE(RunPass(pass, *module));
  ASSERT_EQ(CountDotFusions(*module), 1);
  const ir::Instruction* call = module->entry()->root()->operand(0);
  ASSERT_EQ(call->opcode(), ir::Opcode::kCall);
  EXPECT_EQ(call->operand(2)->name(), "scaled");
  std::optional<DotFusionForm> form = MatchDotFusion(*call->called(0));
  ASSERT_TRUE(form.has_value());
  EXPECT_EQ(form->beta, 1.0);
}

TEST(DotFusionTest, LeavesAloneWhatAGemmCannotAccumulate) {
  for (const char* body : {
           // The product is read elsewhere too.
           R"(
  d = f32[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[4,6] add(d, v)
  ROOT t = (f32[4,6], f32[4,6]) tuple(s, d))",
           // The product added to itself.
           R"(
  d = f32[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[4,6] add(d, d))",
           // The addend is an operand of the product.
           R"(
  q = f32[4,4] parameter(3)
  r = f32[4,4] parameter(4)
  d = f32[4,4] dot(q, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[4,4] add(d, q))",
           // The addend is a bias broadcast to the product's shape, which
           // the loop reading the product expands as it goes.
           R"(
  d = f32[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bias = f32[6] parameter(3)
  bb = f32[4,6] broadcast(bias), dimensions={1}
  ROOT s = f32[4,6] add(d, bb))",
       }) {
    auto module = Parse(std::string(R"(
HloModule m
ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,6] parameter(1)
  v = f32[4,6] parameter(2))") +
                        body + "\n}\n");
    ASSERT_NE(module, nullptr) << body;
    DotFusion pass;
    EXPECT_FALSE(RunPass(pass, *module)) << body;
    EXPECT_EQ(CountDotFusions(*module), 0) << body;
  }
  // Scaled by zero: the scaled value is the addend, with beta 1 (a GEMM
  // with beta 0 would not read v, where 0 times a NaN in it is NaN).
  auto zero = Parse(MomentumUpdate("0"));
  ASSERT_NE(zero, nullptr);
  DotFusion zero_pass;
  EXPECT_TRUE(RunPass(zero_pass, *zero));
  const ir::Instruction* call = zero->entry()->root();
  ASSERT_EQ(call->opcode(), ir::Opcode::kCall);
  EXPECT_EQ(call->operand(2)->name(), "scaled");
  EXPECT_EQ(MatchDotFusion(*call->called(0))->beta, 1.0);
  // Batch dimensions, f64, and a product's root.
  for (const char* text : {R"(
HloModule m
ENTRY main {
  x = f32[2,4,8] parameter(0)
  w = f32[2,8,6] parameter(1)
  v = f32[2,4,6] parameter(2)
  d = f32[2,4,6] dot(x, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT s = f32[2,4,6] add(d, v)
}
)",
                           R"(
HloModule m
ENTRY main {
  x = f64[4,8] parameter(0)
  w = f64[8,6] parameter(1)
  v = f64[4,6] parameter(2)
  d = f64[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f64[4,6] add(d, v)
}
)",
                           R"(
HloModule m
ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,6] parameter(1)
  ROOT d = f32[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)"}) {
    auto module = Parse(text);
    ASSERT_NE(module, nullptr);
    DotFusion pass;
    EXPECT_FALSE(RunPass(pass, *module)) << text;
  }
}

// What a client may send as a call of a "fused" computation: only the
// exact form passes the check a backend makes.
TEST(DotFusionTest, TheFormCheckRefusesNearMisses) {
  for (const char* callee : {
           // A negated addend (an instruction of another kind).
           R"(
fused {
  p0 = f32[4,8] parameter(0)
  p1 = f32[8,6] parameter(1)
  p2 = f32[4,6] parameter(2)
  d = f32[4,6] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[4,6] negate(p2)
  ROOT s = f32[4,6] add(d, n)
})",
           // A subtraction at the root.
           R"(
fused {
  p0 = f32[4,8] parameter(0)
  p1 = f32[8,6] parameter(1)
  p2 = f32[4,6] parameter(2)
  d = f32[4,6] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[4,6] subtract(d, p2)
})",
           // The dot is not the root's operand.
           R"(
fused {
  p0 = f32[4,8] parameter(0)
  p1 = f32[8,6] parameter(1)
  p2 = f32[4,6] parameter(2)
  t = f32[8,4] transpose(p0), dimensions={1,0}
  d = f32[4,4] dot(p0, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[4,6] add(p2, p2)
})",
           // The scaled value is not parameter 2 but computed from it.
           R"(
fused {
  p0 = f32[4,8] parameter(0)
  p1 = f32[8,6] parameter(1)
  p2 = f32[4,6] parameter(2)
  d = f32[4,6] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[4,6] exponential(p2)
  c = f32[] constant(1)
  b = f32[4,6] broadcast(c), dimensions={}
  m = f32[4,6] multiply(e, b)
  ROOT s = f32[4,6] add(d, m)
})",
           // A zero scale: a GEMM with beta 0 would not read NaNs in p2.
           R"(
fused {
  p0 = f32[4,8] parameter(0)
  p1 = f32[8,6] parameter(1)
  p2 = f32[4,6] parameter(2)
  d = f32[4,6] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f32[] constant(0)
  b = f32[4,6] broadcast(c), dimensions={}
  m = f32[4,6] multiply(p2, b)
  ROOT s = f32[4,6] add(d, m)
})",
       }) {
    auto module = Parse(std::string("HloModule m\n") + callee + R"(
ENTRY main {
  a = f32[4,8] parameter(0)
  b = f32[8,6] parameter(1)
  c = f32[4,6] parameter(2)
  ROOT r = f32[4,6] call(a, b, c), to_apply=fused
}
)");
    ASSERT_NE(module, nullptr) << callee;
    EXPECT_FALSE(IsDotFusion(*module->FindComputation("fused"))) << callee;
  }
}

// In the CPU pipeline the momentum update fuses before loop fusion, which
// then writes the weights from the call's result.
TEST(DotFusionTest, TheCpuPipelineFusesTheMomentumUpdateBeforeTheLoop) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[16,8] parameter(0)
  g = f32[16,4] parameter(1)
  v = f32[8,4] parameter(2)
  w = f32[8,4] parameter(3)
  d = f32[8,4] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  momentum = f32[] constant(0.9)
  b = f32[8,4] broadcast(momentum), dimensions={}
  scaled = f32[8,4] multiply(v, b)
  v2 = f32[8,4] add(scaled, d)
  lr = f32[] constant(0.01)
  lb = f32[8,4] broadcast(lr), dimensions={}
  step = f32[8,4] multiply(v2, lb)
  w2 = f32[8,4] subtract(w, step)
  ROOT t = (f32[8,4], f32[8,4]) tuple(v2, w2)
}
)");
  ASSERT_NE(module, nullptr);
  std::unique_ptr<Pipeline> cpu = CpuPipeline(/*verify=*/true);
  ASSERT_TRUE(cpu->Run(module.get()).ok());
  EXPECT_EQ(CountDotFusions(*module), 1);
  int loops = 0;
  for (const auto& c : module->computations())
    loops += IsLoopFusion(*c) ? 1 : 0;
  EXPECT_EQ(loops, 1) << ir::PrintModule(*module);
}

}  // namespace
}  // namespace kiln::passes
