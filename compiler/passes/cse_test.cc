#include "compiler/passes/cse.h"

#include <cstring>

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

TEST(CseTest, MergesIdenticalInstructionsAndWhatTheyFeed) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  a1 = f32[4] add(x, y)
  a2 = f32[4] add(x, y)
  m1 = f32[4] multiply(a1, a1)
  m2 = f32[4] multiply(a2, a2)
  ROOT t = (f32[4], f32[4]) tuple(m1, m2)
}
)");
  Cse cse;
  EXPECT_TRUE(RunPassAndDce(cse, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  a = f32[4] add(x, y)
  m = f32[4] multiply(a, a)
  ROOT t = (f32[4], f32[4]) tuple(m, m)
}
)"));
  EXPECT_FALSE(RunPass(cse, *module));
}

TEST(CseTest, OperandOrderAttributesAndShapesMatter) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  a1 = f32[4] add(x, y)
  a2 = f32[4] add(y, x)
  lt = pred[4] compare(x, y), direction=LT
  gt = pred[4] compare(x, y), direction=GT
  c1 = s32[4] convert(x)
  c2 = s8[4] convert(x)
  t1 = f32[4] transpose(x), dimensions={0}
  r1 = f32[2,2] reshape(x)
  r2 = f32[4,1] reshape(x)
  ROOT t = (f32[4], f32[4], pred[4], pred[4], s32[4], s8[4], f32[4], f32[2,2], f32[4,1]) tuple(a1, a2, lt, gt, c1, c2, t1, r1, r2)
}
)");
  Cse cse;
  EXPECT_FALSE(RunPass(cse, *module));
}

TEST(CseTest, ConstantsMergeOnlyWithTheSameBytes) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  one_a = f32[2] constant({1, 2})
  one_b = f32[2] constant({1, 2})
  pos = f32[] constant(0)
  neg = f32[] constant(-0)
  nan_a = f32[] constant(nan)
  nan_b = f32[] constant(nan)
  other_type = f64[2] constant({1, 2})
  ROOT t = (f32[2], f32[2], f32[], f32[], f32[], f32[], f64[2]) tuple(one_a, one_b, pos, neg, nan_a, nan_b, other_type)
}
)");
  ASSERT_NE(module, nullptr);
  // Give nan_b another payload.
  for (const auto& instr : module->entry()->instructions()) {
    if (instr->name() == "nan_b") {
      const uint32_t bits = 0x7fc00001;
      std::memcpy(instr->mutable_attrs().literal.mutable_bytes().data(), &bits,
                  4);
    }
  }
  Cse cse;
  EXPECT_TRUE(RunPassAndDce(cse, *module));
  const ir::Instruction* root = module->entry()->root();
  EXPECT_EQ(root->operand(0), root->operand(1));
  EXPECT_NE(root->operand(2), root->operand(3));
  EXPECT_NE(root->operand(4), root->operand(5));
  EXPECT_NE(Find(*module, "nan_b"), nullptr);
  EXPECT_NE(Find(*module, "neg"), nullptr);
  EXPECT_EQ(Find(*module, "one_b"), nullptr);
}

TEST(CseTest, NeverMergesSideEffects) {
  auto module = Parse(R"(
HloModule m
noisy {
  p = f32[] parameter(0)
  tok = token[] after-all()
  sent = token[] outfeed(p, tok)
  ROOT n = f32[] negate(p)
}
quiet {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}
ENTRY main {
  x = f32[] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r1 = f32[4] rng(lo, hi), distribution=rng_uniform
  r2 = f32[4] rng(lo, hi), distribution=rng_uniform
  n1 = f32[] call(x), to_apply=noisy
  n2 = f32[] call(x), to_apply=noisy
  q1 = f32[] call(x), to_apply=quiet
  q2 = f32[] call(x), to_apply=quiet
  e1 = f32[] custom-call(x), custom_call_target="t"
  e2 = f32[] custom-call(x), custom_call_target="t"
  t1 = token[] after-all()
  t2 = token[] after-all()
  ROOT t = (f32[4], f32[4], f32[], f32[], f32[], f32[], f32[], f32[], token[], token[]) tuple(r1, r2, n1, n2, q1, q2, e1, e2, t1, t2)
}
)");
  Cse cse;
  EXPECT_TRUE(RunPassAndDce(cse, *module));
  const ir::Instruction* root = module->entry()->root();
  EXPECT_NE(root->operand(0), root->operand(1));  // rng
  EXPECT_NE(root->operand(2), root->operand(3));  // call with an outfeed
  EXPECT_EQ(root->operand(4), root->operand(5));  // pure call
  EXPECT_NE(root->operand(6), root->operand(7));  // custom-call
  EXPECT_NE(root->operand(8), root->operand(9));  // tokens
}

TEST(CseTest, StaysWithinEachComputation) {
  auto module = Parse(R"(
HloModule m
f {
  p = f32[] parameter(0)
  c = f32[] constant(2)
  ROOT m = f32[] multiply(p, c)
}
ENTRY main {
  x = f32[] parameter(0)
  c = f32[] constant(2)
  m = f32[] multiply(x, c)
  k = f32[] call(m), to_apply=f
  ROOT r = f32[] add(k, m)
}
)");
  Cse cse;
  EXPECT_FALSE(RunPass(cse, *module));
}

TEST(CseTest, MergesInsideCalledComputations) {
  auto module = Parse(R"(
HloModule m
f {
  p = f32[] parameter(0)
  e1 = f32[] exponential(p)
  e2 = f32[] exponential(p)
  ROOT s = f32[] add(e1, e2)
}
ENTRY main {
  x = f32[] parameter(0)
  ROOT k = f32[] call(x), to_apply=f
}
)");
  Cse cse;
  EXPECT_TRUE(RunPassAndDce(cse, *module));
  const ir::Computation* f = module->FindComputation("f");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->root()->operand(0), f->root()->operand(1));
  EXPECT_EQ(f->instruction_count(), 3);
}

}  // namespace
}  // namespace kiln::passes
