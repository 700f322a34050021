#include "compiler/passes/side_effects.h"

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

constexpr absl::string_view kModule = R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
draws {
  p = f32[] parameter(0)
  one = f32[] constant(1)
  d = f32[] rng(p, one), distribution=rng_uniform
  ROOT s = f32[] add(p, d)
}
calls_draws {
  p = f32[] parameter(0)
  ROOT c = f32[] call(p), to_apply=draws
}
ENTRY main {
  x = f32[4] parameter(0)
  zero = f32[] constant(0)
  total = f32[] reduce(x, zero), dimensions={0}, to_apply=add
  nested = f32[] call(total), to_apply=calls_draws
  after = f32[] negate(nested)
  tok = token[] after-all()
  sent = token[] outfeed(x, tok)
  fed = (f32[4], token[]) infeed(tok)
  data = f32[4] get-tuple-element(fed), index=0
  ar = f32[4] all-reduce(x), replica_groups={}, to_apply=add
  ext = f32[4] custom-call(x), custom_call_target="t"
  id = u32[] replica-id()
  ROOT t = (f32[], f32[], f32[4], f32[4], f32[4], u32[]) tuple(total, after, data, ar, ext, id)
}
)";

TEST(SideEffectsTest, OpsAndCalleesWithEffects) {
  auto module = Parse(kModule);
  ASSERT_NE(module, nullptr);
  SideEffects effects(*module);
  auto has = [&](absl::string_view name) {
    return effects.HasSideEffect(*Find(*module, name));
  };
  for (const char* effectful :
       {"nested", "tok", "sent", "fed", "ar", "ext", "d", "c"}) {
    EXPECT_TRUE(has(effectful)) << effectful;
  }
  for (const char* pure :
       {"x", "zero", "total", "after", "data", "id", "t", "s", "one"}) {
    EXPECT_FALSE(has(pure)) << pure;
  }
  EXPECT_TRUE(effects.HasSideEffect(*module->FindComputation("calls_draws")));
  EXPECT_FALSE(effects.HasSideEffect(*module->FindComputation("add")));
}

TEST(SideEffectsTest, DependsOnSideEffectFollowsOperands) {
  auto module = Parse(kModule);
  ASSERT_NE(module, nullptr);
  SideEffects effects(*module);
  auto depends = [&](absl::string_view name) {
    return effects.DependsOnSideEffect(*Find(*module, name));
  };
  EXPECT_TRUE(depends("after"));  // reads a call that draws
  EXPECT_TRUE(depends("data"));   // reads an infeed
  EXPECT_TRUE(depends("t"));
  EXPECT_FALSE(depends("total"));
  EXPECT_FALSE(depends("id"));
  EXPECT_FALSE(depends("x"));
}

TEST(SideEffectsTest, IsEffectfulOpCoversTokens) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  tok = token[] after-all()
  fed = (f32[2], token[]) infeed(tok)
  next = token[] get-tuple-element(fed), index=1
  ROOT v = f32[2] get-tuple-element(fed), index=0
}
)");
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(IsEffectfulOp(*Find(*module, "next")));
  EXPECT_FALSE(IsEffectfulOp(*Find(*module, "v")));
}

}  // namespace
}  // namespace kiln::passes
