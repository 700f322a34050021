// What XLA and JAX dumps hold beyond the core syntax: each construct parses
// to the ops Kiln spells it with (values are checked against NumPy by the
// corpus module tests/data/hlo/xla_syntax.hlo), prints back to a fixed
// point, and what Kiln cannot read is an error naming it and its line.
#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_lowering.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;

// Parses, verifies, and checks that printing and parsing again prints the
// same; returns the printed module.
std::string Canonical(absl::string_view text) {
  auto m = ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return "";
  EXPECT_TRUE(Verify(**m).ok()) << Verify(**m);
  const std::string once = PrintModule(**m);
  auto again = ParseModule(once);
  EXPECT_TRUE(again.ok()) << again.status() << "\n" << once;
  if (again.ok()) {
    EXPECT_EQ(PrintModule(**again), once);
  }
  return once;
}

// The verifier's complaint about `text`, which parses.
std::string verify_error(absl::string_view text) {
  auto m = ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::string(Verify(**m).message()) : "";
}

std::string ErrorOf(absl::string_view text) {
  auto m = ParseModule(text);
  EXPECT_FALSE(m.ok()) << text;
  return m.ok() ? "" : std::string(m.status().message());
}

TEST(XlaSyntaxTest, AFusionIsACallOfItsComputation) {
  const std::string printed = Canonical(R"(
fused {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kInput, calls=fused
})");
  EXPECT_THAT(printed, HasSubstr("%f = f32[4] call(%x), to_apply=%fused"));
  EXPECT_THAT(ErrorOf(R"(
fused {
  ROOT p = f32[4] parameter(0)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kSideways, calls=fused
})"), HasSubstr("line 7: unknown fusion kind 'kSideways'"));
}

TEST(XlaSyntaxTest, ResultShapesLeftOutAreInferred) {
  const std::string printed = Canonical(R"(
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[2,3] parameter(1)
  s = add(a, b)
  c = compare(s, a), direction=GT
  ROOT t = tuple(s, c)
})");
  EXPECT_THAT(printed, HasSubstr("%s = f32[2,3] add(%a, %b)"));
  EXPECT_THAT(printed, HasSubstr("%c = pred[2,3] compare(%s, %a), direction=GT"));
  EXPECT_THAT(printed, HasSubstr("ROOT %t = (f32[2,3], pred[2,3]) tuple(%s, %c)"));
  // Where the operands do not decide the result, the text must.
  EXPECT_THAT(ErrorOf("ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = broadcast(a), "
                      "dimensions={0}\n}"),
              HasSubstr("line 3: %b: the result shape of broadcast does not follow from its "
                        "operands; write it"));
}

TEST(XlaSyntaxTest, OperandsWrittenInlineBecomeInstructions) {
  const std::string printed = Canonical(R"(
ENTRY e {
  ROOT n = f32[3] negate(f32[3] exponential(f32[3] parameter(0)))
})");
  EXPECT_THAT(printed, HasSubstr("%n.operand0.operand0 = f32[3] parameter(0)"));
  EXPECT_THAT(printed, HasSubstr("%n.operand0 = f32[3] exponential(%n.operand0.operand0)"));
  // Nesting is bounded, not a stack overflow.
  std::string deep = "ENTRY e {\n  ROOT n = ";
  for (int i = 0; i < 200; ++i) deep += "negate(";
  deep += "f32[] parameter(0)";
  for (int i = 0; i < 200; ++i) deep += ")";
  deep += "\n}";
  EXPECT_THAT(ErrorOf(deep), HasSubstr("operands written inline more than 64 deep"));
}

TEST(XlaSyntaxTest, StackFrameTablesAfterTheHeaderAreSkipped) {
  Canonical(R"(HloModule m

FileNames
1 "a.py"
2 "b.py"
FunctionNames
1 "f"
FileLocations
1 {file_name_id=1 function_name_id=1 line=1 end_line=1 column=1 end_column=2}
StackFrames
1 {file_location_id=1 parent_frame_id=0}
2 {file_location_id=1 parent_frame_id=1}

ENTRY e {
  ROOT p = f32[] parameter(0), metadata={op_name="p" stack_frame_id=2}
})");
}

TEST(XlaSyntaxTest, ABitcastIsAReshapeUnderDefaultLayouts) {
  const std::string printed = Canonical(R"(
ENTRY e {
  p = f32[2,6]{1,0} parameter(0)
  ROOT b = f32[3,4]{1,0} bitcast(p)
})");
  EXPECT_THAT(printed, HasSubstr("ROOT %b = f32[3,4] reshape(%p)"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT b = s16[8] bitcast(p)\n}"),
              HasSubstr("line 3: bitcast %b from f32[4] to s16[8] changes the element width"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT b = f32[5] bitcast(p)\n}"),
              HasSubstr("changes the element count"));
}

// XLA's optimized sorts read f32 keys as s32 through a bitcast: the same
// width, another type, is a reshape (or transposes) then a bitcast-convert.
TEST(XlaSyntaxTest, ABitcastToAnotherTypeOfTheSameWidthReadsTheBits) {
  const std::string printed = Canonical(R"(
ENTRY e {
  p = f32[2,3]{1,0} parameter(0)
  ROOT b = s32[6]{0} bitcast(p)
})");
  EXPECT_THAT(printed, HasSubstr("%b.moved = f32[6] reshape(%p)"));
  EXPECT_THAT(printed, HasSubstr("ROOT %b = s32[6] bitcast-convert(%b.moved)"));
  const std::string scalar = Canonical(R"(
ENTRY e {
  p = f32[] parameter(0)
  ROOT b = u32[] bitcast(p)
})");
  EXPECT_THAT(scalar, HasSubstr("ROOT %b = u32[] bitcast-convert(%b.moved)"));
  // Transposed layouts move the values first, in f32.
  const std::string laid = Canonical(R"(
ENTRY e {
  p = f32[2,3]{0,1} parameter(0)
  ROOT b = s32[2,3]{0,1} bitcast(p)
})");
  EXPECT_THAT(laid, HasSubstr("ROOT %b = s32[2,3] bitcast-convert(%b.moved)"));
}

