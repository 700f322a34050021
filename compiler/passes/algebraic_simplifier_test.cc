#include "compiler/passes/algebraic_simplifier.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

// Simplifies `text` (then DCE) and expects the structure of `want`.
void ExpectSimplifiesTo(absl::string_view text, absl::string_view want) {
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  AlgebraicSimplifier simplifier;
  EXPECT_TRUE(RunPassAndDce(simplifier, *module)) << text;
  EXPECT_EQ(Structure(*module), Structure(want)) << ir::PrintModule(*module);
}

void ExpectUnchanged(absl::string_view text) {
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  const std::string before = ir::PrintModule(*module);
  AlgebraicSimplifier simplifier;
  EXPECT_FALSE(RunPass(simplifier, *module)) << text;
  EXPECT_EQ(ir::PrintModule(*module), before);
}

// A module computing `expr` from x = parameter of `type`[4] and a constant
// k = `type`[4] of `value` (spelled as a literal), root `expr`.
std::string Binary(absl::string_view type, absl::string_view value,
                   absl::string_view expr) {
  return absl::StrReplaceAll(R"(
ENTRY main {
  x = $T[4] parameter(0)
  s = $T[] constant($V)
  k = $T[4] broadcast(s), dimensions={}
  ROOT r = $T[4] $E
})",
                             {{"$T", type}, {"$V", value}, {"$E", expr}});
}

std::string Identity(absl::string_view type) {
  return absl::StrReplaceAll(R"(
ENTRY main {
  x = $T[4] parameter(0)
  ROOT r = $T[4] copy(x)
})",
                             {{"$T", type}});
}

// The module that returns x itself.
std::string JustX(absl::string_view type) {
  return absl::StrReplaceAll(R"(
ENTRY main {
  ROOT x = $T[4] parameter(0)
})",
                             {{"$T", type}});
}

TEST(AlgebraicSimplifierTest, AddsOnlyTheExactIdentity) {
  // x + -0 is x for every float x; x + +0 turns -0 into +0.
  ExpectSimplifiesTo(Binary("f32", "-0", "add(x, k)"), JustX("f32"));
  ExpectSimplifiesTo(Binary("f32", "-0", "add(k, x)"), JustX("f32"));
  ExpectSimplifiesTo(Binary("bf16", "-0", "add(x, k)"), JustX("bf16"));
  ExpectUnchanged(Binary("f32", "0", "add(x, k)"));
  ExpectUnchanged(Binary("f64", "0", "add(k, x)"));
  ExpectSimplifiesTo(Binary("s32", "0", "add(x, k)"), JustX("s32"));
  ExpectSimplifiesTo(Binary("u8", "0", "add(k, x)"), JustX("u8"));
  ExpectUnchanged(Binary("s32", "1", "add(x, k)"));
}

TEST(AlgebraicSimplifierTest, SubtractMultiplyDivide) {
  ExpectSimplifiesTo(Binary("f32", "0", "subtract(x, k)"), JustX("f32"));
  ExpectUnchanged(Binary("f32", "-0", "subtract(x, k)"));
  ExpectUnchanged(Binary("f32", "0", "subtract(k, x)"));
  ExpectSimplifiesTo(Binary("s64", "0", "subtract(x, k)"), JustX("s64"));
  ExpectSimplifiesTo(Binary("f32", "1", "multiply(x, k)"), JustX("f32"));
  ExpectSimplifiesTo(Binary("f16", "1", "multiply(k, x)"), JustX("f16"));
  ExpectSimplifiesTo(Binary("s32", "1", "multiply(k, x)"), JustX("s32"));
  ExpectUnchanged(Binary("f32", "-1", "multiply(x, k)"));
  ExpectSimplifiesTo(Binary("f64", "1", "divide(x, k)"), JustX("f64"));
  ExpectSimplifiesTo(Binary("s32", "1", "divide(x, k)"), JustX("s32"));
  ExpectUnchanged(Binary("f32", "1", "divide(k, x)"));
}

