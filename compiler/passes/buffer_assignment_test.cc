#include "compiler/passes/buffer_assignment.h"

#include <string>
#include <vector>

#include "compiler/passes/fusion.h"
#include "compiler/passes/reduction_fusion.h"
#include "compiler/passes/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

int IndexOf(const ir::Computation& c, const std::string& name) {
  for (const auto& instr : c.instructions()) {
    if (instr->name() == name) return instr->index();
  }
  ADD_FAILURE() << "no " << name;
  return -1;
}

// Each value is released by its last reader; the root never is; a result
// may take the buffer of an operand of its shape read there for the last
// time, parameters included (when donated), but not a scalar, an operand of
// another shape or one read again later.
TEST(BufferAssignmentTest, ValuesAreReleasedByTheirLastReaderAndTakenInPlace) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  s = f32[] parameter(2)
  x = f32[8] add(a, b)
  sb = f32[8] broadcast(s), dimensions={}
  y = f32[8] multiply(x, sb)
  z = f32[8] subtract(y, b)
  ROOT t = (f32[8], f32[8]) tuple(z, x)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& c = *module->entry();
  const BufferAssignment a = AssignBuffers(c);
  const int pa = IndexOf(c, "a"), pb = IndexOf(c, "b"), ps = IndexOf(c, "s");
  const int x = IndexOf(c, "x"), sb = IndexOf(c, "sb"), y = IndexOf(c, "y"),
            z = IndexOf(c, "z"), t = IndexOf(c, "t");
  EXPECT_THAT(a.released_by[x], ElementsAre(pa));
  EXPECT_THAT(a.released_by[sb], ElementsAre(ps));
  EXPECT_THAT(a.released_by[y], ElementsAre(sb));
  EXPECT_THAT(a.released_by[z], ElementsAre(pb, y));
  EXPECT_THAT(a.released_by[t], ElementsAre(x, z));
  // x may take a (b is read again by z); y may take the broadcast (same
  // shape, last read there) but not x (read again by the tuple); z may
  // take y or b.
  ASSERT_EQ(a.in_place[x].size(), 1u);
  EXPECT_THAT(a.in_place[x][0], ElementsAre(0));
  ASSERT_EQ(a.in_place[y].size(), 1u);
  EXPECT_THAT(a.in_place[y][0], ElementsAre(1));
  ASSERT_EQ(a.in_place[z].size(), 1u);
  EXPECT_THAT(a.in_place[z][0], ElementsAre(0, 1));
  // The broadcast of a scalar takes nothing of it; the tuple is no loop.
  ASSERT_EQ(a.in_place[sb].size(), 1u);
  EXPECT_THAT(a.in_place[sb][0], IsEmpty());
  EXPECT_THAT(a.in_place[t], IsEmpty());
  // Output 1 (x) takes parameter a when the caller donates it; output 0
  // (z) takes y's buffer, its first candidate, not b's.
  EXPECT_THAT(a.donation_aliases, ElementsAre(BufferAssignment::Alias{1, 0}));
}

// A loop fusion's call: an output may take a parameter's buffer only where
// no node after the output's reads that parameter, and a value passed twice
// is taken by none.
TEST(BufferAssignmentTest, ALoopsOutputsTakeOnlyInputsNoLaterNodeReads) {
  auto module = Parse(R"(
HloModule m
loop {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  first = f32[8] add(p0, p1)
  second = f32[8] multiply(first, p1)
  ROOT t = (f32[8], f32[8]) tuple(first, second)
}
twice {
  q0 = f32[8] parameter(0)
  q1 = f32[8] parameter(1)
  ROOT r = f32[8] add(q0, q1)
}
ENTRY main {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  f = (f32[8], f32[8]) call(a, b), to_apply=loop
  g0 = f32[8] get-tuple-element(f), index=0
  g1 = f32[8] get-tuple-element(f), index=1
  d = f32[8] call(g1, g1), to_apply=twice
  ROOT o = (f32[8], f32[8]) tuple(g0, d)
}
)");
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(IsLoopFusion(*module->FindComputation("loop")));
  ASSERT_TRUE(IsLoopFusion(*module->FindComputation("twice")));
  const ir::Computation& c = *module->entry();
  const BufferAssignment a = AssignBuffers(c);
  const int f = IndexOf(c, "f"), d = IndexOf(c, "d");
  // `first` may take a (p0, last read by first) but not b (p1, read by
  // `second` after it); `second` may take either.
  ASSERT_EQ(a.in_place[f].size(), 2u);
  EXPECT_THAT(a.in_place[f][0], ElementsAre(0));
  EXPECT_THAT(a.in_place[f][1], ElementsAre(0, 1));
  ASSERT_EQ(a.in_place[d].size(), 1u);
  EXPECT_THAT(a.in_place[d][0], IsEmpty());
  // Output 0 (first) takes parameter 0 when donated; `second` would take
  // parameter 1 (0 is first's), but it is no output.
  EXPECT_THAT(a.donation_aliases, ElementsAre(BufferAssignment::Alias{0, 0}));
  EXPECT_NE(a.Summary().find("output 0 may take parameter 0 when donated"), std::string::npos)
      << a.Summary();
}

