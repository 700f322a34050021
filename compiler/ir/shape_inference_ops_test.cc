// Rejections of the data-movement, reduction, control-flow, feed and
// collective shape rules (shape_inference_test.cc has elementwise, dot,
// convolution, gather and scatter), plus the paths only the Builder reaches.
#include <string>

#include "compiler/ir/builder.h"
#include "compiler/ir/rejection_test_util.h"
#include "compiler/ir/shape_inference.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

using testing_util::CaseName;
using testing_util::ExpectRejection;
using Case = testing_util::RejectionCase;

class OpRejectionTest : public ::testing::TestWithParam<Case> {};

TEST_P(OpRejectionTest, VerifierNamesInstructionAndProblem) {
  ExpectRejection(GetParam());
}

std::string P(absl::string_view shape, int number, absl::string_view name) {
  return absl::StrCat(name, " = ", shape, " parameter(", number, ")\n");
}
const std::string kTuple = P("f32[2]", 0, "p") + "t = (f32[2]) tuple(p)\n";

const Case kLeaves[] = {
    {"ConstantLiteralShape", "bad = f32[2] constant({1, 2})",
     "constant literal has shape f32[2], declared f32[3]",
     [](Instruction& i) { i.set_shape(Shape(ElementType::kF32, {3})); }},
    {"IotaNotArray", "bad = (s32[4]) iota(), iota_dimension=0",
     "iota must be an array, got (s32[4])"},
    {"IotaDimension", "bad = s32[4] iota(), iota_dimension=1",
     "iota_dimension 1 out of range for s32[4]"},
    {"BroadcastOperandNotArray",
     kTuple + "bad = f32[2,3] broadcast(t), dimensions={0}",
     "broadcast operand must be an array"},
    {"BroadcastResultNotArray",
     P("f32[2]", 0, "p") + "bad = (f32[2]) broadcast(p), dimensions={0}",
     "broadcast result must be an array"},
    {"BroadcastDimensionCount",
     P("f32[2]", 0, "p") + "bad = f32[2,3] broadcast(p), dimensions={}",
     "broadcast dimensions {} do not match operand rank 1"},
    {"BroadcastDimensionRange",
     P("f32[2]", 0, "p") + "bad = f32[2,3] broadcast(p), dimensions={2}",
     "broadcast dimensions {2} has dimension 2 out of range for rank 2"},
    {"BroadcastDimensionSize",
     P("f32[2]", 0, "p") + "bad = f32[3,2] broadcast(p), dimensions={0}",
     "broadcast operand dimension 0 (2) does not match result dimension 0 (3)"},
    {"ReshapeOperandNotArray", kTuple + "bad = f32[2] reshape(t)",
     "reshape operand must be an array"},
    {"ReshapeResultNotArray", P("f32[2]", 0, "p") + "bad = (f32[2]) reshape(p)",
     "reshape result must be an array"},
    {"ReshapeElementCount", P("f32[2,3]", 0, "p") + "bad = f32[5] reshape(p)",
     "reshape from f32[2,3] to f32[5] changes the element count"},
    {"TransposeOperandNotArray",
     kTuple + "bad = f32[2] transpose(t), dimensions={0}",
     "transpose operand must be an array"},
    {"TransposeCount",
     P("f32[2,3]", 0, "p") + "bad = f32[3,2] transpose(p), dimensions={0}",
     "transpose dimensions must be a permutation of the operand dims"},
    {"TransposeRange",
     P("f32[2,3]", 0, "p") + "bad = f32[3,2] transpose(p), dimensions={0,2}",
     "transpose dimensions {0,2} has dimension 2 out of range for rank 2"},
    {"TransposeRepeat",
     P("f32[2,3]", 0, "p") + "bad = f32[3,2] transpose(p), dimensions={0,0}",
     "transpose dimensions {0,0} repeats dimension 0"},
    {"ReverseOperandNotArray", kTuple + "bad = f32[2] reverse(t), dimensions={0}",
     "reverse operand must be an array"},
    {"ReverseRange",
     P("f32[2]", 0, "p") + "bad = f32[2] reverse(p), dimensions={1}",
     "reverse dimensions {1} has dimension 1 out of range for rank 1"},
    {"GetTupleElementOfArray",
     P("f32[2]", 0, "p") + "bad = f32[2] get-tuple-element(p), index=0",
     "get-tuple-element operand is not a tuple"},
    {"TupleIndex", kTuple + "bad = f32[2] get-tuple-element(t), index=1",
     "tuple index 1 out of range for (f32[2])"},
};
INSTANTIATE_TEST_SUITE_P(Leaves, OpRejectionTest, ::testing::ValuesIn(kLeaves),
                         CaseName);