TEST(AlgebraicSimplifierTest, BitwiseAndShifts) {
  ExpectSimplifiesTo(Binary("s32", "0", "or(x, k)"), JustX("s32"));
  ExpectSimplifiesTo(Binary("u16", "0", "xor(k, x)"), JustX("u16"));
  ExpectSimplifiesTo(Binary("s32", "-1", "and(x, k)"), JustX("s32"));
  ExpectSimplifiesTo(Binary("u32", "4294967295", "and(k, x)"), JustX("u32"));
  ExpectUnchanged(Binary("u32", "4294967294", "and(k, x)"));
  ExpectSimplifiesTo(Binary("pred", "true", "and(x, k)"), JustX("pred"));
  ExpectSimplifiesTo(Binary("pred", "false", "or(k, x)"), JustX("pred"));
  ExpectUnchanged(Binary("pred", "true", "or(k, x)"));
  ExpectSimplifiesTo(Binary("s32", "0", "shift-left(x, k)"), JustX("s32"));
  ExpectSimplifiesTo(Binary("s8", "0", "shift-right-arithmetic(x, k)"),
                     JustX("s8"));
  ExpectUnchanged(Binary("s32", "0", "shift-left(k, x)"));
}

TEST(AlgebraicSimplifierTest, SameOperandTwice) {
  for (absl::string_view op : {"maximum", "minimum"}) {
    ExpectSimplifiesTo(absl::StrCat(R"(
ENTRY main {
  x = f32[4] parameter(0)
  ROOT r = f32[4] )",
                                    op, "(x, x)\n}"),
                       JustX("f32"));
  }
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = s32[4] parameter(0)
  ROOT r = s32[4] and(x, x)
})",
                     JustX("s32"));
  ExpectUnchanged(R"(
ENTRY main {
  x = s32[4] parameter(0)
  ROOT r = s32[4] xor(x, x)
})");
}

TEST(AlgebraicSimplifierTest, UniformConstantsOnly) {
  // A constant that is 1 in one element only is not the identity.
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[2] parameter(0)
  k = f32[2] constant({1, 2})
  ROOT r = f32[2] multiply(x, k)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2] parameter(0)
  k = f32[2] constant({1, 1})
  ROOT r = f32[2] multiply(x, k)
})",
                     R"(
ENTRY main {
  ROOT x = f32[2] parameter(0)
})");
}

TEST(AlgebraicSimplifierTest, InvolutionsAndSameTypeConvert) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT r = f32[4] negate(n)
})",
                     JustX("f32"));
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = pred[4] parameter(0)
  n = pred[4] not(x)
  ROOT r = pred[4] not(n)
})",
                     JustX("pred"));
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = s32[4] parameter(0)
  ROOT r = s32[4] convert(x)
})",
                     JustX("s32"));
  ExpectUnchanged(R"(
ENTRY main {
  x = s32[4] parameter(0)
  ROOT r = f32[4] convert(x)
})");
  // A copy is asked for explicitly and stays.
  ExpectUnchanged(Identity("f32"));
}

TEST(AlgebraicSimplifierTest, ReshapeChains) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,6] parameter(0)
  a = f32[3,4] reshape(x)
  b = f32[12] reshape(a)
  ROOT c = f32[4,3] reshape(b)
})",
                     R"(
ENTRY main {
  x = f32[2,6] parameter(0)
  ROOT c = f32[4,3] reshape(x)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,6] parameter(0)
  a = f32[12] reshape(x)
  ROOT b = f32[2,6] reshape(a)
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,6] parameter(0)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,6] parameter(0)
  ROOT a = f32[2,6] reshape(x)
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,6] parameter(0)
})");
}

TEST(AlgebraicSimplifierTest, TransposeChains) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,3,4] parameter(0)
  a = f32[3,4,2] transpose(x), dimensions={1,2,0}
  ROOT b = f32[4,2,3] transpose(a), dimensions={1,2,0}
})",
                     R"(
ENTRY main {
  x = f32[2,3,4] parameter(0)
  ROOT b = f32[4,2,3] transpose(x), dimensions={2,0,1}
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,3] parameter(0)
  a = f32[3,2] transpose(x), dimensions={1,0}
  ROOT b = f32[2,3] transpose(a), dimensions={1,0}
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,3] parameter(0)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,3] parameter(0)
  ROOT a = f32[2,3] transpose(x), dimensions={0,1}
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,3] parameter(0)
})");
}