// A bitcast moves memory, not logical positions: with other layouts it is
// a transpose to memory order, a reshape and a transpose back.
TEST(XlaSyntaxTest, ABitcastFollowsTheLayouts) {
  auto steps = PlanBitcast(Shape(ElementType::kF32, {2, 3}), {0, 1},
                           Shape(ElementType::kF32, {3, 2}), {1, 0});
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->to_physical, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(steps->physical_dims, (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(steps->from_physical.empty());
  steps = PlanBitcast(Shape(ElementType::kF32, {6}), {}, Shape(ElementType::kF32, {2, 3}),
                      {0, 1});
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(steps->to_physical.empty());
  EXPECT_EQ(steps->physical_dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(steps->from_physical, (std::vector<int64_t>{1, 0}));
  EXPECT_THAT(PlanBitcast(Shape(ElementType::kF32, {6}), {}, Shape(ElementType::kF32, {2, 3}),
                          {0, 0})
                  .status()
                  .message(),
              HasSubstr("layout {0,0} is not a permutation"));
}

TEST(XlaSyntaxTest, AMapCallsItsComputationAppliedToArrays) {
  const std::string printed = Canonical(R"(
clamp01 {
  x = f32[] parameter(0)
  zero = f32[] constant(0)
  one = f32[] constant(1)
  ROOT c = f32[] clamp(zero, x, one)
}
ENTRY e {
  p = f32[5] parameter(0)
  ROOT m = f32[5] map(p), dimensions={0}, to_apply=clamp01
})");
  EXPECT_THAT(printed, HasSubstr("ROOT %m = f32[5] call(%p), to_apply=%clamp01.map.5"));
  EXPECT_THAT(printed, HasSubstr("%zero = f32[5] broadcast(%zero.scalar), dimensions={}"));
  EXPECT_THAT(printed, HasSubstr("ROOT %c = f32[5] clamp(%zero, %x, %one)"));
}

TEST(XlaSyntaxTest, AMapOfWhatIsNotElementwiseIsRefused) {
  EXPECT_THAT(ErrorOf(R"(
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
odd {
  x = f32[] parameter(0)
  z = f32[] constant(0)
  v = f32[2] broadcast(x), dimensions={}
  ROOT r = f32[] reduce(v, z), dimensions={0}, to_apply=sum
}
ENTRY e {
  p = f32[3] parameter(0)
  ROOT m = f32[3] map(p), dimensions={0}, to_apply=odd
})"), HasSubstr("line 15: map's computation odd cannot be applied elementwise: %v has shape "
                "f32[2], not a scalar"));
  EXPECT_THAT(ErrorOf(R"(
self {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x), to_apply=self
}
ENTRY e {
  p = f32[3] parameter(0)
  ROOT m = f32[3] map(p), dimensions={0}, to_apply=self
})"), HasSubstr("call each other more than 64 deep"));
  EXPECT_THAT(ErrorOf(R"(
neg {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}
ENTRY e {
  p = f32[3,2] parameter(0)
  ROOT m = f32[3,2] map(p), dimensions={1}, to_apply=neg
})"), HasSubstr("map's dimensions must be every dimension of its result"));
}

TEST(XlaSyntaxTest, AReversedKernelIsAReverseOfTheKernel) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[1,4,4,1] parameter(0)
  k = f32[2,3,1,1] parameter(1)
  ROOT c = f32[1,3,2,1] convolution(x, k), window={size=2x3 rhs_reversal=0x1}, dim_labels=b01f_01io->b01f
})");
  EXPECT_THAT(printed, HasSubstr("%c.reversed_kernel = f32[2,3,1,1] reverse(%k), dimensions={1}"));
  EXPECT_THAT(printed, HasSubstr("convolution(%x, %c.reversed_kernel)"));
  EXPECT_THAT(ErrorOf(R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce-window(x, z), window={size=2 rhs_reversal=1}, to_apply=add
})"), HasSubstr("line 10: rhs_reversal applies to a convolution's kernel only"));
}

// Values are checked by the corpus module xla_syntax_batching; here, the
// lowering and its refusals.
TEST(XlaSyntaxTest, BatchingDimensionsBecomeIndexComponents) {
  const std::string printed = Canonical(R"(
ENTRY e {
  t = f32[2,5,3] parameter(0)
  i = s32[2,4] parameter(1)
  ROOT g = f32[2,4,3] gather(t, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,3}
})");
  EXPECT_THAT(printed, HasSubstr("%g.indices.vectors = s32[2,4,1] reshape(%i)"));
  EXPECT_THAT(printed, HasSubstr("%g.indices.batch0 = s32[2,4,1] iota(), iota_dimension=0"));
  EXPECT_THAT(printed, HasSubstr("collapsed_slice_dims={0,1}, start_index_map={1,0}"));
  EXPECT_THAT(ErrorOf(R"(
ENTRY e {
  t = f32[2,5,3] parameter(0)
  i = s32[3,4] parameter(1)
  ROOT g = f32[3,4,3] gather(t, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,3}
})"), HasSubstr("line 5: %g: operand batching dimension 0 has 2 elements but indices batching "
                "dimension 0 has 3"));
}

TEST(XlaSyntaxTest, AnOptimizationBarrierPassesItsOperandThrough) {
  const std::string printed = Canonical(R"(
ENTRY e {
  a = f32[2] parameter(0)
  b = s32[] parameter(1)
  t = (f32[2], s32[]) tuple(a, b)
  o = (f32[2], s32[]) opt-barrier(t)
  ROOT x = f32[2] opt-barrier(a)
})");
  EXPECT_THAT(printed, HasSubstr("%o.0 = f32[2] get-tuple-element(%t), index=0"));
  EXPECT_THAT(printed, HasSubstr("ROOT %x = f32[2] copy(%a)"));
}

