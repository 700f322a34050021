#include "compiler/passes/reduction_fusion.h"

#include "absl/strings/str_cat.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

// A module "m" with the f32 reducer `add` before `rest`.
std::string WithAdd(absl::string_view rest) {
  return absl::StrCat(R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)", rest);
}

// Runs loop fusion, then reduction fusion; returns whether the second
// changed the module.
bool FuseLoopsThenReductions(ir::Module& module) {
  LoopFusion loops;
  RunPass(loops, module);
  ReductionFusion reductions;
  return RunPass(reductions, module);
}

// The computations of `module` that are reduction fusions.
int CountReductionFusions(const ir::Module& module) {
  int n = 0;
  for (const auto& c : module.computations()) n += IsReductionFusion(*c) ? 1 : 0;
  return n;
}

TEST(ReductionFusionTest, ALoopReadOnlyByAReduceBecomesOneCall) {
  auto module = Parse(WithAdd(R"(
ENTRY main {
  x = f32[8,3] parameter(0)
  y = f32[8,3] parameter(1)
  m = f32[8,3] multiply(x, y)
  e = f32[8,3] exponential(m)
  zero = f32[] constant(0)
  ROOT r = f32[8] reduce(e, zero), dimensions={1}, to_apply=add
}
)"));
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(FuseLoopsThenReductions(*module));
  EXPECT_EQ(Structure(*module), Structure(WithAdd(R"(
fused_reduction {
  p0 = f32[8,3] parameter(0)
  p1 = f32[8,3] parameter(1)
  m = f32[8,3] multiply(p0, p1)
  e = f32[8,3] exponential(m)
  p2 = f32[] parameter(2)
  ROOT r = f32[8] reduce(e, p2), dimensions={1}, to_apply=add
}
ENTRY main {
  x = f32[8,3] parameter(0)
  y = f32[8,3] parameter(1)
  zero = f32[] constant(0)
  ROOT fusion = f32[8] call(x, y, zero), to_apply=fused_reduction
}
)"))) << ir::PrintModule(*module);
  EXPECT_TRUE(IsReductionFusion(*module->FindComputation("fused_reduction")));
  // A second run changes nothing, and loop fusion leaves the new callee be.
  ReductionFusion again;
  EXPECT_FALSE(RunPass(again, *module));
  LoopFusion loops;
  EXPECT_FALSE(RunPass(loops, *module));
}

// A relu gradient that a weight gradient also reads: the loop writes it and
// sums the bias gradient over the leading dimensions in the same pass.
TEST(ReductionFusionTest, AValueReadElsewhereStaysAResult) {
  auto module = Parse(WithAdd(R"(
ENTRY main {
  pre = f32[16,4] parameter(0)
  g = f32[16,4] parameter(1)
  x = f32[16,5] parameter(2)
  zero = f32[] constant(0)
  zeros = f32[16,4] broadcast(zero), dimensions={}
  on = pred[16,4] compare(pre, zeros), direction=GE
  dg = f32[16,4] select(on, g, zeros)
  dw = f32[5,4] dot(x, dg), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  db = f32[4] reduce(dg, zero), dimensions={0}, to_apply=add
  ROOT out = (f32[5,4], f32[4]) tuple(dw, db)
}
)"));
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(FuseLoopsThenReductions(*module));
  ASSERT_EQ(CountReductionFusions(*module), 1) << ir::PrintModule(*module);
  const ir::Computation* fused = module->FindComputation("fused_reduction");
  ASSERT_NE(fused, nullptr);
  // The loop's value, then the reduce.
  ASSERT_EQ(fused->root()->opcode(), ir::Opcode::kTuple);
  ASSERT_EQ(fused->root()->operand_count(), 2);
  EXPECT_EQ(fused->root()->operand(0)->opcode(), ir::Opcode::kSelect);
  EXPECT_EQ(fused->root()->operand(1)->opcode(), ir::Opcode::kReduce);
  // The dot reads the value from the call; nothing else computes it.
  const ir::Instruction* dw = Find(*module, "dw");
  ASSERT_NE(dw, nullptr);
  ASSERT_EQ(dw->operand(1)->opcode(), ir::Opcode::kGetTupleElement);
  EXPECT_EQ(dw->operand(1)->attrs().tuple_index, 0);
  EXPECT_EQ(dw->operand(1)->operand(0)->called(0), fused);
  for (const auto& instr : module->entry()->instructions()) {
    EXPECT_NE(instr->opcode(), ir::Opcode::kSelect);
    EXPECT_NE(instr->opcode(), ir::Opcode::kReduce);
  }
}

// An element of a loop with several results: the new call writes the
// results read elsewhere, and the reduced one only if it is read elsewhere.
TEST(ReductionFusionTest, AnElementOfAMultiOutputLoopKeepsTheOthers) {
  auto module = Parse(R"(
HloModule m
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
ENTRY main {
  x = f32[6,10] parameter(0)
  b = f32[10] parameter(1)
  bb = f32[6,10] broadcast(b), dimensions={1}
  pre = f32[6,10] add(x, bb)
  zero = f32[] constant(0)
  zeros = f32[6,10] broadcast(zero), dimensions={}
  act = f32[6,10] maximum(pre, zeros)
  w = f32[10,3] parameter(2)
  y = f32[6,3] dot(act, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  low = f32[] constant(-inf)
  top = f32[6] reduce(pre, low), dimensions={1}, to_apply=max
  ROOT out = (f32[6,3], f32[6]) tuple(y, top)
}
)");
  ASSERT_NE(module, nullptr);
  LoopFusion loops;
  ASSERT_TRUE(RunPass(loops, *module));
  ReductionFusion reductions;
  EXPECT_TRUE(RunPassAndDce(reductions, *module));
  const ir::Computation* fused = module->FindComputation("fused_reduction");
  ASSERT_NE(fused, nullptr) << ir::PrintModule(*module);
  EXPECT_TRUE(IsReductionFusion(*fused));
  // pre is read by the reduce alone once act is computed beside it.
  ASSERT_EQ(fused->root()->operand_count(), 2) << ir::PrintModule(*module);
  EXPECT_EQ(fused->root()->operand(0)->opcode(), ir::Opcode::kMaximum);
  const ir::Instruction* y = Find(*module, "y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->operand(0)->operand(0)->called(0), fused);
  // Nothing calls the loop the reduce joined any more.
  for (const auto& instr : module->entry()->instructions()) {
    for (const ir::Computation* callee : instr->called()) {
      EXPECT_FALSE(IsLoopFusion(*callee)) << instr->name();
    }
  }
}

TEST(ReductionFusionTest, LeavesWhatItCannotRunInOrder) {
  const std::string cases[] = {
      // The middle dimension: elements of one result are not met in order.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5,6] parameter(0)
  e = f32[4,5,6] exponential(x)
  zero = f32[] constant(0)
  ROOT r = f32[4,6] reduce(e, zero), dimensions={1}, to_apply=add
}
)"),
      // A reducer that is not one commutative op.
      R"(
HloModule m
sub {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] subtract(a, b)
}
ENTRY main {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(e, zero), dimensions={1}, to_apply=sub
}
)",
      // An initial value computed from the loop.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  first = f32[1,1] slice(e), slice={[0:1], [0:1]}
  init = f32[] reshape(first)
  ROOT r = f32[4] reduce(e, init), dimensions={1}, to_apply=add
}
)"),
      // A reduce of a parameter: no loop to join.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(x, zero), dimensions={1}, to_apply=add
}
)"),
  };
  for (const std::string& text : cases) {
    auto module = Parse(text);
    ASSERT_NE(module, nullptr);
    EXPECT_FALSE(FuseLoopsThenReductions(*module)) << ir::PrintModule(*module);
    EXPECT_EQ(CountReductionFusions(*module), 0);
  }
}

