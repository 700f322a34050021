#include "compiler/passes/constant_folding.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/ir/builder.h"
#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

// Folds `text`, expects a change and returns the entry root's literal (the
// root must have become a constant).
ir::Literal FoldRoot(absl::string_view text) {
  auto module = Parse(text);
  if (module == nullptr) return {};
  ConstantFolding fold;
  EXPECT_TRUE(RunPassAndDce(fold, *module)) << text;
  const ir::Instruction* root = module->entry()->root();
  EXPECT_EQ(root->opcode(), ir::Opcode::kConstant) << ir::PrintModule(*module);
  EXPECT_EQ(module->entry()->instruction_count(),
            1 + module->entry()->parameter_count())
      << ir::PrintModule(*module);
  return root->attrs().literal;
}

std::string FoldText(absl::string_view text) { return FoldRoot(text).ToText(); }

// Expects folding to leave `text` unchanged.
void ExpectNotFolded(absl::string_view text) {
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  const std::string before = ir::PrintModule(*module);
  ConstantFolding fold;
  EXPECT_FALSE(RunPass(fold, *module)) << text;
  EXPECT_EQ(ir::PrintModule(*module), before);
}

TEST(ConstantFoldingTest, FoldsAChainInOneRun) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[3] parameter(0)
  a = f32[3] constant({1, 2, 3})
  b = f32[3] constant({0.5, 0.25, -4})
  sum = f32[3] add(a, b)
  neg = f32[3] negate(sum)
  ROOT out = f32[3] multiply(x, neg)
}
)");
  ConstantFolding fold;
  EXPECT_TRUE(RunPassAndDce(fold, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[3] parameter(0)
  c = f32[3] constant({-1.5, -2.25, 1})
  ROOT out = f32[3] multiply(x, c)
}
)"));
  // The folded constant is named after what it replaced.
  EXPECT_NE(Find(*module, "neg.1"), nullptr);
  EXPECT_FALSE(RunPass(fold, *module));
}

TEST(ConstantFoldingTest, IntegerRulesOfTheInterpreter) {
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[4] constant({7, -7, 2147483647, -2147483648})
  b = s32[4] constant({0, 2, 1, -1})
  ROOT q = s32[4] divide(a, b)
})"),
            "{-1, -3, 2147483647, -2147483648}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[3] constant({7, -7, -2147483648})
  b = s32[3] constant({0, 2, -1})
  ROOT r = s32[3] remainder(a, b)
})"),
            "{7, -1, 0}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2] constant({2147483647, -2147483648})
  b = s32[2] constant({1, -1})
  ROOT s = s32[2] add(a, b)
})"),
            "{-2147483648, 2147483647}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = u8[3] constant({1, 128, 255})
  b = u8[3] constant({9, 1, 1})
  ROOT s = u8[3] shift-right-arithmetic(a, b)
})"),
            "{0, 192, 255}");
}

TEST(ConstantFoldingTest, FloatRulesOfTheInterpreter) {
  // maximum and minimum propagate NaN and put +0 above -0.
  const ir::Literal max = FoldRoot(R"(
ENTRY main {
  a = f32[3] constant({-0, 0, nan})
  b = f32[3] constant({0, -0, 1})
  ROOT m = f32[3] maximum(a, b)
})");
  EXPECT_EQ(max.ToText(), "{0, 0, nan}");
  EXPECT_FALSE(std::signbit(max.data<float>()[0]));
  EXPECT_FALSE(std::signbit(max.data<float>()[1]));
  const ir::Literal min = FoldRoot(R"(
ENTRY main {
  a = f32[2] constant({-0, 0})
  b = f32[2] constant({0, -0})
  ROOT m = f32[2] minimum(a, b)
})");
  EXPECT_TRUE(std::signbit(min.data<float>()[0]));
  EXPECT_TRUE(std::signbit(min.data<float>()[1]));
  // Conversions saturate, NaN becomes 0.
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = f32[4] constant({1e10, -1e10, nan, -2.75})
  ROOT c = s32[4] convert(a)
})"),
            "{2147483647, -2147483648, 0, -2}");
  // bf16 arithmetic is done in f32 and rounded once.
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = bf16[2] constant({1, 256})
  b = bf16[2] constant({0.00390625, 1})
  ROOT s = bf16[2] add(a, b)
})"),
            "{1, 256}");
  const ir::Literal quotient = FoldRoot(R"(
ENTRY main {
  a = f64[3] constant({1, -1, 0})
  b = f64[3] constant({0, 0, 0})
  ROOT q = f64[3] divide(a, b)
})");
  EXPECT_EQ(quotient.data<double>()[0],
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(quotient.data<double>()[1],
            -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(quotient.data<double>()[2]));
}

TEST(ConstantFoldingTest, CompareSelectAndClamp) {
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = f32[4] constant({1, nan, -0, 3})
  b = f32[4] constant({2, nan, 0, 3})
  lt = pred[4] compare(a, b), direction=LT
  eq = pred[4] compare(a, b), direction=EQ
  either = pred[4] or(lt, eq)
  ROOT sel = f32[4] select(either, a, b)
})"),
            "{1, nan, -0, 3}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  lo = s32[] constant(-1)
  x = s32[4] constant({-5, 0, 3, 9})
  hi = s32[] constant(4)
  ROOT c = s32[4] clamp(lo, x, hi)
})"),
            "{-1, 0, 3, 4}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  p = pred[] constant(false)
  a = s32[2] constant({1, 2})
  b = s32[2] constant({3, 4})
  ROOT s = s32[2] select(p, a, b)
})"),
            "{3, 4}");
}