// A computation attached to an op that calls none was kept by the parser,
// dropped by the printer, and so moved the computation in the printed
// order (hlo_text_fuzzer found it). An attribute on an op that does not
// read it is refused where it is written; a module built otherwise (from
// its wire form) is refused by the verifier.
TEST(XlaSyntaxTest, AnAttributeOnAnOpThatDoesNotReadItIsRefused) {
  EXPECT_THAT(ErrorOf(R"(
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[2,8] parameter(0)
  ROOT s = f32[2,8] sqrt(x), to_apply=lt
})"),
              HasSubstr("line 9: attribute 'to_apply' does not apply to sqrt"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2,8] parameter(0)\n  ROOT s = f32[2,8] sqrt(x), "
                      "dimensions={1}\n}"),
              HasSubstr("line 3: attribute 'dimensions' does not apply to sqrt"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2,8] parameter(0)\n  ROOT s = f32[2,8] "
                      "bitcast(x), slice={[0:2]}\n}"),
              HasSubstr("line 3: attribute 'slice' does not apply to bitcast"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT d = f32[2] "
                      "opt-barrier(x), index=0\n}"),
              HasSubstr("line 3: attribute 'index' does not apply to opt-barrier"));
  Module m("m");
  Computation* lt = m.AddComputation(std::make_unique<Computation>("lt"));
  Instruction* a = lt->AddInstruction(std::make_unique<Instruction>(
      Opcode::kParameter, Shape::Scalar(ElementType::kF32), "a"));
  lt->set_root(a);
  Computation* e = m.AddComputation(std::make_unique<Computation>("e"));
  Instruction* x = e->AddInstruction(std::make_unique<Instruction>(
      Opcode::kParameter, Shape(ElementType::kF32, {2}), "x"));
  Instruction* sqrt = e->AddInstruction(
      std::make_unique<Instruction>(Opcode::kSqrt, Shape(ElementType::kF32, {2}), "s"));
  sqrt->AddOperand(x);
  sqrt->AddCalled(lt);
  e->set_root(sqrt);
  m.set_entry(e);
  EXPECT_THAT(Verify(m).message(), HasSubstr("sqrt calls no computation, got 1"));
}

TEST(XlaSyntaxTest, ElidedConstantsAreNamed) {
  EXPECT_THAT(ErrorOf("HloModule m, alias_passthrough_params=true\n\nENTRY e {\n  ROOT c = "
                      "f32[2,3]{1,0} constant({...}), metadata={op_type=\"Const\"}\n}"),
              HasSubstr("line 4: the values of this f32[2,3] constant are elided ({...})"));
}

TEST(XlaSyntaxTest, AttributesThatChangeNothingAreAcceptedOthersNamed) {
  Canonical(R"(
tanh_impl {
  x = f32[2] parameter(0)
  ROOT t = f32[2] tanh(x)
}
ENTRY e {
  p = f32[2] parameter(0), parameter_replication={false}
  ROOT c = f32[2] call(p), to_apply=tanh_impl, is_composite=true, frontend_attributes={composite.name="my.tanh",composite.version="1"}
})");
  EXPECT_THAT(ErrorOf("ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p), "
                      "novel_attribute=3\n}"),
              HasSubstr("line 3: unsupported attribute 'novel_attribute' on negate"));
}

TEST(XlaSyntaxTest, AsynchronousPairsAreTheOpAndItsValue) {
  const std::string printed = Canonical(R"(
sum {
  p = f32[4,3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce(p, z), dimensions={0}, to_apply=add
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4,3] parameter(0)
  ags = (f32[4,3], f32[8,3]) all-gather-start(x), replica_groups={{0,1}}, dimensions={0}
  ag = f32[8,3] all-gather-done(ags)
  cs = (f32[4,3], f32[4,3], u32[]) copy-start(x)
  c = f32[4,3] copy-done(cs)
  as = ((f32[4,3]), f32[3], s32[]) async-start(x), calls=sum, async_execution_thread="main"
  au = ((f32[4,3]), f32[3], s32[]) async-update(as)
  ROOT ad = f32[3] async-done(au)
})");
  // The start computes the value; the tuple holds the operand beside it.
  EXPECT_THAT(printed, HasSubstr("%ags.value = f32[8,3] all-gather(%x), dimensions={0}, "
                                 "replica_groups={{0,1}}"));
  EXPECT_THAT(printed, HasSubstr("%ags = (f32[4,3], f32[8,3]) tuple(%x, %ags.value)"));
  EXPECT_THAT(printed, HasSubstr("%ag = f32[8,3] get-tuple-element(%ags), index=1"));
  // A copy-start's value comes first.
  EXPECT_THAT(printed, HasSubstr("%c = f32[4,3] get-tuple-element(%cs), index=0"));
  EXPECT_THAT(printed, HasSubstr("%as.value = f32[3] call(%x), to_apply=%sum"));
  EXPECT_THAT(printed, HasSubstr("ROOT %ad = f32[3] get-tuple-element(%au), index=1"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2] parameter(0)\n  s = f32[2] async-start(x), "
                      "calls=e\n  ROOT d = f32[2] async-done(s)\n}"),
              HasSubstr("line 3: async-start must have a tuple shape"));
}

TEST(XlaSyntaxTest, AnnotationsPassTheirOperandThroughAndSizesAreConstants) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[5,2] parameter(0)
  t = token[] after-all()
  d = f32[5,2] add-dependency(x, t)
  m = domain(d), domain={kind="sharding", entry={maximal device=0}, exit={replicated}}
  n = s32[] get-dimension-size(m), dimensions={0}
  ROOT r = (f32[5,2], s32[], u32[]) tuple(m, n, u32[] partition-id())
})");
  EXPECT_THAT(printed, HasSubstr("%d = f32[5,2] copy(%x)"));
  EXPECT_THAT(printed, HasSubstr("%m = f32[5,2] copy(%d)"));
  EXPECT_THAT(printed, HasSubstr("%n = s32[] constant(5)"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT d = f32[2] "
                      "add-dependency(x)\n}"),
              HasSubstr("line 3: add-dependency takes 2 operands, got 1"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT n = s32[] "
                      "get-dimension-size(x), dimensions={1}\n}"),
              HasSubstr("line 3: get-dimension-size %n needs one dimension of f32[2]"));
}