TEST(AlgebraicSimplifierTest, BroadcastChains) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[3] parameter(0)
  a = f32[3,5] broadcast(x), dimensions={0}
  ROOT b = f32[2,5,3] broadcast(a), dimensions={2,1}
})",
                     R"(
ENTRY main {
  x = f32[3] parameter(0)
  ROOT b = f32[2,5,3] broadcast(x), dimensions={2}
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[3] parameter(0)
  ROOT b = f32[3] broadcast(x), dimensions={0}
})",
                     R"(
ENTRY main {
  ROOT x = f32[3] parameter(0)
})");
  // A broadcast that transposes is not the identity.
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[3,3] parameter(0)
  ROOT b = f32[3,3] broadcast(x), dimensions={1,0}
})");
}

TEST(AlgebraicSimplifierTest, NoOpDataMovement) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,3] parameter(0)
  ROOT s = f32[2,3] slice(x), slice={[0:2], [0:3]}
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,3] parameter(0)
})");
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[2,3] parameter(0)
  ROOT s = f32[2,2] slice(x), slice={[0:2], [1:3]}
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,3] parameter(0)
  z = f32[] constant(0)
  ROOT p = f32[2,3] pad(x, z), padding=0_0x0_0
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,3] parameter(0)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[1,3] parameter(0)
  ROOT r = f32[1,3] reverse(x), dimensions={0}
})",
                     R"(
ENTRY main {
  ROOT x = f32[1,3] parameter(0)
})");
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[1,3] parameter(0)
  ROOT r = f32[1,3] reverse(x), dimensions={1}
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[2,3] parameter(0)
  ROOT c = f32[2,3] concatenate(x), dimensions={0}
})",
                     R"(
ENTRY main {
  ROOT x = f32[2,3] parameter(0)
})");
}

TEST(AlgebraicSimplifierTest, SelectAndTuples) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  p = pred[4] parameter(0)
  x = f32[4] parameter(1)
  ROOT s = f32[4] select(p, x, x)
})",
                     R"(
ENTRY main {
  p = pred[4] parameter(0)
  ROOT x = f32[4] parameter(1)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  t = pred[] constant(true)
  ROOT s = f32[4] select(t, x, y)
})",
                     R"(
ENTRY main {
  ROOT x = f32[4] parameter(0)
  y = f32[4] parameter(1)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  f = pred[] constant(false)
  fs = pred[4] broadcast(f), dimensions={}
  ROOT s = f32[4] select(fs, x, y)
})",
                     R"(
ENTRY main {
  x = f32[4] parameter(0)
  ROOT y = f32[4] parameter(1)
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  x = f32[4] parameter(0)
  y = s32[] parameter(1)
  t = (f32[4], s32[]) tuple(x, y)
  ROOT g = s32[] get-tuple-element(t), index=1
})",
                     R"(
ENTRY main {
  x = f32[4] parameter(0)
  ROOT y = s32[] parameter(1)
})");
}

TEST(AlgebraicSimplifierTest, NeverDropsARandomDraw) {
  // Each rewrite below would leave a draw unread, moving it after the
  // others and changing every later draw's values.
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[4] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  u = f32[4] rng(lo, hi), distribution=rng_uniform
  half = f32[] constant(0.5)
  halves = f32[4] broadcast(half), dimensions={}
  p = pred[4] compare(u, halves), direction=LT
  ROOT s = f32[4] select(p, x, x)
})");
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[4] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  u = f32[4] rng(lo, hi), distribution=rng_uniform
  t = (f32[4], f32[4]) tuple(x, u)
  ROOT g = f32[4] get-tuple-element(t), index=0
})");
  ExpectUnchanged(R"(
ENTRY main {
  x = f32[4] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  u = f32[4] rng(lo, hi), distribution=rng_uniform
  f = pred[] constant(false)
  ROOT s = f32[4] select(f, u, x)
})");
}

TEST(AlgebraicSimplifierTest, ElementwiseOpsMoveBeforeBroadcasts) {
  ExpectSimplifiesTo(R"(
ENTRY main {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ba = f32[4,5] broadcast(a), dimensions={}
  bb = f32[4,5] broadcast(b), dimensions={}
  ROOT s = pred[4,5] compare(ba, bb), direction=LT
})",
                     R"(
ENTRY main {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = pred[] compare(a, b), direction=LT
  ROOT bs = pred[4,5] broadcast(s), dimensions={}
})");
  ExpectSimplifiesTo(R"(
ENTRY main {
  a = f32[5] parameter(0)
  ba = f32[4,5] broadcast(a), dimensions={1}
  ROOT c = s32[4,5] convert(ba)
})",
                     R"(
