#include "compiler/passes/call_inliner.h"

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

TEST(CallInlinerTest, ReplacesCallsAndFusionsByTheCalleesWork) {
  auto module = Parse(R"(
HloModule m
inner {
  p = f32[4] parameter(0)
  ROOT e = f32[4] exponential(p)
}
outer {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  s = f32[4] add(a, b)
  ROOT c = f32[4] call(s), to_apply=inner
}
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  f = f32[4] fusion(x, y), kind=kLoop, calls=outer
  ROOT n = f32[4] negate(f)
}
)");
  CallInliner inliner;
  EXPECT_TRUE(RunPassAndDce(inliner, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  s = f32[4] add(x, y)
  e = f32[4] exponential(s)
  ROOT n = f32[4] negate(e)
}
)"));
  EXPECT_FALSE(RunPass(inliner, *module));
}

TEST(CallInlinerTest, ACalleeReturningItsParameterIsItsArgument) {
  auto module = Parse(R"(
HloModule m
id {
  p = f32[2] parameter(0)
  ROOT q = f32[2] parameter(1)
}
ENTRY main {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  c = f32[2] call(x, y), to_apply=id
  ROOT a = f32[2] abs(c)
}
)");
  CallInliner inliner;
  EXPECT_TRUE(RunPassAndDce(inliner, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  ROOT a = f32[2] abs(y)
}
)"));
}

TEST(CallInlinerTest, CallsWithSideEffectsStay) {
  auto module = Parse(R"(
HloModule m
draw {
  lo = f32[] parameter(0)
  hi = f32[] parameter(1)
  ROOT r = f32[4] rng(lo, hi), distribution=rng_uniform
}
ENTRY main {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[4] call(a, b), to_apply=draw
}
)");
  const std::string before = Structure(*module);
  CallInliner inliner;
  EXPECT_FALSE(RunPass(inliner, *module));
  EXPECT_EQ(Structure(*module), before);
}

// Each level calls the next twice: inlining everything would copy the
// leaf 2^30 times. The module grows to the budget and keeps its calls
// beyond it.
TEST(CallInlinerTest, AFanOutOfCallsStaysWithinTheBudget) {
  std::string text = "HloModule m\nf0 {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n";
  for (int level = 1; level <= 30; ++level) {
    text += "f" + std::to_string(level) + " {\n  p = f32[2] parameter(0)\n"
            "  a = f32[2] call(p), to_apply=f" + std::to_string(level - 1) + "\n"
            "  ROOT b = f32[2] call(a), to_apply=f" + std::to_string(level - 1) + "\n}\n";
  }
  text += "ENTRY main {\n  x = f32[2] parameter(0)\n  ROOT c = f32[2] call(x), to_apply=f30\n}\n";
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  int before = 0;
  for (const auto& c : module->computations()) before += c->instruction_count();
  CallInliner inliner;
  EXPECT_TRUE(RunPassAndDce(inliner, *module));
  int after = 0, calls = 0;
  for (const auto& c : module->computations()) {
    after += c->instruction_count();
    for (const auto& i : c->instructions()) calls += i->opcode() == ir::Opcode::kCall;
  }
  EXPECT_LE(after, 4 * before + CallInliner::kExtraInstructions);
  EXPECT_GT(calls, 0);
}

}  // namespace
}  // namespace kiln::passes