TEST(XlaSyntaxTest, ReplicaGroupsInTheIotaForm) {
  const std::string printed = Canonical(R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), replica_groups=[2,4]<=[4,2]T(1,0), to_apply=add
})");
  // The ids 0..7 as a [4,2] array, transposed to [2,4]: rows are groups.
  EXPECT_THAT(printed, HasSubstr("replica_groups={{0,2,4,6},{1,3,5,7}}"));
  const auto error = [](absl::string_view groups) {
    return ErrorOf(absl::StrCat("add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  "
                                "ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  x = f32[2] "
                                "parameter(0)\n  ROOT r = f32[2] all-reduce(x), replica_groups=",
                                groups, ", to_apply=add\n}"));
  };
  EXPECT_THAT(error("[2,3]<=[4]"), HasSubstr("2 groups of 3 are not 4 devices"));
  EXPECT_THAT(error("[2,2]<=[2,2]T(0,0)"), HasSubstr("the transpose is not a permutation"));
  EXPECT_THAT(error("[4096,4096]<=[4096,4096]"), HasSubstr("names too many or no devices"));
  EXPECT_THAT(error("[2,2]<=[4"), HasSubstr("bad replica_groups"));
}

TEST(XlaSyntaxTest, CollectiveAttributesAreChecked) {
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT g = all-gather(x), "
                      "dimensions={0}\n}"),
              HasSubstr("line 3: %g: the result shape of all-gather does not follow"));
  EXPECT_THAT(verify_error("ENTRY e {\n  x = f32[3] parameter(0)\n  ROOT g = f32[5] "
                           "all-gather(x), dimensions={0}\n}"),
              HasSubstr("all-gather result f32[5] does not fit f32[3] along dimension 0"));
  EXPECT_THAT(verify_error("ENTRY e {\n  x = f32[3] parameter(0)\n  ROOT g = f32[6] "
                           "all-gather(x), dimensions={0}, replica_groups={{0,1},{2}}\n}"),
              HasSubstr("replica groups must all have the same size"));
  EXPECT_THAT(verify_error("ENTRY e {\n  x = f32[3] parameter(0)\n  ROOT p = f32[3] "
                           "collective-permute(x), source_target_pairs={{0,1},{2,1}}\n}"),
              HasSubstr("names target 1 twice"));
  EXPECT_THAT(verify_error("ENTRY e {\n  x = s32[3] parameter(0)\n  ROOT r = s32[3] "
                           "reduce-precision(x), exponent_bits=5, mantissa_bits=10\n}"),
              HasSubstr("reduce-precision takes floating-point values"));
  EXPECT_THAT(verify_error("ENTRY e {\n  x = f32[3] parameter(0)\n  ROOT r = f32[3] "
                           "reduce-precision(x), exponent_bits=0, mantissa_bits=10\n}"),
              HasSubstr("needs 1 to 11 exponent bits"));
  EXPECT_THAT(verify_error("ENTRY e {\n  x = f32[6] parameter(0)\n  ROOT a = f32[6] "
                           "all-to-all(x), dimensions={0}, replica_groups={{0,1,2,3}}\n}"),
              HasSubstr("does not split into 4 blocks"));
  // What Kiln has no op for is still named with its line.
  EXPECT_THAT(ErrorOf("ENTRY e {\n  a = f32[8] parameter(0)\n  ROOT c = f32[8] "
                      "fft(a), fft_type=FFT, fft_length={8}\n}"),
              HasSubstr("line 3: unknown or unsupported opcode 'fft'"));
}

// cholesky and triangular-solve: XLA's attributes, their errors, and the
// shapes they take (values: tests/data/hlo/linalg.hlo).
TEST(XlaSyntaxTest, LinearAlgebraOpsParseAndCheckTheirShapes) {
  auto module = ParseModule(R"(
HloModule m
ENTRY e {
  a = f32[2,4,4] parameter(0)
  b = f32[2,3,4] parameter(1)
  l = f32[2,4,4] cholesky(a), lower=true
  ROOT x = f32[2,3,4] triangular-solve(l, b), lower=true, unit_diagonal=true, transpose_a=ADJOINT
})");
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(Verify(**module).ok());
  const Instruction* x = (*module)->entry()->root();
  EXPECT_TRUE(x->attrs().linalg.lower);
  EXPECT_FALSE(x->attrs().linalg.left_side);
  EXPECT_TRUE(x->attrs().linalg.unit_diagonal);
  EXPECT_EQ(x->attrs().linalg.transpose_a, TransposeKind::kAdjoint);
  // The printed form reads back to the same attributes.
  auto again = ParseModule(PrintModule(**module));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->entry()->root()->attrs().linalg, x->attrs().linalg);

  EXPECT_THAT(ErrorOf("ENTRY e {\n  a = f32[4,4] parameter(0)\n  b = f32[4,2] parameter(1)\n"
                      "  ROOT x = f32[4,2] triangular-solve(a, b), left_side=true, "
                      "transpose_a=CONJUGATE\n}"),
              HasSubstr("transpose_a must be NO_TRANSPOSE, TRANSPOSE or ADJOINT"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  a = f32[4,4] parameter(0)\n"
                      "  ROOT c = f32[4,4] cholesky(a), lower=yes\n}"),
              HasSubstr("lower must be true or false"));
  EXPECT_THAT(verify_error("ENTRY e {\n  a = f32[4,3] parameter(0)\n"
                           "  ROOT c = f32[4,3] cholesky(a), lower=true\n}"),
              HasSubstr("square matrices"));
  EXPECT_THAT(verify_error("ENTRY e {\n  a = s32[4,4] parameter(0)\n"
                           "  ROOT c = s32[4,4] cholesky(a), lower=true\n}"),
              HasSubstr("floating-point"));
  // Left side: b is [m, n]; [n, m] is the right side's.
  EXPECT_THAT(verify_error("ENTRY e {\n  a = f32[4,4] parameter(0)\n  b = f32[2,4] parameter(1)\n"
                           "  ROOT x = f32[2,4] triangular-solve(a, b), left_side=true, "
                           "lower=true\n}"),
              HasSubstr("b must be [..., m, n]"));
}

