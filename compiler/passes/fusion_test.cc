#include "compiler/passes/fusion.h"

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

// Whether the module's entry computation, parsed from `text`, is one loop.
bool EntryIsLoop(absl::string_view text) {
  auto module = Parse(text);
  return module != nullptr && IsLoopFusion(*module->entry());
}

TEST(LoopFusionTest, ChainWithBiasAndScalarBroadcastsBecomesOneCall) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[8,3] parameter(0)
  b = f32[3] parameter(1)
  bb = f32[8,3] broadcast(b), dimensions={1}
  a = f32[8,3] add(x, bb)
  z = f32[] constant(0)
  zb = f32[8,3] broadcast(z), dimensions={}
  ROOT r = f32[8,3] maximum(a, zb)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
fused_computation {
  p0 = f32[8,3] parameter(0)
  p1 = f32[3] parameter(1)
  bb = f32[8,3] broadcast(p1), dimensions={1}
  a = f32[8,3] add(p0, bb)
  p2 = f32[] parameter(2)
  zb = f32[8,3] broadcast(p2), dimensions={}
  ROOT r = f32[8,3] maximum(a, zb)
}
ENTRY main {
  x = f32[8,3] parameter(0)
  b = f32[3] parameter(1)
  z = f32[] constant(0)
  ROOT fusion = f32[8,3] call(x, b, z), to_apply=fused_computation
}
)")) << ir::PrintModule(*module);
  EXPECT_TRUE(IsLoopFusion(*module->FindComputation("fused_computation")));
  // The fused computation is one loop already: a second run changes nothing.
  EXPECT_FALSE(RunPass(fusion, *module));
}

// A value read by more than one loop is written out by the first loop that
// reads it, which computes it too (one pass for both); so is a broadcast
// that a dot needs.
TEST(LoopFusionTest, ValuesReadElsewhereBecomeExtraOutputs) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0)
  y = f32[4,4] parameter(1)
  s = f32[4,4] add(x, y)
  e = f32[4,4] exponential(s)
  l = f32[4,4] log(s)
  n = f32[4,4] negate(l)
  c = f32[4] parameter(2)
  cb = f32[4,4] broadcast(c), dimensions={0}
  d = f32[4,4] dot(cb, e), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  m = f32[4,4] multiply(n, cb)
  ROOT t = (f32[4,4], f32[4,4]) tuple(d, m)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
f1 {
  p0 = f32[4,4] parameter(0)
  p1 = f32[4,4] parameter(1)
  s = f32[4,4] add(p0, p1)
  e = f32[4,4] exponential(s)
  ROOT t = (f32[4,4], f32[4,4]) tuple(s, e)
}
f2 {
  p0 = f32[4] parameter(0)
  cb = f32[4,4] broadcast(p0), dimensions={0}
  p1 = f32[4,4] parameter(1)
  l = f32[4,4] log(p1)
  n = f32[4,4] negate(l)
  m = f32[4,4] multiply(n, cb)
  ROOT t = (f32[4,4], f32[4,4]) tuple(cb, m)
}
ENTRY main {
  c = f32[4] parameter(2)
  x = f32[4,4] parameter(0)
  y = f32[4,4] parameter(1)
  f1 = (f32[4,4], f32[4,4]) call(x, y), to_apply=f1
  s = f32[4,4] get-tuple-element(f1), index=0
  f2 = (f32[4,4], f32[4,4]) call(c, s), to_apply=f2
  cb = f32[4,4] get-tuple-element(f2), index=0
  e = f32[4,4] get-tuple-element(f1), index=1
  d = f32[4,4] dot(cb, e), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  m = f32[4,4] get-tuple-element(f2), index=1
  ROOT t = (f32[4,4], f32[4,4]) tuple(d, m)
}
)")) << ir::PrintModule(*module);
  EXPECT_FALSE(RunPass(fusion, *module));
}