// Two outputs of one loop with the same candidates take different
// parameters, as SGD's velocity and weights do.
TEST(BufferAssignmentTest, TwoOutputsOfALoopAliasDifferentParameters) {
  auto module = Parse(R"(
HloModule m
sgd {
  v = f32[8] parameter(0)
  w = f32[8] parameter(1)
  g = f32[8] parameter(2)
  v2 = f32[8] add(v, g)
  w2 = f32[8] subtract(w, v2)
  ROOT t = (f32[8], f32[8]) tuple(v2, w2)
}
ENTRY main {
  v = f32[8] parameter(0)
  w = f32[8] parameter(1)
  g = f32[8] parameter(2)
  f = (f32[8], f32[8]) call(v, w, g), to_apply=sgd
  v2 = f32[8] get-tuple-element(f), index=0
  w2 = f32[8] get-tuple-element(f), index=1
  ROOT o = (f32[8], f32[8]) tuple(w2, v2)
}
)");
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(IsLoopFusion(*module->FindComputation("sgd")));
  const BufferAssignment a = AssignBuffers(*module->entry());
  const int f = IndexOf(*module->entry(), "f");
  ASSERT_EQ(a.in_place[f].size(), 2u);
  EXPECT_THAT(a.in_place[f][0], ElementsAre(0, 2));
  EXPECT_THAT(a.in_place[f][1], ElementsAre(0, 1, 2));
  EXPECT_THAT(a.donation_aliases,
              ElementsAre(BufferAssignment::Alias{0, 1}, BufferAssignment::Alias{1, 0}));
}

// The root is never released, nor taken in place by an instruction that
// reads it after it is computed.
TEST(BufferAssignmentTest, TheRootIsNeitherReleasedNorTaken) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[8] parameter(0)
  ROOT x = f32[8] negate(a)
  y = f32[8] exponential(x)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& c = *module->entry();
  const BufferAssignment a = AssignBuffers(c);
  const int x = IndexOf(c, "x"), y = IndexOf(c, "y");
  EXPECT_THAT(a.released_by[y], IsEmpty());
  ASSERT_EQ(a.in_place[y].size(), 1u);
  EXPECT_THAT(a.in_place[y][0], IsEmpty());
  ASSERT_EQ(a.in_place[x].size(), 1u);
  EXPECT_THAT(a.in_place[x][0], ElementsAre(0));
}

// A reduction fusion's loop results take candidates as a loop fusion's
// outputs do; the reduce's result takes none.
TEST(BufferAssignmentTest, AReductionFusionsLoopResultsTakeInputsInPlace) {
  auto module = Parse(R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused_reduction {
  p0 = f32[8,3] parameter(0)
  p1 = f32[8,3] parameter(1)
  m = f32[8,3] multiply(p0, p1)
  p2 = f32[] parameter(2)
  r = f32[8] reduce(m, p2), dimensions={1}, to_apply=add
  ROOT t = (f32[8,3], f32[8]) tuple(m, r)
}
ENTRY main {
  x = f32[8,3] parameter(0)
  y = f32[8,3] parameter(1)
  zero = f32[] constant(0)
  f = (f32[8,3], f32[8]) call(x, y, zero), to_apply=fused_reduction
  g0 = f32[8,3] get-tuple-element(f), index=0
  g1 = f32[8] get-tuple-element(f), index=1
  ROOT o = (f32[8], f32[8,3]) tuple(g1, g0)
}
)");
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(IsReductionFusion(*module->FindComputation("fused_reduction")));
  const BufferAssignment a = AssignBuffers(*module->entry());
  const int f = IndexOf(*module->entry(), "f");
  ASSERT_EQ(a.in_place[f].size(), 1u);
  EXPECT_THAT(a.in_place[f][0], ElementsAre(0, 1));
  // Output 1 (the loop's result) takes parameter 0 when donated; output 0
  // (the reduce's) takes nothing.
  EXPECT_THAT(a.donation_aliases, ElementsAre(BufferAssignment::Alias{1, 0}));
}