TEST(XlaSyntaxTest, WhatNewerDumpsWriteAroundInstructions) {
  // Index comments inside constants of rank 3 and more, a computation's
  // execution thread, an async update of a custom call, a custom call's
  // literal and called computations.
  const std::string printed = Canonical(R"(
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}, execution_thread="main_thread"
ENTRY e {
  c = f32[2,1,2]{2,1,0} constant({ { /*i0=0*/ { /*i1=0*/ 1, 2 } }, { /*i0=1*/ { /*i1=0*/ 3, 4 } } })
  s = ((f32[2,1,2]), f32[4], s32[]) custom-call-start(c), custom_call_target="foo", async_execution_thread="parallel_thread"
  u = ((f32[2,1,2]), f32[4], s32[]) custom-call-update(s)
  d = f32[4] custom-call-done(u)
  ROOT k = f32[4] custom-call(d), custom_call_target="bar", literal=s32[2]{0} {1, 2}, called_computations={max}
}, execution_thread="main_thread")");
  EXPECT_THAT(printed, HasSubstr("constant({{{1, 2}}, {{3, 4}}})"));
  EXPECT_THAT(printed, HasSubstr("%s.value = f32[4] custom-call(%c), custom_call_target=\"foo\""));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  ROOT x = f32[2] parameter(0)\n}, schedule=\"x\""),
              HasSubstr("line 3: unsupported attribute after computation e"));
}

TEST(XlaSyntaxTest, MessagesNameTheConstructOnce) {
  // A type Kiln does not have is named as a type, not as an op.
  EXPECT_THAT(ErrorOf("ENTRY e {\n  ROOT x = s4[2] parameter(0)\n}"),
              HasSubstr("line 2: unknown element type 's4'"));
  // The line is written once.
  const std::string dynamic = ErrorOf("ENTRY e {\n  ROOT x = f32[<=4] parameter(0)\n}");
  EXPECT_THAT(dynamic, HasSubstr("line 2: unsupported dimension '<=4'"));
  EXPECT_THAT(dynamic, ::testing::Not(HasSubstr("line 2: line 2")));
  // The verifier names the line an instruction was read from.
  auto m = ParseModule("ENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT t = f32[2,3] "
                       "transpose(x), dimensions={1,0}\n}");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Verify(**m).message(),
              HasSubstr("line 3: computation e, instruction t (transpose): declared shape "
                        "f32[2,3] but operands give f32[3,2]"));
}

TEST(XlaSyntaxTest, TopKIsAStableSortSlicedToK) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[3,8] parameter(0)
  ROOT t = (f32[3,2], s32[3,2]) topk(x), k=2, largest=true
})");
  EXPECT_THAT(printed, HasSubstr("sort(%x, %t.indices), dimensions={1}, is_stable=true, "
                                 "to_apply=%t.comparator"));
  EXPECT_THAT(printed, HasSubstr("ROOT %t = (f32[3,2], s32[3,2]) tuple(%t.values, %t.top_indices)"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[3,8] parameter(0)\n  ROOT t = topk(x), k=9, "
                      "largest=true\n}"),
              HasSubstr("line 3: %t: topk's k=9 does not fit f32[3,8]"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[3,8] parameter(0)\n  ROOT t = topk(x), k=2, "
                      "largest=maybe\n}"),
              HasSubstr("line 3: largest must be true or false, got 'maybe'"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[3,8] parameter(0)\n  ROOT t = topk(x), k=2, "
                      "dimensions={0}\n}"),
              HasSubstr("line 3: attribute 'dimensions' does not apply to topk"));
}

TEST(XlaSyntaxTest, BatchNormalizationIsWrittenOut) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[2,3] parameter(0)
  s = f32[3] parameter(1)
  o = f32[3] parameter(2)
  ROOT t = (f32[2,3], f32[3], f32[3]) batch-norm-training(x, s, o), epsilon=0.5, feature_index=1
})");
  EXPECT_THAT(printed, HasSubstr("reduce("));
  EXPECT_THAT(printed, HasSubstr("rsqrt("));
  EXPECT_THAT(printed, HasSubstr("to_apply=%t.add"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n  "
                      "ROOT t = batch-norm-training(x, s), epsilon=0.5, feature_index=1\n}"),
              HasSubstr("line 4: %t: takes 3 operands, got 2"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n  "
                      "ROOT t = batch-norm-training(x, s, s), epsilon=0.5, feature_index=2\n}"),
              HasSubstr("line 4: %t: feature_index 2 is out of range for f32[2,3]"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[2] parameter(1)\n  "
                      "ROOT t = batch-norm-training(x, s, s), epsilon=0.5, feature_index=1\n}"),
              HasSubstr("line 4: %t: operand 1 is f32[2], expected f32[3]"));
}