// Two reduces of one loop (a softmax's max and sum of the same logits):
// the first joins it, the second reads the value the call writes.
TEST(ReductionFusionTest, ALoopFeedsOneReduce) {
  auto module = Parse(WithAdd(R"(
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
ENTRY main {
  x = f32[8,10] parameter(0)
  b = f32[10] parameter(1)
  bb = f32[8,10] broadcast(b), dimensions={1}
  logits = f32[8,10] add(x, bb)
  low = f32[] constant(-inf)
  top = f32[8] reduce(logits, low), dimensions={1}, to_apply=max
  zero = f32[] constant(0)
  sum = f32[8] reduce(logits, zero), dimensions={1}, to_apply=add
  ROOT out = (f32[8], f32[8]) tuple(top, sum)
}
)"));
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(FuseLoopsThenReductions(*module));
  EXPECT_EQ(CountReductionFusions(*module), 1) << ir::PrintModule(*module);
  const ir::Instruction* sum = Find(*module, "sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->operand(0)->opcode(), ir::Opcode::kGetTupleElement);
}

TEST(ReductionFusionTest, TheFormIsCheckedWhole) {
  const std::string not_fusions[] = {
      // The reduce is read inside the computation.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  zero = f32[] parameter(1)
  r = f32[4] reduce(e, zero), dimensions={1}, to_apply=add
  n = f32[4] negate(r)
  ROOT t = (f32[4,5], f32[4]) tuple(e, n)
}
)"),
      // An output of other dimensions than the reduced value.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  y = f32[5,4] parameter(2)
  e = f32[4,5] exponential(x)
  f = f32[5,4] exponential(y)
  zero = f32[] parameter(1)
  r = f32[4] reduce(e, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[5,4], f32[4]) tuple(f, r)
}
)"),
      // The initial value is not a parameter.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(e, zero), dimensions={1}, to_apply=add
}
)"),
      // A parameter reduced directly.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  zero = f32[] parameter(1)
  ROOT r = f32[4] reduce(x, zero), dimensions={1}, to_apply=add
}
)"),
      // A tuple of the reduce alone.
      WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  zero = f32[] parameter(1)
  r = f32[4] reduce(e, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[4]) tuple(r)
}
)"),
  };
  for (const std::string& text : not_fusions) {
    auto module = Parse(text);
    ASSERT_NE(module, nullptr);
    EXPECT_FALSE(IsReductionFusion(*module->entry())) << text;
  }
  auto fusion = Parse(WithAdd(R"(
ENTRY main {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  zero = f32[] parameter(1)
  r = f32[5] reduce(e, zero), dimensions={0}, to_apply=add
  ROOT t = (f32[4,5], f32[5]) tuple(e, r)
}
)"));
  ASSERT_NE(fusion, nullptr);
  EXPECT_TRUE(IsReductionFusion(*fusion->entry()));
}

}  // namespace
}  // namespace kiln::passes
