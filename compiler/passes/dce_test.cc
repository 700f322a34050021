#include "compiler/passes/dce.h"

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

TEST(DceTest, RemovesWhatDoesNotReachTheRoot) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  unused = f32[4] parameter(1)
  n = f32[4] negate(x)
  dead1 = f32[4] exponential(n)
  dead2 = f32[4] add(dead1, x)
  ROOT a = f32[4] abs(n)
}
)");
  Dce dce;
  EXPECT_TRUE(RunPass(dce, *module));
  // Parameters stay, used or not: they are the signature.
  EXPECT_EQ(ir::PrintModule(*module), R"(HloModule m

ENTRY %main (x: f32[4], unused: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %n = f32[4] negate(%x)
  ROOT %a = f32[4] abs(%n)
  %unused = f32[4] parameter(1)
}
)");
  EXPECT_FALSE(RunPass(dce, *module));
}

TEST(DceTest, NothingDeadIsNoChange) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  ROOT a = f32[4] abs(x)
}
)");
  const std::string before = ir::PrintModule(*module);
  Dce dce;
  EXPECT_FALSE(RunPass(dce, *module));
  EXPECT_EQ(ir::PrintModule(*module), before);
}

TEST(DceTest, KeepsSideEffectsAndWhatTheyRead) {
  auto module = Parse(R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  draw = f32[8] rng(lo, hi), distribution=rng_uniform
  tok = token[] after-all()
  fed = (f32[3], token[]) infeed(tok)
  sent = token[] outfeed(x, tok)
  tok2 = token[] after-all(tok, sent)
  fed_tok = token[] get-tuple-element(fed), index=1
  sum = f32[3] all-reduce(x), replica_groups={}, to_apply=add
  ext = f32[3] custom-call(x), custom_call_target="something"
  dead = f32[3] negate(x)
  ROOT r = f32[3] abs(x)
}
)");
  ASSERT_NE(module, nullptr);
  Dce dce;
  EXPECT_TRUE(RunPass(dce, *module));
  for (const char* kept : {"lo", "hi", "draw", "tok", "fed", "sent", "tok2",
                           "fed_tok", "sum", "ext"}) {
    EXPECT_NE(Find(*module, kept), nullptr) << kept;
  }
  EXPECT_EQ(Find(*module, "dead"), nullptr);
  EXPECT_NE(module->FindComputation("add"), nullptr);
}

TEST(DceTest, RemovesComputationsNoLongerCalled) {
  auto module = Parse(R"(
HloModule m
never {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}
only_dead {
  p = f32[] parameter(0)
  ROOT n = f32[] abs(p)
}
live {
  p = f32[] parameter(0)
  ROOT n = f32[] sqrt(p)
}
ENTRY main {
  x = f32[] parameter(0)
  d = f32[] call(x), to_apply=only_dead
  ROOT l = f32[] call(x), to_apply=live
}
)");
  Dce dce;
  EXPECT_TRUE(RunPass(dce, *module));
  EXPECT_EQ(module->FindComputation("never"), nullptr);
  EXPECT_EQ(module->FindComputation("only_dead"), nullptr);
  EXPECT_NE(module->FindComputation("live"), nullptr);
  EXPECT_EQ(module->computations().size(), 2u);
  EXPECT_EQ(module->entry()->name(), "main");
}

TEST(DceTest, KeepsALoopWhoseBodyHasAnEffectAndRemovesAPureOne) {
  auto module = Parse(R"(
HloModule m
cond {
  p = s32[] parameter(0)
  ten = s32[] constant(10)
  ROOT lt = pred[] compare(p, ten), direction=LT
}
pure_body {
  p = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT next = s32[] add(p, one)
}
loud_body {
  p = s32[] parameter(0)
  tok = token[] after-all()
  sent = token[] outfeed(p, tok)
  one = s32[] constant(1)
  ROOT next = s32[] add(p, one)
}
ENTRY main {
  x = s32[] parameter(0)
  quiet = s32[] while(x), condition=cond, body=pure_body
  loud = s32[] while(x), condition=cond, body=loud_body
  ROOT r = s32[] negate(x)
}
)");
  Dce dce;
  EXPECT_TRUE(RunPass(dce, *module));
  EXPECT_EQ(Find(*module, "quiet"), nullptr);
  EXPECT_NE(Find(*module, "loud"), nullptr);
  EXPECT_EQ(module->FindComputation("pure_body"), nullptr);
  EXPECT_NE(module->FindComputation("loud_body"), nullptr);
  EXPECT_NE(module->FindComputation("cond"), nullptr);
}

TEST(DceTest, CleansCalledComputationsToo) {
  auto module = Parse(R"(
HloModule m
body {
  p = f32[] parameter(0)
  dead = f32[] exponential(p)
  ROOT n = f32[] negate(p)
}
ENTRY main {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x), to_apply=body
}
)");
  Dce dce;
  EXPECT_TRUE(RunPass(dce, *module));
  EXPECT_EQ(Find(*module, "dead"), nullptr);
  EXPECT_NE(Find(*module, "n"), nullptr);
}

TEST(DceTest, KeepsTheOrderOfRandomDraws) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  first = f32[4] rng(lo, hi), distribution=rng_uniform
  dead = f32[4] negate(first)
  second = f32[4] rng(lo, hi), distribution=rng_normal
  unused_draw = f32[2] rng(lo, hi), distribution=rng_uniform
  ROOT t = (f32[4], f32[4]) tuple(first, second)
}
)");
  Dce dce;
  EXPECT_TRUE(RunPass(dce, *module));
  std::vector<std::string> draws;
  for (const auto& instr : module->entry()->instructions()) {
    if (instr->opcode() == ir::Opcode::kRng) draws.push_back(instr->name());
  }
  EXPECT_EQ(draws,
            (std::vector<std::string>{"first", "second", "unused_draw"}));
  EXPECT_EQ(Find(*module, "dead"), nullptr);
}

}  // namespace
}  // namespace kiln::passes