// JAX's linear algebra on the CPU calls LAPACK. potrf and trsm are Kiln's
// cholesky and triangular-solve (their values: the jax_cholesky* and
// jax_solve_* corpus modules); the other routines are refused naming the
// call and its line, as are forms Kiln does not read.
TEST(XlaSyntaxTest, LapackCallsLowerOrNameWhatIsMissing) {
  const std::string potrf = Canonical(R"(
ENTRY e {
  a = f32[2,3,3]{1,2,0} parameter(0)
  ROOT c = (f32[2,3,3]{1,2,0}, s32[2]{0}) custom-call(a), custom_call_target="lapack_spotrf_ffi", operand_layout_constraints={f32[2,3,3]{1,2,0}}, output_to_operand_aliasing={{0}: (0, {})}, api_version=API_VERSION_TYPED_FFI, backend_config={uplo = 85 : ui8}
})");
  EXPECT_THAT(potrf, HasSubstr("cholesky(%a), lower=false"));
  EXPECT_THAT(potrf, HasSubstr("ROOT %c = (f32[2,3,3], s32[2]) tuple("));
  const std::string trsm = Canonical(R"(
ENTRY e {
  a = f64[4,4]{0,1} parameter(0)
  b = f64[3,4]{0,1} parameter(1)
  alpha = f64[] parameter(2)
  ROOT x = f64[3,4]{0,1} custom-call(a, b, alpha), custom_call_target="lapack_dtrsm_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={diag = 85 : ui8, side = 82 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}
})");
  EXPECT_THAT(trsm, HasSubstr("%x.scaled = f64[3,4] multiply(%b, %x.alpha_all)"));
  EXPECT_THAT(trsm, HasSubstr("triangular-solve(%a, %x.scaled), left_side=false, lower=false, "
                              "unit_diagonal=true, transpose_a=TRANSPOSE"));

  auto call = [](const std::string& target, const std::string& config,
                 const std::string& shape = "(f32[3,3], s32[])") {
    return absl::StrCat("ENTRY e {\n  a = f32[3,3] parameter(0)\n  ROOT c = ", shape,
                        " custom-call(a), custom_call_target=\"", target,
                        "\", backend_config={", config, "}\n}");
  };
  EXPECT_THAT(ErrorOf(call("lapack_sgeev_ffi", "")),
              HasSubstr("line 3: %c: custom-call 'lapack_sgeev_ffi' (XLA's LAPACK "
                        "eigendecomposition) is not supported"));
  // getrf, geqrf, orgqr, syevd and gesdd stay calls, run by the host
  // backend through LAPACK, with their options checked and spelled one way.
  const std::string syevd = Canonical(call("lapack_ssyevd_ffi", "uplo = 85 : ui8",
                                           "(f32[3,3], f32[3], s32[])"));
  EXPECT_THAT(syevd, HasSubstr("custom_call_target=\"lapack_ssyevd_ffi\", "
                               "backend_config={mode = 86 : ui8, uplo = 85 : ui8}"));
  EXPECT_THAT(Canonical(call("lapack_sgetrf_ffi", "", "(f32[3,3], s32[3], s32[])")),
              HasSubstr("custom_call_target=\"lapack_sgetrf_ffi\"\n"));
  EXPECT_THAT(ErrorOf(call("lapack_sgesdd_ffi", "mode = 88 : ui8")),
              HasSubstr("mode = 88 is not one of the codes of ASN"));
  EXPECT_THAT(ErrorOf(call("lapack_sgetrf_ffi", "pivot = 1 : ui8")),
              HasSubstr("lapack_sgetrf_ffi: unknown option 'pivot' in backend_config"));
  EXPECT_THAT(ErrorOf(call("lapack_cpotrf_ffi", "uplo = 76 : ui8")),
              HasSubstr("Cholesky factorization of complex matrices) is not supported"));
  EXPECT_THAT(ErrorOf(call("lapack_spotrf", "uplo = 76 : ui8")),
              HasSubstr("jaxlib's older LAPACK call"));
  EXPECT_THAT(ErrorOf(call("lapack_spotrf_ffi", "uplo = 81 : ui8")),
              HasSubstr("uplo = 81 is not one of the codes of LU"));
  EXPECT_THAT(ErrorOf(call("lapack_spotrf_ffi", "uplo : ui8")),
              HasSubstr("is not name = integer : type"));
  EXPECT_THAT(ErrorOf(call("lapack_dpotrf_ffi", "uplo = 76 : ui8")),
              HasSubstr("a must be a f64 matrix"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  a = f32[2,3] parameter(0)\n  ROOT c = (f32[2,3], s32[]) "
                      "custom-call(a), custom_call_target=\"lapack_spotrf_ffi\"\n}"),
              HasSubstr("a must be square"));
  // The declared result must be what the routine returns: info is one s32
  // per matrix, a scalar here.
  auto wrong_info = ParseModule(call("lapack_spotrf_ffi", "", "(f32[3,3], s32[3])"));
  ASSERT_TRUE(wrong_info.ok()) << wrong_info.status();
  EXPECT_FALSE(Verify(**wrong_info).ok());
}

// Sharding annotations are copies on one partition; a shard that is part of
// the array, and callbacks into Python, are refused naming the call.
TEST(XlaSyntaxTest, MarkerCallsAreCopiesAndCallbacksAreRefused) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[4,6] parameter(0)
  s = f32[4,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[1,1]<=[1]}
  ROOT f = f32[4,6] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
})");
  EXPECT_THAT(printed, HasSubstr("%s = f32[4,6] copy(%x)"));
  EXPECT_THAT(printed, HasSubstr("ROOT %f = f32[4,6] copy(%s)"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[4,6] parameter(0)\n  ROOT f = f32[2,6] custom-call(x), "
                      "custom_call_target=\"SPMDFullToShardShape\"\n}"),
              HasSubstr("line 3: %f: custom-call 'SPMDFullToShardShape' turns f32[4,6] into "
                        "f32[2,6]: a module partitioned across devices"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT f = f32[4] custom-call(x), "
                      "custom_call_target=\"xla_ffi_python_cpu_callback\"\n}"),
              HasSubstr("line 3: %f: custom-call 'xla_ffi_python_cpu_callback' calls back into "
                        "the Python process"));
  // XLA's GPU modules after its passes: a cuSOLVER call names itself.
  EXPECT_THAT(ErrorOf(R"(ENTRY e {
  a = f32[4,4] parameter(0)
  g = (f32[4,4], s32[4], s32[]) custom-call(a), custom_call_target="cusolver_getrf_ffi"
  ROOT r = f32[4,4] get-tuple-element(g), index=0
})"),
              HasSubstr("line 3: %g: custom-call 'cusolver_getrf_ffi' is a call into a GPU or "
                        "TPU library"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT f = f32[4] custom-call(x), "
                      "custom_call_target=\"tpu_custom_call\"\n}"),
              HasSubstr("'tpu_custom_call' is a call into a GPU or TPU library"));
}