const std::string kF4 = P("f32[4]", 0, "p");
const Case kSlicing[] = {
    {"SliceOperandNotArray", kTuple + "bad = f32[1] slice(t), slice={[0:1]}",
     "slice operand must be an array"},
    {"SliceRank", kF4 + "bad = f32[2] slice(p), slice={[0:2], [0:1]}",
     "slice has 2 dimensions, operand has 1"},
    {"SliceLimitPastEnd", kF4 + "bad = f32[3] slice(p), slice={[2:5]}",
     "slice [2:5:1] out of range for dimension 0 of f32[4]"},
    {"SliceNegativeStart", kF4 + "bad = f32[3] slice(p), slice={[-1:2]}",
     "slice [-1:2:1] out of range for dimension 0 of f32[4]"},
    {"SliceStartPastLimit", kF4 + "bad = f32[0] slice(p), slice={[3:1]}",
     "slice [3:1:1] out of range for dimension 0 of f32[4]"},
    {"SliceStrideZero", kF4 + "bad = f32[4] slice(p), slice={[0:4:0]}",
     "slice [0:4:0] out of range for dimension 0 of f32[4]"},
    {"DynamicSliceNoOperands", "bad = f32[2] dynamic-slice(), dynamic_slice_sizes={2}",
     "dynamic-slice needs at least 1 operands"},
    {"DynamicSliceOperandNotArray",
     kTuple + P("s32[]", 1, "i") +
         "bad = f32[1] dynamic-slice(t, i), dynamic_slice_sizes={1}",
     "(dynamic-slice): operand must be an array"},
    {"DynamicSliceIndexArrayType",
     P("f32[4,5]", 0, "p") + P("f32[2]", 1, "v") +
         "bad = f32[2,2] dynamic-slice(p, v), dynamic_slice_sizes={2,2}",
     "start index array must be integer with one entry per operand dimension"},
    {"DynamicSliceIndexArrayLength",
     P("f32[4,5]", 0, "p") + P("s32[3]", 1, "v") +
         "bad = f32[2,2] dynamic-slice(p, v), dynamic_slice_sizes={2,2}",
     "start index array must be integer with one entry per operand dimension"},
    {"DynamicSliceIndexCount",
     P("f32[4,5]", 0, "p") + P("s32[]", 1, "i") +
         "bad = f32[2,2] dynamic-slice(p, i), dynamic_slice_sizes={2,2}",
     "dynamic-slice has 1 start indices for operand rank 2"},
    {"DynamicSliceIndexType",
     P("f32[4,5]", 0, "p") + P("s32[]", 1, "i") + P("f32[]", 2, "f") +
         "bad = f32[2,2] dynamic-slice(p, i, f), dynamic_slice_sizes={2,2}",
     "start index 1 must be an integer scalar, got f32[]"},
    {"DynamicSliceSizesCount",
     P("f32[4,5]", 0, "p") + P("s32[]", 1, "i") +
         "bad = f32[2,2] dynamic-slice(p, i, i), dynamic_slice_sizes={2}",
     "dynamic_slice_sizes must have one entry per dimension"},
    {"DynamicSliceSizeRange",
     P("f32[4,5]", 0, "p") + P("s32[]", 1, "i") +
         "bad = f32[2,6] dynamic-slice(p, i, i), dynamic_slice_sizes={2,6}",
     "dynamic slice size 6 out of range for dimension 1 of f32[4,5]"},
    {"DynamicUpdateSliceTooFewOperands",
     P("f32[4,5]", 0, "p") + "bad = f32[4,5] dynamic-update-slice(p)",
     "dynamic-update-slice needs at least 2 operands"},
    {"DynamicUpdateSliceIndexCount",
     P("f32[4,5]", 0, "p") + P("f32[2,2]", 1, "u") + P("s32[]", 2, "i") +
         "bad = f32[4,5] dynamic-update-slice(p, u, i)",
     "dynamic-update-slice has 1 start indices for operand rank 2"},
    {"DynamicUpdateSliceUpdateNotArray",
     P("f32[2]", 0, "p") + P("s32[]", 1, "i") + "t = (f32[2]) tuple(p)\n" +
         "bad = f32[2] dynamic-update-slice(p, t, i)",
     "update must be an array, got (f32[2])"},
    {"DynamicUpdateSliceUpdateRank",
     P("f32[4,5]", 0, "p") + P("f32[2]", 1, "u") + P("s32[]", 2, "i") +
         "bad = f32[4,5] dynamic-update-slice(p, u, i, i)",
     "update f32[2] does not match operand f32[4,5]"},
    {"DynamicUpdateSliceUpdateLarger",
     P("f32[4,5]", 0, "p") + P("f32[5,5]", 1, "u") + P("s32[]", 2, "i") +
         "bad = f32[4,5] dynamic-update-slice(p, u, i, i)",
     "update f32[5,5] larger than operand f32[4,5]"},
    {"ConcatenateNoOperands", "bad = f32[2] concatenate(), dimensions={0}",
     "concatenate needs operands"},
    {"ConcatenateOperandNotArray",
     kTuple + "bad = f32[2] concatenate(t, t), dimensions={0}",
     "(concatenate): operand must be an array"},
    {"ConcatenateDimension",
     P("f32[2,3]", 0, "a") + "bad = f32[2,6] concatenate(a, a), dimensions={2}",
     "concatenate needs one dimension in range"},
    {"ConcatenateTwoDimensions",
     P("f32[2,3]", 0, "a") + "bad = f32[4,3] concatenate(a, a), dimensions={0,1}",
     "concatenate needs one dimension in range"},
    {"ConcatenateOperandType",
     P("f32[2,3]", 0, "a") + P("s32[4,3]", 1, "b") +
         "bad = f32[6,3] concatenate(a, b), dimensions={0}",
     "concatenate operand 1 s32[4,3] does not match f32[2,3]"},
    {"ConcatenateOtherDimension",
     P("f32[2,3]", 0, "a") + P("f32[4,5]", 1, "b") +
         "bad = f32[6,3] concatenate(a, b), dimensions={0}",
     "concatenate operand 1 f32[4,5] does not match f32[2,3] outside "
     "dimension 0"},
    {"PadOperandNotArray",
     kTuple + "z = f32[] constant(0)\nbad = f32[2] pad(t, z), padding=0_0",
     "pad operand must be an array"},
    {"PadValueType",
     P("f32[2]", 0, "p") + "z = s32[] constant(0)\nbad = f32[2] pad(p, z), padding=0_0",
     "padding value must be a scalar of the operand type"},
    {"PadRank",
     P("f32[2]", 0, "p") + "z = f32[] constant(0)\nbad = f32[2] pad(p, z), padding=0_0x0_0",
     "padding has 2 dimensions, operand has 1"},
    {"PadNegativeInterior",
     P("f32[2]", 0, "p") + "z = f32[] constant(0)\nbad = f32[2] pad(p, z), padding=0_0_-1",
     "padding out of range"},
    {"PadEdgeOutOfRange",
     P("f32[2]", 0, "p") +
         "z = f32[] constant(0)\nbad = f32[2] pad(p, z), padding=0_2000000000000",
     "padding out of range"},
    {"PadMakesNegative",
     P("f32[2]", 0, "p") + "z = f32[] constant(0)\nbad = f32[2] pad(p, z), padding=-3_0",
     "padding makes dimension 0 negative"},
};
INSTANTIATE_TEST_SUITE_P(Slicing, OpRejectionTest,
                         ::testing::ValuesIn(kSlicing), CaseName);