// The arena's arrays: each array written fresh takes a slice that lives
// until its value's last reader; the output takes none.
TEST(BufferAssignmentTest, SlicesAreReusedOnceTheirValueIsDead) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0)
  a = f32[4,4] transpose(x), dimensions={1,0}
  b = f32[4,4] transpose(a), dimensions={1,0}
  c = f32[4,4] transpose(b), dimensions={1,0}
  ROOT d = f32[4,4] transpose(c), dimensions={1,0}
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& c = *module->entry();
  const BufferAssignment a = AssignBuffers(c);
  ASSERT_EQ(a.slices.size(), 3u) << a.Summary();
  const int ia = IndexOf(c, "a"), ib = IndexOf(c, "b"), ic = IndexOf(c, "c");
  EXPECT_EQ(a.slices[0].instruction, ia);
  EXPECT_EQ(a.slices[1].instruction, ib);
  EXPECT_EQ(a.slices[2].instruction, ic);
  EXPECT_EQ(a.slices[0].live_until, ib);
  EXPECT_EQ(a.slices[1].live_until, ic);
  EXPECT_EQ(a.slices[2].live_until, IndexOf(c, "d"));
  EXPECT_EQ(a.slices[0].bytes, 64);
  EXPECT_EQ(a.slices[0].result, -1);
  EXPECT_NE(a.Summary().find("3 arrays (192 bytes) for an arena"), std::string::npos)
      << a.Summary();
}

// A value lives on in whatever may hold its buffer: a reshape of it, a
// tuple, a result computed in its place. Held by an output, it takes no
// slice; held by a value that dies, its slice lives as long.
TEST(BufferAssignmentTest, AValueLivesAsLongAsWhatMayHoldIt) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0)
  t = f32[4,4] transpose(x), dimensions={1,0}
  r = f32[16] reshape(t)
  u = f32[4,4] transpose(x), dimensions={1,0}
  e = f32[4,4] exponential(u)
  s = f32[4,4] transpose(x), dimensions={1,0}
  tu = (f32[4,4]) tuple(s)
  g = f32[4,4] get-tuple-element(tu), index=0
  n = f32[4,4] negate(e)
  m = f32[4,4] dot(n, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = (f32[16], f32[4,4]) tuple(r, m)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& c = *module->entry();
  const BufferAssignment a = AssignBuffers(c);
  auto slice_of = [&](const std::string& name) -> const BufferAssignment::Slice* {
    for (const BufferAssignment::Slice& s : a.slices) {
      if (s.instruction == IndexOf(c, name)) return &s;
    }
    return nullptr;
  };
  // t: the output r is its reshape. e may be computed in u's place and n
  // in e's, so u lives until n's last reader (the dot); e and n, computed
  // in place, take none.
  EXPECT_EQ(slice_of("t"), nullptr);
  EXPECT_EQ(slice_of("e"), nullptr);
  EXPECT_EQ(slice_of("n"), nullptr);
  ASSERT_NE(slice_of("u"), nullptr);
  EXPECT_EQ(slice_of("u")->live_until, IndexOf(c, "m"));
  // s lives in the tuple and its element until the dot reads g.
  ASSERT_NE(slice_of("s"), nullptr);
  EXPECT_EQ(slice_of("s")->live_until, IndexOf(c, "m"));
  // m is an output.
  EXPECT_EQ(slice_of("m"), nullptr);
}

// The elements of a multi-output loop live apart: a value computed in the
// place of element 0 lives as long as element 0, however long element 1
// does (here, to the output).
TEST(BufferAssignmentTest, ATuplesElementsLiveApart) {
  auto module = Parse(R"(
HloModule m
loop {
  p0 = f32[8] parameter(0)
  p1 = s32[8] parameter(1)
  e0 = f32[8] negate(p0)
  e1 = s32[8] negate(p1)
  ROOT t = (f32[8], s32[8]) tuple(e0, e1)
}
ENTRY main {
  x = f32[8] parameter(0)
  y = s32[8] parameter(1)
  a = f32[8] reverse(x), dimensions={0}
  b = s32[8] reverse(y), dimensions={0}
  f = (f32[8], s32[8]) call(a, b), to_apply=loop
  g0 = f32[8] get-tuple-element(f), index=0
  g1 = s32[8] get-tuple-element(f), index=1
  r = f32[8] reverse(g0), dimensions={0}
  ROOT o = (f32[8], s32[8]) tuple(r, g1)
}
)");
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(IsLoopFusion(*module->FindComputation("loop")));
  const ir::Computation& c = *module->entry();
  const BufferAssignment a = AssignBuffers(c);
  // a may be computed in place by element 0, which lives while the tuple
  // does (to its last reader, g1) and r reads last; b by element 1, an
  // output. Neither element takes a slice of its own (each may be computed
  // in place).
  ASSERT_EQ(a.slices.size(), 1u) << a.Summary();
  EXPECT_EQ(a.slices[0].instruction, IndexOf(c, "a"));
  EXPECT_EQ(a.slices[0].live_until,
            std::max(IndexOf(c, "r"), IndexOf(c, "g1")));
}

}  // namespace
}  // namespace kiln::passes