// The momentum update of SGD: the new velocity is an output and is read
// by the weights' update, so one loop writes both.
TEST(LoopFusionTest, MomentumAndWeightsUpdateInOneLoop) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  w = f32[64] parameter(0)
  v = f32[64] parameter(1)
  g = f32[64] parameter(2)
  mu = f32[] constant(0.9)
  mub = f32[64] broadcast(mu), dimensions={}
  mv = f32[64] multiply(v, mub)
  v2 = f32[64] add(mv, g)
  lr = f32[] constant(0.01)
  lrb = f32[64] broadcast(lr), dimensions={}
  step = f32[64] multiply(v2, lrb)
  w2 = f32[64] subtract(w, step)
  ROOT t = (f32[64], f32[64]) tuple(w2, v2)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  int calls = 0;
  for (const auto& instr : module->entry()->instructions()) {
    if (instr->opcode() != ir::Opcode::kCall) continue;
    ++calls;
    EXPECT_TRUE(IsLoopFusion(*instr->called(0)));
    EXPECT_EQ(instr->shape().tuple_shapes().size(), 2u) << ir::PrintModule(*module);
  }
  EXPECT_EQ(calls, 1) << ir::PrintModule(*module);
}

// Two merges that are each safe alone would make two calls read each
// other's results: pb joins ta and then ua, so pa (which ua reads) may not
// join ub, which reads pb.
TEST(LoopFusionTest, MergesThatWouldMakeTwoCallsReadEachOtherAreNotMade) {
  auto module = Parse(R"(
HloModule cycle
ENTRY e {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  pb = f32[8] exponential(y)
  ta = f32[8] sine(pb)
  pa = f32[8] negate(x)
  ub = f32[8] multiply(pb, pa)
  ua = f32[8] add(pa, ta)
  ROOT r = (f32[8], f32[8], f32[8]) tuple(ta, ub, ua)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  EXPECT_FALSE(RunPass(fusion, *module));
}

// A loop body of a loop's form still runs as steps: it is fused like any
// other body.
TEST(LoopFusionTest, BodiesOfALoopsFormAreFusedToo) {
  auto module = Parse(R"(
HloModule m
cond {
  p = f32[4] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(p, z), dimensions={0}, to_apply=add
  ten = f32[] constant(10)
  ROOT lt = pred[] compare(r, ten), direction=LT
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
body {
  p = f32[4] parameter(0)
  m = f32[4] multiply(p, p)
  ROOT s = f32[4] add(m, p)
}
ENTRY main {
  v = f32[4] parameter(0)
  ROOT loop = f32[4] while(v), condition=cond, body=body
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  const ir::Computation* body = module->FindComputation("body");
  ASSERT_NE(body, nullptr);
  EXPECT_EQ(body->root()->opcode(), ir::Opcode::kCall) << ir::PrintModule(*module);
}

TEST(LoopFusionTest, WithoutMultiOutputEachLoopWritesOneResult) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  v = f32[64] parameter(0)
  g = f32[64] parameter(1)
  v2 = f32[64] add(v, g)
  e = f32[64] exponential(v2)
  n = f32[64] negate(e)
  ROOT t = (f32[64], f32[64]) tuple(v2, n)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion(LoopFusionOptions{.multi_output = false});
  EXPECT_TRUE(RunPass(fusion, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
f {
  p0 = f32[64] parameter(0)
  e = f32[64] exponential(p0)
  ROOT n = f32[64] negate(e)
}
ENTRY main {
  v = f32[64] parameter(0)
  g = f32[64] parameter(1)
  v2 = f32[64] add(v, g)
  fusion = f32[64] call(v2), to_apply=f
  ROOT t = (f32[64], f32[64]) tuple(v2, fusion)
}
)")) << ir::PrintModule(*module);
}

// Merging a producer into a consumer that also reads, through another op,
// a value computed from the producer would make the call read its own
// result: such producers stay separate.
TEST(LoopFusionTest, MergesThatWouldFormACycleAreNotMade) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0)
  s = f32[4,4] exponential(x)
  d = f32[4,4] dot(s, s), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[4,4] add(s, d)
  ROOT n = f32[4,4] negate(a)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
f {
  p0 = f32[4,4] parameter(0)
  p1 = f32[4,4] parameter(1)
  a = f32[4,4] add(p0, p1)
  ROOT n = f32[4,4] negate(a)
}
ENTRY main {
  x = f32[4,4] parameter(0)
  s = f32[4,4] exponential(x)
  d = f32[4,4] dot(s, s), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT fusion = f32[4,4] call(s, d), to_apply=f
}
)")) << ir::PrintModule(*module);
}

// A reshape (another shape) and a reduce end groups; the reducer, which
// reduce applies to scalars, is left alone even though its multiply feeds
// only its add.
TEST(LoopFusionTest, OtherOpsEndGroupsAndAppliedComputationsStay) {
  auto module = Parse(R"(
HloModule m
mul_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  p = f32[] multiply(a, b)
  ROOT s = f32[] add(p, a)
}
ENTRY main {
  x = f32[2,6] parameter(0)
  n = f32[2,6] negate(x)
  r = f32[12] reshape(n)
  a = f32[12] abs(r)
  q = f32[12] sqrt(a)
  zero = f32[] constant(0)
  ROOT red = f32[] reduce(q, zero), dimensions={0}, to_apply=mul_add
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
mul_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  p = f32[] multiply(a, b)
  ROOT s = f32[] add(p, a)
}
fused_computation {
  p0 = f32[12] parameter(0)
  a = f32[12] abs(p0)
  ROOT q = f32[12] sqrt(a)
}
ENTRY main {
  x = f32[2,6] parameter(0)
  n = f32[2,6] negate(x)
  r = f32[12] reshape(n)
  fusion = f32[12] call(r), to_apply=fused_computation
  zero = f32[] constant(0)
  ROOT red = f32[] reduce(fusion, zero), dimensions={0}, to_apply=mul_add
}
)")) << ir::PrintModule(*module);
}

// Loop bodies are fused like the entry; a lone elementwise op stays.
TEST(LoopFusionTest, FusesInsideLoopBodies) {
  auto module = Parse(R"(
HloModule m
cond {
  s = (s32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[5] get-tuple-element(s), index=1
  h = f32[] constant(0.5)
  hb = f32[5] broadcast(h), dimensions={}
  m = f32[5] multiply(v, hb)
  w = f32[5] add(m, v)
  ROOT t = (s32[], f32[5]) tuple(j, w)
}
ENTRY main {
  z = s32[] constant(0)
  v = f32[5] parameter(0)
  init = (s32[], f32[5]) tuple(z, v)
  ROOT loop = (s32[], f32[5]) while(init), condition=cond, body=body
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion fusion;
  EXPECT_TRUE(RunPass(fusion, *module));
  const ir::Computation* body = module->FindComputation("body");
  ASSERT_NE(body, nullptr);
  int calls = 0, adds = 0;
  for (const auto& instr : body->instructions()) {
    if (instr->opcode() == ir::Opcode::kCall) {
      ++calls;
      EXPECT_TRUE(IsLoopFusion(*instr->called(0)));
      EXPECT_EQ(instr->called(0)->instruction_count(), 5);  // 2 parameters, 3 ops
    }
    if (instr->opcode() == ir::Opcode::kAdd) ++adds;
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(adds, 1);  // the counter's add: a loop of one, not outlined
  EXPECT_FALSE(RunPass(fusion, *module));
}

TEST(LoopFusionTest, WhatIsOneLoop) {
  EXPECT_TRUE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[4,3] parameter(0)
  lo = f32[] parameter(1)
  b = f32[3] parameter(2)
  bb = f32[4,3] broadcast(b), dimensions={1}
  c = f32[4,3] clamp(lo, x, x)
  ROOT a = f32[4,3] add(c, bb)
}
)"));
  // Several outputs of one loop.
  EXPECT_TRUE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  c = pred[4] compare(n, x), direction=LT
  ROOT t = (f32[4], pred[4]) tuple(n, c)
}
)"));
  // A tuple root that returns a parameter, one value twice, or values of
  // different dimensions.
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT t = (f32[4], f32[4]) tuple(n, x)
}
)"));
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT t = (f32[4], f32[4]) tuple(n, n)
}
)"));
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[2,2] parameter(1)
  n = f32[4] negate(x)
  m = f32[2,2] negate(y)
  ROOT t = (f32[4], f32[2,2]) tuple(n, m)
}
)"));
  // An op that is not elementwise.
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[4,4] parameter(0)
  ROOT d = f32[4,4] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)"));
  // A broadcast of a computed value.
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[3] parameter(0)
  n = f32[3] negate(x)
  ROOT b = f32[4,3] broadcast(n), dimensions={1}
}
)"));
  // A broadcast that transposes as it expands.
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[3,4] parameter(0)
  ROOT b = f32[4,3,2] broadcast(x), dimensions={1,0}
}
)"));
  // Values of different dimensions.
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  x = f32[6] parameter(0)
  n = f32[6] negate(x)
  r = f32[2,3] reshape(n)
  ROOT a = f32[2,3] abs(r)
}
)"));
  // Only a parameter.
  EXPECT_FALSE(EntryIsLoop(R"(
HloModule m
ENTRY e {
  ROOT x = f32[6] parameter(0)
}
)"));
}

}  // namespace
}  // namespace kiln::passes