const std::string kReduceIn = P("f32[2,3]", 0, "p") + "z = f32[] constant(0)\n";
const std::string kWindowIn = kF4 + "z = f32[] constant(0)\n";
const std::string kSasIn = kF4 + P("f32[2]", 1, "s") + "z = f32[] constant(0)\n";
const Case kReductions[] = {
    {"ReduceOddOperands", kReduceIn + "bad = f32[3] reduce(p), dimensions={0}, to_apply=add",
     "reduce takes N inputs and N init values"},
    {"ReduceInputNotArray",
     kTuple + "z = f32[] constant(0)\nbad = f32[] reduce(t, z), dimensions={0}, to_apply=add",
     "reduce input must be an array"},
    {"ReduceInputsDiffer",
     kReduceIn + P("f32[3,2]", 1, "q") +
         "bad = (f32[3], f32[2]) reduce(p, q, z, z), dimensions={0}, to_apply=add",
     "reduce inputs differ in dims"},
    {"ReduceInitType",
     kReduceIn + "zi = s32[] constant(0)\nbad = f32[3] reduce(p, zi), dimensions={0}, to_apply=add",
     "reduce init value 0 must be f32[]"},
    {"ReduceDimensions",
     kReduceIn + "bad = f32[3] reduce(p, z), dimensions={2}, to_apply=add",
     "reduce dimensions {2} has dimension 2 out of range for rank 2"},
    {"ReduceNoReducer", kReduceIn + "bad = f32[3] reduce(p, z), dimensions={0}",
     "(reduce): needs one to_apply computation"},
    {"ReducerParameterCount",
     kReduceIn + "bad = f32[3] reduce(p, z), dimensions={0}, to_apply=id",
     "reducer computation id takes 1 parameters, expected 2"},
    {"ReducerParameterType",
     kReduceIn + "bad = f32[3] reduce(p, z), dimensions={0}, to_apply=addi",
     "reducer computation addi parameter 0 must be f32[]"},
    {"ReducerResult",
     kReduceIn + "bad = f32[3] reduce(p, z), dimensions={0}, to_apply=lt",
     "reducer computation lt returns pred[], expected f32[]"},
    {"ReducerTupleResult",
     kReduceIn + P("s32[2,3]", 1, "q") + "zi = s32[] constant(0)\n" +
         "bad = (f32[3], s32[3]) reduce(p, q, z, zi), dimensions={0}, to_apply=pair",
     "reducer computation pair returns f32[], expected (f32[], s32[])"},
    {"ReduceWindowOddOperands",
     kWindowIn + "bad = f32[3] reduce-window(p), window={size=2}, to_apply=add",
     "reduce-window takes N inputs and N init values"},
    {"ReduceWindowInputNotArray",
     kTuple + "z = f32[] constant(0)\n" +
         "bad = f32[1] reduce-window(t, z), window={size=2}, to_apply=add",
     "reduce-window input must be an array"},
    {"ReduceWindowRank",
     kWindowIn + "bad = f32[3] reduce-window(p, z), window={size=2x2}, to_apply=add",
     "window has 2 dims, input has rank 1"},
    {"ReduceWindowInputsDiffer",
     kWindowIn + P("f32[5]", 1, "q") +
         "bad = (f32[3], f32[4]) reduce-window(p, q, z, z), window={size=2}, to_apply=add",
     "reduce-window inputs differ in dims"},
    {"ReduceWindowInitType",
     kWindowIn + "zi = s32[] constant(0)\n" +
         "bad = f32[3] reduce-window(p, zi), window={size=2}, to_apply=add",
     "reduce-window init value type mismatch"},
    {"ReduceWindowDilationZero",
     kWindowIn + "bad = f32[3] reduce-window(p, z), window={size=2 rhs_dilate=0}, to_apply=add",
     "window size, stride and dilations must be >= 1"},
    {"ReduceWindowReducer",
     kWindowIn + "bad = f32[3] reduce-window(p, z), window={size=2}, to_apply=lt",
     "reducer computation lt returns pred[], expected f32[]"},
    {"SelectAndScatterOperandNotArray",
     kTuple + P("f32[2]", 1, "s") + "z = f32[] constant(0)\n" +
         "bad = f32[2] select-and-scatter(t, s, z), window={size=1}, select=lt, scatter=add",
     "(select-and-scatter): operand must be an array"},
    {"SelectAndScatterSourceNotArray",
     kF4 + "z = f32[] constant(0)\nt = (f32[4]) tuple(p)\n" +
         "bad = f32[4] select-and-scatter(p, t, z), window={size=2 stride=2}, select=lt, scatter=add",
     "source must be an array"},
    {"SelectAndScatterInitType",
     kF4 + P("f32[2]", 1, "s") + "zi = s32[] constant(0)\n" +
         "bad = f32[4] select-and-scatter(p, s, zi), window={size=2 stride=2}, select=lt, scatter=add",
     "select-and-scatter source/init types must match operand"},
    {"SelectAndScatterWindowRank",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2x2 stride=2x2}, select=lt, scatter=add",
     "window rank does not match operand"},
    {"SelectAndScatterDilation",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2 lhs_dilate=2}, select=lt, scatter=add",
     "select-and-scatter does not take dilations"},
    {"SelectAndScatterWindowPadding",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2 pad=-2000000000000_0}, select=lt, scatter=add",
     "window padding out of range"},
    {"SelectAndScatterSourceDims",
     kF4 + P("f32[3]", 1, "s") + "z = f32[] constant(0)\n" +
         "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2}, select=lt, scatter=add",
     "source f32[3] does not match the windowed operand dims {2}"},
    {"SelectAndScatterOneComputation",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2}, select=lt",
     "select-and-scatter needs 2 called computations, got 1"},
    {"SelectParameters",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2}, select=id, scatter=add",
     "select computation id takes 1 parameters, expected 2"},
    {"SelectResult",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2}, select=add, scatter=add",
     "select computation must return pred[]"},
    {"ScatterParameters",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2}, select=lt, scatter=id",
     "scatter computation id takes 1 parameters, expected 2"},
    {"ScatterResult",
     kSasIn + "bad = f32[4] select-and-scatter(p, s, z), window={size=2 stride=2}, select=lt, scatter=lt",
     "scatter computation must return the operand type"},
    {"SortNoOperands", "bad = f32[4] sort(), dimensions={0}, to_apply=lt",
     "sort needs operands"},
    {"SortOperandNotArray", kTuple + "bad = f32[2] sort(t), dimensions={0}, to_apply=lt",
     "sort operand must be an array"},
    {"SortOperandsDiffer",
     kF4 + P("s32[5]", 1, "q") + "bad = (f32[4], s32[5]) sort(p, q), dimensions={0}, to_apply=lt",
     "sort operands differ in dims"},
    {"SortDimension", kF4 + "bad = f32[4] sort(p), dimensions={1}, to_apply=lt",
     "sort needs one dimension in range"},
    {"SortNoComparator", kF4 + "bad = f32[4] sort(p), dimensions={0}",
     "sort needs 1 called computations, got 0"},
    {"SortComparatorParameters",
     kF4 + P("s32[4]", 1, "q") + "bad = (f32[4], s32[4]) sort(p, q), dimensions={0}, to_apply=lt",
     "comparator computation lt takes 2 parameters, expected 4"},
    {"SortComparatorResult", kF4 + "bad = f32[4] sort(p), dimensions={0}, to_apply=add",
     "sort comparator must return pred[]"},
};
INSTANTIATE_TEST_SUITE_P(Reductions, OpRejectionTest,
                         ::testing::ValuesIn(kReductions), CaseName);