// XLA's GPU backend turns dots into cuBLAS calls whose backend_config holds
// the dimension numbers, alpha, beta and an epilogue: they read as the
// dot and the elementwise ops they stand for.
TEST(XlaSyntaxTest, CublasCallsReadAsDotsWithTheirEpilogues) {
  const std::string printed = Canonical(R"(
ENTRY e {
  a = f32[2,3]{1,0} parameter(0)
  b = f32[4,3]{0,1} parameter(1)
  g = (f32[2,4]{1,0}, s8[1028]{0}) custom-call(a, b), custom_call_target="__cublas$gemm", backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm_backend_config":{"alpha_real":2,"alpha_imag":0,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"precision_config":{"operand_precision":["DEFAULT","DEFAULT"],"algorithm":"ALG_UNSET"},"epilogue":"DEFAULT","grad_x":false,"grad_y":false}}
  ROOT r = f32[2,4] get-tuple-element(g), index=0
})");
  EXPECT_THAT(printed, HasSubstr("dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={1}"));
  EXPECT_THAT(printed, HasSubstr("multiply("));
  EXPECT_THAT(printed, HasSubstr("s8[1028] broadcast("));
  // The older flat form, quoted, with beta and the addend.
  const std::string flat = Canonical(R"(
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,4] parameter(1)
  c = f32[2,4] parameter(2)
  ROOT g = f32[2,4] custom-call(a, b, c), custom_call_target="__cublas$gemm", backend_config="{\"alpha_real\":1,\"beta\":1,\"dot_dimension_numbers\":{\"lhs_contracting_dimensions\":[1],\"rhs_contracting_dimensions\":[0]}}"
})");
  EXPECT_THAT(flat, HasSubstr("dot(%a, %b)"));
  EXPECT_THAT(flat, HasSubstr("ROOT %g = f32[2,4] copy("));
  // cuBLASLt with a bias and a relu.
  const std::string lt = Canonical(R"(
ENTRY e {
  a = bf16[2,3] parameter(0)
  b = bf16[3,4] parameter(1)
  bias = bf16[4] parameter(2)
  g = (f32[2,4], s8[0]) custom-call(a, b, bias), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"]},"epilogue":"BIAS_RELU"}}
  ROOT r = f32[2,4] get-tuple-element(g), index=0
})");
  EXPECT_THAT(lt, HasSubstr("f32[2,4] dot(%a, %b)"));
  EXPECT_THAT(lt, HasSubstr("f32[4] convert(%bias)"));
  EXPECT_THAT(lt, HasSubstr("broadcast("));
  EXPECT_THAT(lt, HasSubstr("maximum("));
  // What does not fit is refused naming the call.
  const std::string gemm_head = "ENTRY e {\n  a = f32[2,3] parameter(0)\n  b = f32[3,4] parameter(1)\n  ";
  EXPECT_THAT(ErrorOf(gemm_head + "ROOT g = f32[2,4] custom-call(a, b), custom_call_target=\"__cublas$gemm\"\n}"),
              HasSubstr("line 4: %g: custom-call '__cublas$gemm': has no backend_config"));
  EXPECT_THAT(
      ErrorOf(gemm_head +
              "ROOT g = f32[2,4] custom-call(a, b), custom_call_target=\"__cublas$lt$matmul\", "
              "backend_config={\"dot_dimension_numbers\":{\"lhs_contracting_dimensions\":[1],"
              "\"rhs_contracting_dimensions\":[0]},\"epilogue\":\"BIAS_GELU_AUX\"}\n}"),
      HasSubstr("epilogue BIAS_GELU_AUX is not supported"));
  EXPECT_THAT(
      ErrorOf(gemm_head +
              "ROOT g = f32[2,5] custom-call(a, b), custom_call_target=\"__cublas$gemm\", "
              "backend_config={\"dot_dimension_numbers\":{\"lhs_contracting_dimensions\":[1],"
              "\"rhs_contracting_dimensions\":[0]}}\n}"),
      HasSubstr("its dimension numbers make f32[2,4] of the operands, but it returns f32[2,5]"));
  EXPECT_THAT(
      ErrorOf(gemm_head +
              "ROOT g = f32[2,4] custom-call(a, b), custom_call_target=\"__cublas$gemm\", "
              "backend_config={\"beta\":1,\"dot_dimension_numbers\":{\"lhs_contracting_dimensions\":[1],"
              "\"rhs_contracting_dimensions\":[0]}}\n}"),
      HasSubstr("takes 3 operands with beta 1"));
  EXPECT_THAT(
      ErrorOf(gemm_head +
              "ROOT g = f32[2,4] custom-call(a, b), custom_call_target=\"__cublas$gemm\", "
              "backend_config={\"dot_dimension_numbers\":{\"lhs_contracting_dimensions\":[1}}\n}"),
      HasSubstr("backend_config: JSON at offset"));
  EXPECT_THAT(ErrorOf(gemm_head + "ROOT g = f32[2,4] custom-call(a, b), "
                                  "custom_call_target=\"__cublas$lt$matmul$f8\"\n}"),
              HasSubstr("is a call into a GPU or TPU library"));
}

// bitcast-convert between widths reads as shifts, masks and a concatenate
// (narrower) or ors (wider); shapes that do not follow the rule are refused.
TEST(XlaSyntaxTest, BitcastConvertBetweenWidths) {
  const std::string narrow = Canonical(R"(
ENTRY e {
  x = f32[3] parameter(0)
  ROOT b = u16[3,2] bitcast-convert(x)
})");
  EXPECT_THAT(narrow, HasSubstr("shift-right-logical("));
  EXPECT_THAT(narrow, HasSubstr("ROOT %b = u16[3,2] concatenate("));
  const std::string wide = Canonical(R"(
ENTRY e {
  x = u8[3,4] parameter(0)
  ROOT b = f32[3] bitcast-convert(x)
})");
  EXPECT_THAT(wide, HasSubstr("shift-left("));
  EXPECT_THAT(wide, HasSubstr("ROOT %b = f32[3] bitcast-convert("));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[3] parameter(0)\n  ROOT b = u16[3,4] bitcast-convert(x)\n}"),
              HasSubstr("a type r times narrower adds a last dimension of r"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = u8[3,2] parameter(0)\n  ROOT b = f32[3] bitcast-convert(x)\n}"),
              HasSubstr("line 3: %b: bitcast-convert from u8[3,2] to f32[3]"));
}

// rng-get-and-update-state reads as an rng of fresh state bits.
TEST(XlaSyntaxTest, RngStateReadsAsAnRngOfStateBits) {
  const std::string printed = Canonical(R"(
ENTRY e {
  ROOT s = u64[2] rng-get-and-update-state(), delta=16
})");
  EXPECT_THAT(printed, HasSubstr("ROOT %s = u64[2] rng(%s.low, %s.high), distribution=rng_uniform"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  ROOT s = u64[3] rng-get-and-update-state(), delta=16\n}"),
              HasSubstr("takes no operands and gives u64[2]"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  ROOT s = u64[2] rng-get-and-update-state(), delta=-1\n}"),
              HasSubstr("negative delta"));
}

// stochastic-convert reads as the elementwise ops that round with the
// random bits; random bits of another width are refused.
TEST(XlaSyntaxTest, StochasticConvertReadsAsElementwiseOps) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[4] parameter(0)
  r = u32[4] parameter(1)
  ROOT s = s32[4] stochastic-convert(x, r)
})");
  EXPECT_THAT(printed, HasSubstr("floor("));
  EXPECT_THAT(printed, HasSubstr("ROOT %s = s32[4] select("));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[4] parameter(0)\n  r = u16[4] parameter(1)\n  "
                      "ROOT s = s32[4] stochastic-convert(x, r)\n}"),
              HasSubstr("line 4: %s: stochastic-convert takes a float array and unsigned random "
                        "bits of its width"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[4] parameter(0)\n  r = u32[4] parameter(1)\n  "
                      "ROOT s = u32[4] stochastic-convert(x, r)\n}"),
              HasSubstr("gives a signed integer array"));
}