TEST(ConstantFoldingTest, DataMovement) {
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2,3] constant({{1, 2, 3}, {4, 5, 6}})
  ROOT t = s32[3,2] transpose(a), dimensions={1,0}
})"),
            "{{1, 4}, {2, 5}, {3, 6}}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2,3] constant({{1, 2, 3}, {4, 5, 6}})
  ROOT r = s32[3,2] reshape(a)
})"),
            "{{1, 2}, {3, 4}, {5, 6}}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2] constant({7, 8})
  ROOT b = s32[2,1] broadcast(a), dimensions={0}
})"),
            "{{7}, {8}}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2,3] constant({{1, 2, 3}, {4, 5, 6}})
  ROOT s = s32[2,2] slice(a), slice={[0:2], [0:3:2]}
})"),
            "{{1, 3}, {4, 6}}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2,3] constant({{1, 2, 3}, {4, 5, 6}})
  ROOT r = s32[2,3] reverse(a), dimensions={1}
})"),
            "{{3, 2, 1}, {6, 5, 4}}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = s32[2,1] constant({{1}, {2}})
  b = s32[2,2] constant({{3, 4}, {5, 6}})
  ROOT c = s32[2,3] concatenate(a, b), dimensions={1}
})"),
            "{{1, 3, 4}, {2, 5, 6}}");
  EXPECT_EQ(FoldText(R"(
ENTRY main {
  a = f32[] constant(-1)
  ROOT b = s32[] bitcast-convert(a)
})"),
            "-1082130432");
}

TEST(ConstantFoldingTest, LeavesWhatItDoesNotEvaluateExactly) {
  // Parameters, math-library functions, and float arithmetic on two NaNs.
  ExpectNotFolded(R"(
ENTRY main {
  x = f32[2] parameter(0)
  c = f32[2] constant({1, 2})
  ROOT s = f32[2] add(x, c)
})");
  ExpectNotFolded(R"(
ENTRY main {
  c = f32[2] constant({1, 2})
  ROOT e = f32[2] exponential(c)
})");
  ExpectNotFolded(R"(
ENTRY main {
  a = f32[2] constant({1, 2})
  b = f32[2] constant({3, 4})
  ROOT p = f32[2] power(a, b)
})");
  ExpectNotFolded(R"(
ENTRY main {
  a = f32[2] constant({nan, 1})
  b = f32[2] constant({nan, 2})
  ROOT s = f32[2] add(a, b)
})");
  ExpectNotFolded(R"(
ENTRY main {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  ROOT r = f32[4] rng(lo, hi), distribution=rng_uniform
})");
}

TEST(ConstantFoldingTest, BoundsTheSizeOfWhatItCreates) {
  // Broadcasts that grow and iotas stay instructions the backend generates.
  ExpectNotFolded(R"(
ENTRY main {
  c = f32[] constant(1)
  ROOT b = f32[4] broadcast(c), dimensions={}
})");
  ExpectNotFolded(R"(
ENTRY main {
  c = s32[2] constant({1, 2})
  ROOT b = s32[2,2] broadcast(c), dimensions={1}
})");
  ExpectNotFolded(R"(
ENTRY main {
  ROOT i = s32[3] iota(), iota_dimension=0
})");
  // An op on a broadcast is not folded either (the simplifier moves it
  // before the broadcast).
  ExpectNotFolded(R"(
ENTRY main {
  c = f32[] constant(1)
  b = f32[4] broadcast(c), dimensions={}
  ROOT n = f32[4] negate(b)
})");
  // Results no larger than their operands fold up to kMaxBytes.
  for (int64_t n : {int64_t{200000}, int64_t{300000}}) {
    ir::Module module("m");
    ir::Builder b(&module, "main");
    ir::Instruction* c =
        b.Constant(ir::Literal(ir::Shape(ir::ElementType::kF32, {n})));
    b.Unary(ir::Opcode::kNegate, c);
    absl::StatusOr<ir::Computation*> main = b.Build();
    ASSERT_TRUE(main.ok()) << main.status();
    module.set_entry(*main);
    ConstantFolding fold;
    const bool fits = n * 4 <= ConstantFolding::kMaxBytes;
    EXPECT_EQ(RunPassAndDce(fold, module), fits) << n;
    EXPECT_EQ(module.entry()->root()->opcode(),
              fits ? ir::Opcode::kConstant : ir::Opcode::kNegate);
  }
}

TEST(ConstantFoldingTest, FoldsInCalledComputations) {
  auto module = Parse(R"(
HloModule m
body {
  p = f32[] parameter(0)
  a = f32[] constant(2)
  b = f32[] constant(3)
  c = f32[] multiply(a, b)
  ROOT r = f32[] add(p, c)
}
ENTRY main {
  x = f32[] parameter(0)
  ROOT k = f32[] call(x), to_apply=body
}
)");
  ConstantFolding fold;
  EXPECT_TRUE(RunPassAndDce(fold, *module));
  const ir::Computation* body = module->FindComputation("body");
  EXPECT_EQ(body->root()->operand(1)->opcode(), ir::Opcode::kConstant);
  EXPECT_EQ(body->root()->operand(1)->attrs().literal.ToText(), "6");
}

}  // namespace
}  // namespace kiln::passes