const std::string kF = P("f32[]", 0, "p");
const std::string kCond = P("s32[]", 0, "s") + P("f32[]", 1, "x");
const std::string kToken = "tk = token[] after-all()\n";
const Case kControl[] = {
    {"RngParameters", kF + P("s32[]", 1, "q") + "bad = f32[4] rng(p, q), distribution=rng_uniform",
     "rng parameters must be two scalars of one type"},
    {"RngResultType", kF + "bad = s32[4] rng(p, p), distribution=rng_uniform",
     "rng result type must match its parameters"},
    {"RngNormalOfInt", P("s32[]", 0, "q") + "bad = s32[4] rng(q, q), distribution=rng_normal",
     "rng_normal needs a floating-point type"},
    {"RngOfPred", P("pred[]", 0, "q") + "bad = pred[4] rng(q, q), distribution=rng_uniform",
     "rng needs a numeric type"},
    {"CallNoComputation", kF + "bad = f32[] call(p)",
     "call needs 1 called computations, got 0"},
    {"CallArgumentCount", kF + "bad = f32[] call(p, p), to_apply=id",
     "call passes 2 arguments to id which takes 1"},
    {"CallArgumentShape", P("s32[]", 0, "q") + "bad = f32[] call(q), to_apply=id",
     "call argument 0 s32[] does not match parameter of id"},
    {"WhileNoBody", kF + "bad = f32[] while(p), condition=isneg",
     "while needs 2 called computations, got 1"},
    {"WhileConditionParameters", kF + "bad = f32[] while(p), condition=lt, body=id",
     "while condition lt must take one parameter of f32[]"},
    {"WhileBodyParameter", kF + "bad = f32[] while(p), condition=isneg, body=idi",
     "while body idi must take one parameter of f32[]"},
    {"WhileConditionResult", kF + "bad = f32[] while(p), condition=id, body=id",
     "while condition id must return pred[]"},
    {"WhileBodyResult", kF + "bad = f32[] while(p), condition=isneg, body=isneg",
     "while body isneg returns pred[], expected f32[]"},
    {"ConditionalOperandCount",
     kCond + "bad = f32[] conditional(s, x), branch_computations={id, id}",
     "conditional needs one operand per branch plus the selector"},
    {"ConditionalNoBranches", kCond + "bad = f32[] conditional(s)",
     "conditional needs one operand per branch plus the selector"},
    {"ConditionalSelectorType",
     kCond + "bad = f32[] conditional(x, x, x), branch_computations={id, id}",
     "conditional selector must be pred[] or s32[]"},
    {"ConditionalPredThreeBranches",
     kCond + P("pred[]", 2, "q") +
         "bad = f32[] conditional(q, x, x, x), branch_computations={id, id, id}",
     "a pred selector needs exactly two branches"},
    {"ConditionalBranchParameter",
     kCond + "bad = f32[] conditional(s, x, s), branch_computations={id, id}",
     "branch id must take one parameter of s32[]"},
    {"ConditionalBranchResults",
     kCond + "bad = f32[] conditional(s, x, x), branch_computations={id, isneg}",
     "conditional branches return different shapes"},
    {"InfeedOfArray", kF + "bad = (f32[2], token[]) infeed(p)",
     "infeed takes a token"},
    {"InfeedResult", kToken + "bad = f32[2] infeed(tk)",
     "infeed result must be (data, token[])"},
    {"OutfeedWithoutToken", kF + "bad = token[] outfeed(p, p)",
     "outfeed's second operand must be a token"},
    {"AfterAllOfArray", kF + "bad = token[] after-all(p)", "after-all takes tokens"},
    {"AllReduceNoOperands", "bad = f32[] all-reduce(), to_apply=add",
     "all-reduce needs operands"},
    {"AllReduceOperandNotArray", kTuple + "bad = f32[2] all-reduce(t), to_apply=add",
     "all-reduce operand must be an array"},
    {"AllReduceTypes",
     kF4 + P("s32[4]", 1, "q") + "bad = (f32[4], s32[4]) all-reduce(p, q), to_apply=add",
     "all-reduce operands must share an element type"},
    {"AllReduceNoReducer", kF4 + "bad = f32[4] all-reduce(p)",
     "(all-reduce): needs one to_apply computation"},
};
INSTANTIATE_TEST_SUITE_P(Control, OpRejectionTest,
                         ::testing::ValuesIn(kControl), CaseName);