ENTRY main {
  a = f32[5] parameter(0)
  c = s32[5] convert(a)
  ROOT bc = s32[4,5] broadcast(c), dimensions={1}
})");
  // Broadcast along different dimensions: the elements do not line up.
  ExpectUnchanged(R"(
ENTRY main {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  ba = f32[4,4] broadcast(a), dimensions={0}
  bb = f32[4,4] broadcast(b), dimensions={1}
  ROOT s = f32[4,4] add(ba, bb)
})");
  // One operand not broadcast.
  ExpectUnchanged(R"(
ENTRY main {
  a = f32[] parameter(0)
  x = f32[4] parameter(1)
  ba = f32[4] broadcast(a), dimensions={}
  ROOT s = f32[4] add(ba, x)
})");
}

TEST(AlgebraicSimplifierTest, TransposesFoldIntoDot) {
  // dot(transpose(a), b) with a: [k, m] -> contract a's dim 0 directly.
  ExpectSimplifiesTo(R"(
ENTRY main {
  a = f32[7,5] parameter(0)
  b = f32[7,3] parameter(1)
  at = f32[5,7] transpose(a), dimensions={1,0}
  ROOT d = f32[5,3] dot(at, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})",
                     R"(
ENTRY main {
  a = f32[7,5] parameter(0)
  b = f32[7,3] parameter(1)
  ROOT d = f32[5,3] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
})");
  // Both operands, with batch dimensions and operand precision.
  ExpectSimplifiesTo(R"(
ENTRY main {
  a = f32[5,4,7] parameter(0)
  b = f32[3,7,4] parameter(1)
  at = f32[4,5,7] transpose(a), dimensions={1,0,2}
  bt = f32[4,7,3] transpose(b), dimensions={2,1,0}
  ROOT d = f32[4,5,3] dot(at, bt), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, operand_precision={highest,default}
})",
                     R"(
ENTRY main {
  a = f32[5,4,7] parameter(0)
  b = f32[3,7,4] parameter(1)
  ROOT d = f32[4,5,3] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={2}, rhs_contracting_dims={1}, operand_precision={highest,default}
})");
  // The transpose stays when something else reads it.
  ExpectSimplifiesTo(R"(
ENTRY main {
  a = f32[7,5] parameter(0)
  b = f32[7,3] parameter(1)
  at = f32[5,7] transpose(a), dimensions={1,0}
  d = f32[5,3] dot(at, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[5,3], f32[5,7]) tuple(d, at)
})",
                     R"(
ENTRY main {
  a = f32[7,5] parameter(0)
  b = f32[7,3] parameter(1)
  d = f32[5,3] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  at = f32[5,7] transpose(a), dimensions={1,0}
  ROOT t = (f32[5,3], f32[5,7]) tuple(d, at)
})");
}

TEST(AlgebraicSimplifierTest, TransposeThatReordersFreeDimsStays) {
  // The lhs's free dims (m1, m2) come out swapped by the transpose: folding
  // it would transpose the result.
  ExpectUnchanged(R"(
ENTRY main {
  a = f32[3,2,7] parameter(0)
  b = f32[7,4] parameter(1)
  at = f32[2,3,7] transpose(a), dimensions={1,0,2}
  ROOT d = f32[2,3,4] dot(at, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}
})");
}

TEST(AlgebraicSimplifierTest, SimplifiesInsideCalledComputations) {
  auto module = Parse(R"(
HloModule m
f {
  p = f32[] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[] multiply(p, one)
}
ENTRY main {
  x = f32[] parameter(0)
  ROOT k = f32[] call(x), to_apply=f
}
)");
  AlgebraicSimplifier simplifier;
  EXPECT_TRUE(RunPassAndDce(simplifier, *module));
  const ir::Computation* f = module->FindComputation("f");
  EXPECT_EQ(f->root()->opcode(), ir::Opcode::kParameter);
  EXPECT_EQ(f->instruction_count(), 1);
}

}  // namespace
}  // namespace kiln::passes