// cuDNN's forward convolutions read as the convolution their attributes
// describe, with the bias, side input and activation of the fused form.
TEST(XlaSyntaxTest, CudnnForwardConvolutionsReadAsConvolutions) {
  const std::string printed = Canonical(R"(
ENTRY e {
  x = f32[1,5,5,2] parameter(0)
  w = f32[3,3,2,4] parameter(1)
  b = f32[4] parameter(2)
  c = (f32[1,5,5,4], u8[0]) custom-call(x, w, b), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBiasActivationForward", backend_config={"cudnn_conv_backend_config":{"activation_mode":"kRelu","conv_result_scale":1,"side_input_scale":0,"leakyrelu_alpha":0}}
  ROOT r = f32[1,5,5,4] get-tuple-element(c), index=0
})");
  EXPECT_THAT(printed, HasSubstr("convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, "
                                 "dim_labels=b01f_01io->b01f"));
  EXPECT_THAT(printed, HasSubstr("broadcast(%b), dimensions={3}"));
  EXPECT_THAT(printed, HasSubstr("maximum("));
  EXPECT_THAT(printed, HasSubstr("u8[0] broadcast("));
  const std::string conv_head =
      "ENTRY e {\n  x = f32[1,5,5,2] parameter(0)\n  w = f32[3,3,2,4] parameter(1)\n  ";
  EXPECT_THAT(ErrorOf(conv_head +
                      "ROOT c = f32[1,5,5,4] custom-call(x, w), window={size=3x3 pad=1_1x1_1}, "
                      "dim_labels=b01f_01io->b01f, custom_call_target=\"__cudnn$convForwardGraph\"\n}"),
              HasSubstr("line 4: %c: custom-call '__cudnn$convForwardGraph': is a cuDNN call "
                        "that Kiln does not read"));
  // The input gradient: the output gradient dilated by the stride against
  // the kernel reversed, its features swapped.
  const std::string dx = Canonical(R"(
ENTRY e {
  dy = f32[1,3,3,4] parameter(0)
  w = f32[3,3,2,4] parameter(1)
  ROOT c = f32[1,6,6,2] custom-call(dy, w), window={size=3x3 stride=2x2 pad=0_1x0_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBackwardInput"
})");
  EXPECT_THAT(dx, HasSubstr("reverse(%w), dimensions={0,1}"));
  EXPECT_THAT(dx, HasSubstr("window={size=3x3 pad=2_1x2_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f"));
  EXPECT_THAT(ErrorOf(conv_head +
                      "ROOT c = f32[1,5,5,2] custom-call(x, w), window={size=3x3 pad=1_1x1_1 "
                      "lhs_dilate=2x2}, dim_labels=b01f_01io->b01f, "
                      "custom_call_target=\"__cudnn$convBackwardInput\"\n}"),
              HasSubstr("a gradient of a convolution with lhs dilation"));
  // What the client wrote is checked before any arithmetic: a kernel that
  // dim_labels does not fit, windows past any size.
  EXPECT_THAT(ErrorOf("ENTRY e {\n  dy = f32[1,4,4,4] parameter(0)\n  w = f32[] parameter(1)\n  "
                      "ROOT dx = (f32[1,4,4,4], u8[0]) custom-call(dy, w), "
                      "custom_call_target=\"__cudnn$convBackwardInput\", window={size=3x3 "
                      "pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2\n}"),
              HasSubstr("custom-call '__cudnn$convBackwardInput': its dim_labels do not fit its "
                        "operands"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  dy = f32[1,1,1,1] parameter(0)\n  w = f32[3,1,1,1] "
                      "parameter(1)\n  ROOT dx = f32[1,1,1,1] custom-call(dy, w), "
                      "custom_call_target=\"__cudnn$convBackwardInput\", window={size=3x1 "
                      "rhs_dilate=4611686018427387904x1}, dim_labels=b01f_01io->b01f\n}"),
              HasSubstr("is out of range"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[1,3,3,1] parameter(0)\n  dy = f32[1,3,3,1] "
                      "parameter(1)\n  ROOT dw = f32[3,3,1,1] custom-call(x, dy), "
                      "custom_call_target=\"__cudnn$convBackwardFilter\", window={size=3x3 "
                      "pad=-9223372036854775808_1x1_1}, dim_labels=b01f_01io->b01f\n}"),
              HasSubstr("out of range"));
  EXPECT_THAT(ErrorOf(conv_head +
                      "ROOT c = f32[1,3,3,4] custom-call(x, w), window={size=3x3 pad=1_1x1_1}, "
                      "dim_labels=b01f_01io->b01f, custom_call_target=\"__cudnn$convForward\"\n}"),
              HasSubstr("its window and dim_labels make f32[1,5,5,4], but it returns f32[1,3,3,4]"));
}

// XLA's optimized modules keep top-k as a custom call with its comparator;
// it is a stable sort under that comparator, sliced to the result's k.
TEST(XlaSyntaxTest, TheTopKCustomCallSortsWithItsComparator) {
  const std::string printed = Canonical(R"(
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  x = f32[4,6] parameter(0)
  ROOT t = (f32[4,2], s32[4,2]) custom-call(x), custom_call_target="TopK", called_computations={cmp}
})");
  EXPECT_THAT(printed, HasSubstr("sort(%x, %t.indices), dimensions={1}, is_stable=true, "
                                 "to_apply=%cmp"));
  EXPECT_THAT(printed, HasSubstr("%t.values = f32[4,2] slice(%t.sorted_values), "
                                 "slice={[0:4], [0:2]}"));
  EXPECT_THAT(ErrorOf("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT t = (f32[2], s32[2]) "
                      "custom-call(x), custom_call_target=\"TopK\"\n}"),
              HasSubstr("line 3: custom-call %t to TopK takes one operand and a comparator"));
}

}  // namespace
}  // namespace kiln::ir