// Extents near the element limit, where int64 arithmetic in the rules used
// to wrap and give a wrong (often accepted) shape.
const std::string kHuge = P("f32[1099511627776]", 0, "p") + "z = f32[] constant(0)\n";
const Case kOverflow[] = {
    // 2^40 + (2^40 - 1) * 2^40 wrapped to 0, so f32[0] was accepted.
    {"PadInteriorOverflow", kHuge + "bad = f32[0] pad(p, z), padding=0_0_1099511627776",
     "padding makes dimension 0 exceed 1099511627776"},
    // std::abs(INT64_MIN) is INT64_MIN, which passed the range check.
    {"PadEdgeInt64Min",
     P("f32[2]", 0, "p") +
         "z = f32[] constant(0)\nbad = f32[2] pad(p, z), padding=-9223372036854775808_0",
     "padding out of range"},
    {"PadResultElementCount",
     P("f32[1048576,1048576]", 0, "p") + "z = f32[] constant(0)\n" +
         "bad = f32[1] pad(p, z), padding=0_1048576x0_1048576",
     "result element count of f32[2097152,2097152] overflows"},
    // (2^40 - 1) * 2^24 wrapped negative, so the window gave f32[0].
    {"WindowBaseDilationOverflow",
     kHuge + "bad = f32[0] reduce-window(p, z), window={size=1 lhs_dilate=16777216}, to_apply=add",
     "window output dimension exceeds 1099511627776"},
    // (limit - start + stride - 1) wrapped, so [0:4:INT64_MAX] gave f32[0].
    {"SliceHugeStride",
     kF4 + "bad = f32[0] slice(p), slice={[0:4:9223372036854775807]}",
     "declared shape f32[0] but operands give f32[1]"},
    // 4 * 2^62 wrapped to 0 and matched an input with 0 features.
    {"ConvolutionFeatureGroupOverflow",
     "i = f32[1,4,4,0] parameter(0)\nk = f32[2,2,4,0] parameter(1)\n"
     "bad = f32[1,3,3,0] convolution(i, k), window={size=2x2}, "
     "dim_labels=b01f_01io->b01f, feature_group_count=4611686018427387904",
     "input feature size 0 != kernel input feature size 4 * feature_group_count "
     "4611686018427387904"},
    {"ConcatenateLength", kHuge + "bad = f32[1] concatenate(p, p), dimensions={0}",
     "concatenate dimension 0 exceeds 1099511627776"},
    {"DotResultElementCount",
     P("f32[1048576,1]", 0, "a") + P("f32[1,2097152]", 1, "b") +
         "bad = f32[1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "result element count of f32[1048576,2097152] overflows"},
};
INSTANTIATE_TEST_SUITE_P(Overflow, OpRejectionTest,
                         ::testing::ValuesIn(kOverflow), CaseName);

// The Builder keeps inferred shapes, so an over-limit result must fail there
// rather than wait for the verifier.
TEST(ShapeInferenceTest, BuilderRejectsOverLimitResults) {
  Module m("m");
  Builder b(&m, "e");
  Instruction* x = b.Parameter(0, Shape(ElementType::kF32, {1 << 20, 1}), "x");
  Instruction* y = b.Parameter(1, Shape(ElementType::kF32, {1, 1 << 21}), "y");
  EXPECT_EQ(b.Dot(x, y, DotDims{{}, {}, {1}, {0}}), nullptr);
  EXPECT_NE(b.status().message().find(
                "dot: result element count of f32[1048576,2097152] overflows"),
            std::string::npos)
      << b.status();
}

// The parser and ModuleFromProto validate every declared shape, so an
// invalid declared shape reaches shape inference only from the Builder.
TEST(ShapeInferenceTest, BuilderRejectsInvalidDeclaredShapes) {
  struct {
    Opcode op;
    Shape declared;
    const char* problem;
  } cases[] = {
      {Opcode::kParameter, Shape(ElementType::kF32, {-1}),
       "parameter: negative dimension in f32[-1]"},
      {Opcode::kCustomCall, Shape(ElementType::kF32, {1 << 30, 1 << 30, 1 << 30}),
       "custom-call: element count of f32[1073741824,1073741824,1073741824] "
       "overflows"},
      {Opcode::kInfeed,
       Shape::Tuple({Shape(ElementType::kF32, {-2}), Shape::Token()}),
       "infeed: negative dimension in f32[-2]"},
      // Used to pass: (-2) * (-2) elements equals the operand's 4.
      {Opcode::kReshape, Shape(ElementType::kF32, {-2, -2}),
       "reshape: negative dimension in f32[-2,-2]"},
  };
  for (const auto& c : cases) {
    Module m("m");
    Builder b(&m, "e");
    std::vector<Instruction*> operands;
    if (c.op == Opcode::kInfeed) operands.push_back(b.AddOp(Opcode::kAfterAll, {}));
    if (c.op == Opcode::kReshape) {
      operands.push_back(b.Parameter(0, Shape(ElementType::kF32, {4}), "x"));
    }
    Attributes attrs;
    EXPECT_EQ(b.AddOp(c.op, operands, attrs, {}, c.declared), nullptr);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find(c.problem), std::string::npos)
        << b.status();
  }
}

}  // namespace
}  // namespace kiln::ir
