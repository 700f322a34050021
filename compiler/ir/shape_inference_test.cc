// One case per rejection in shape_inference.cc, each reached through the
// verifier so the message must name the instruction as well as the problem.
// The text parser checks only syntax and declared shapes, so most cases are
// text; what the parser cannot spell (a constant whose literal disagrees with
// its shape, dim_labels out of range) is parsed valid and then mutated.
#include "compiler/ir/shape_inference.h"

#include <string>

#include "compiler/ir/builder.h"
#include "compiler/ir/rejection_test_util.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

using testing_util::CaseName;
using testing_util::ExpectRejection;
using Case = testing_util::RejectionCase;

class ShapeRejectionTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShapeRejectionTest, VerifierNamesInstructionAndProblem) {
  ExpectRejection(GetParam());
}

// The operands every case of one op family starts from.
constexpr char kF2[] = "p = f32[2] parameter(0)\n";
constexpr char kTup[] = "p = f32[2] parameter(0)\nt = (f32[2]) tuple(p)\n";

const Case kElementwise[] = {
    {"Arity", std::string(kF2) + "bad = f32[2] add(p)",
     "add takes 2 operands, got 1"},
    {"OperandNotArray", std::string(kTup) + "bad = f32[2] negate(t)",
     "(negate): operand must be an array, got (f32[2])"},
    {"FloatOnlyOp", "s = s32[2] parameter(0)\nbad = s32[2] exponential(s)",
     "exponential does not accept element type s32"},
    {"IsFiniteOfInt", "s = s32[2] parameter(0)\nbad = pred[2] is-finite(s)",
     "is-finite does not accept element type s32"},
    {"ArithmeticOfPred", "q = pred[2] parameter(0)\nbad = pred[2] add(q, q)",
     "add does not accept element type pred"},
    {"BitwiseOfFloat", std::string(kF2) + "bad = f32[2] and(p, p)",
     "and does not accept element type f32"},
    {"ShiftOfPred",
     "q = pred[2] parameter(0)\nbad = pred[2] shift-left(q, q)",
     "shift-left does not accept element type pred"},
    {"ConvertToTuple", std::string(kF2) + "bad = (f32[2]) convert(p)",
     "convert to a non-array type"},
    {"BitcastToPred", "q = u8[2] parameter(0)\nbad = pred[2] bitcast-convert(q)",
     "bitcast-convert from u8 to pred: a pred's bits are not defined"},
    {"SelectPredicateType", std::string(kF2) + "bad = f32[2] select(p, p, p)",
     "select predicate must be pred, got f32[2]"},
    {"SelectBranchesDiffer",
     "q = pred[2] parameter(0)\na = f32[2] parameter(1)\n"
     "b = f32[3] parameter(2)\nbad = f32[2] select(q, a, b)",
     "select branches differ: f32[2] vs f32[3]"},
    {"SelectPredicateDims",
     "q = pred[3] parameter(0)\na = f32[2] parameter(1)\n"
     "bad = f32[2] select(q, a, a)",
     "select predicate pred[3] does not match f32[2]"},
    {"ClampBound",
     "lo = s32[] parameter(0)\nx = f32[2] parameter(1)\n"
     "bad = f32[2] clamp(lo, x, x)",
     "clamp bound s32[] does not match operand f32[2]"},
    {"OperandShapesDiffer",
     "a = f32[2] parameter(0)\nb = f32[3] parameter(1)\nbad = f32[2] add(a, b)",
     "operand shapes differ: f32[2] vs f32[3]"},
};
INSTANTIATE_TEST_SUITE_P(Elementwise, ShapeRejectionTest,
                         ::testing::ValuesIn(kElementwise), CaseName);

constexpr char kDotOperands[] =
    "a = f32[2,3] parameter(0)\nb = f32[3,4] parameter(1)\n";
const Case kDot[] = {
    {"LhsNotArray",
     std::string(kDotOperands) + "t = (f32[2,3]) tuple(a)\n"
     "bad = f32[2,4] dot(t, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "dot lhs must be an array"},
    {"RhsNotArray",
     std::string(kDotOperands) + "t = (f32[3,4]) tuple(b)\n"
     "bad = f32[2,4] dot(a, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "dot rhs must be an array"},
    {"TypesDiffer",
     "a = f32[2,3] parameter(0)\nb = s32[3,4] parameter(1)\n"
     "bad = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "dot operand types differ: f32[2,3] vs s32[3,4]"},
    {"LhsDimOutOfRange",
     std::string(kDotOperands) +
         "bad = f32[2,4] dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}",
     "dot lhs dims {2} has dimension 2 out of range for rank 2"},
    {"LhsDimRepeated",
     std::string(kDotOperands) +
         "bad = f32[2,4] dot(a, b), lhs_batch_dims={1}, rhs_batch_dims={0},"
         " lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "dot lhs dims {1,1} repeats dimension 1"},
    {"RhsDimOutOfRange",
     std::string(kDotOperands) +
         "bad = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={5}",
     "dot rhs dims {5} has dimension 5 out of range for rank 2"},
    {"DimCountsDiffer",
     std::string(kDotOperands) + "bad = f32[2,4] dot(a, b), lhs_contracting_dims={1}",
     "dot batch/contracting dimension counts differ"},
    {"BatchSizesDiffer",
     "a = f32[2,3,4] parameter(0)\nb = f32[5,4,6] parameter(1)\n"
     "bad = f32[2,3,6] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},"
     " lhs_contracting_dims={2}, rhs_contracting_dims={1}",
     "dot batch dimension sizes differ: f32[2,3,4] vs f32[5,4,6]"},
    {"ContractingSizesDiffer",
     "a = f32[2,3] parameter(0)\nb = f32[4,4] parameter(1)\n"
     "bad = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "dot contracting dimension sizes differ: f32[2,3] vs f32[4,4]"},
};
INSTANTIATE_TEST_SUITE_P(Dot, ShapeRejectionTest, ::testing::ValuesIn(kDot),
                         CaseName);

// A valid NHWC convolution; cases change one thing.
std::string Conv(absl::string_view input, absl::string_view kernel,
                 absl::string_view attrs, absl::string_view operands = "i, k") {
  return absl::StrCat("i = ", input, " parameter(0)\nk = ", kernel,
                      " parameter(1)\nti = (f32[1,4,4,1]) tuple(i)\n",
                      "bad = f32[1,3,3,3] convolution(", operands, "), ", attrs);
}
constexpr char kIn[] = "f32[1,4,4,1]";
constexpr char kKernel[] = "f32[2,2,1,3]";
constexpr char kLabels[] = "dim_labels=b01f_01io->b01f";
const std::string kConvAttrs =
    absl::StrCat("window={size=2x2}, ", kLabels);

const Case kConvolution[] = {
    {"InputNotArray", Conv(kIn, kKernel, kConvAttrs, "ti, k"),
     "convolution input must be an array"},
    {"KernelNotArray", Conv(kIn, kKernel, kConvAttrs, "i, ti"),
     "convolution kernel must be an array"},
    {"TypesDiffer", Conv(kIn, "s32[2,2,1,3]", kConvAttrs),
     "convolution input and kernel types differ"},
    {"RankVsDimLabels", Conv("f32[1,4,4]", kKernel, kConvAttrs),
     "convolution dim_labels have 2 spatial dims but operands are f32[1,4,4] "
     "and f32[2,2,1,3]"},
    {"InputLabelOutOfRange", Conv(kIn, kKernel, kConvAttrs),
     "input dim_labels {1,2,9,3} has dimension 9 out of range for rank 4",
     [](Instruction& i) { i.mutable_attrs().conv.input_batch = 9; }},
    {"KernelLabelRepeated", Conv(kIn, kKernel, kConvAttrs),
     "kernel dim_labels {0,1,2,2} repeats dimension 2",
     [](Instruction& i) { i.mutable_attrs().conv.kernel_output_feature = 2; }},
    {"OutputLabelOutOfRange", Conv(kIn, kKernel, kConvAttrs),
     "output dim_labels {1,7,0,3} has dimension 7 out of range for rank 4",
     [](Instruction& i) { i.mutable_attrs().conv.output_spatial = {1, 7}; }},
    {"GroupCountZero",
     Conv(kIn, kKernel, kConvAttrs + ", feature_group_count=0"),
     "group counts must be >= 1"},
    {"BothGroupCounts",
     Conv(kIn, kKernel,
          kConvAttrs + ", feature_group_count=2, batch_group_count=2"),
     "feature_group_count and batch_group_count both > 1"},
    {"InputFeatures", Conv("f32[1,4,4,2]", kKernel, kConvAttrs),
     "input feature size 2 != kernel input feature size 1 * "
     "feature_group_count 1"},
    {"OutputFeaturesIndivisible",
     Conv("f32[1,4,4,2]", kKernel, kConvAttrs + ", feature_group_count=2"),
     "kernel output features not divisible by the group count"},
    {"BatchIndivisible",
     Conv(kIn, "f32[2,2,1,2]", kConvAttrs + ", batch_group_count=2"),
     "input batch not divisible by batch_group_count"},
    {"WindowDimCount",
     Conv(kIn, kKernel, absl::StrCat("window={size=2}, ", kLabels)),
     "window has 1 dims, convolution has 2 spatial dims"},
    {"WindowVsKernel",
     Conv(kIn, kKernel, absl::StrCat("window={size=3x3}, ", kLabels)),
     "window size 3 does not match kernel spatial size 2"},
    {"WindowStrideZero",
     Conv(kIn, kKernel,
          absl::StrCat("window={size=2x2 stride=0x1}, ", kLabels)),
     "window size, stride and dilations must be >= 1"},
    {"WindowPaddingOutOfRange",
     Conv(kIn, kKernel,
          absl::StrCat("window={size=2x2 pad=0_2000000000000x0_0}, ", kLabels)),
     "window padding out of range"},
};
INSTANTIATE_TEST_SUITE_P(Convolution, ShapeRejectionTest,
                         ::testing::ValuesIn(kConvolution), CaseName);

constexpr char kGatherOperands[] =
    "a = f32[3,4] parameter(0)\ni = s32[2,1] parameter(1)\n"
    "ta = (f32[3,4]) tuple(a)\nfi = f32[2,1] parameter(2)\n";
std::string Gather(absl::string_view operands, absl::string_view offset,
                   absl::string_view collapsed, absl::string_view start_map,
                   absl::string_view ivd, absl::string_view sizes) {
  return absl::StrCat(kGatherOperands, "bad = f32[2,4] gather(", operands,
                      "), offset_dims={", offset, "}, collapsed_slice_dims={",
                      collapsed, "}, start_index_map={", start_map,
                      "}, index_vector_dim=", ivd, ", slice_sizes={", sizes,
                      "}");
}

const Case kGather[] = {
    {"OperandNotArray", Gather("ta, i", "1", "0", "0", "1", "1,4"),
     "gather operand must be an array"},
    {"IndicesNotInteger", Gather("a, fi", "1", "0", "0", "1", "1,4"),
     "gather indices must be an integer array"},
    {"IndexVectorDim", Gather("a, i", "1", "0", "0", "3", "1,4"),
     "gather index_vector_dim out of range"},
    {"StartIndexMapLength", Gather("a, i", "1", "0", "0,1", "1", "1,4"),
     "gather start_index_map has 2 entries, index vectors have 1"},
    {"StartIndexMapRange", Gather("a, i", "1", "0", "5", "1", "1,4"),
     "start_index_map {5} has dimension 5 out of range for rank 2"},
    {"CollapsedRange", Gather("a, i", "1", "2", "0", "1", "1,4"),
     "collapsed_slice_dims {2} has dimension 2 out of range for rank 2"},
    {"SliceSizesLength", Gather("a, i", "1", "0", "0", "1", "1"),
     "gather slice_sizes has 1 entries for operand rank 2"},
    {"SliceSizeRange", Gather("a, i", "1", "0", "0", "1", "1,5"),
     "gather slice size 5 out of range for dimension 1 of f32[3,4]"},
    {"CollapsedSliceSize", Gather("a, i", "1", "0", "0", "1", "2,4"),
     "collapsed slice dimension 0 has slice size 2"},
    {"OffsetDimsLength", Gather("a, i", "", "0", "0", "1", "1,4"),
     "gather offset_dims has 0 entries, expected 1"},
    {"OffsetDimsRange", Gather("a, i", "2", "0", "0", "1", "1,4"),
     "offset_dims {2} has dimension 2 out of range for rank 2"},
    {"OffsetDimsUnsorted", Gather("a, i", "2,1", "", "0", "1", "1,4"),
     "gather offset_dims must be sorted"},
};
INSTANTIATE_TEST_SUITE_P(Gather, ShapeRejectionTest, ::testing::ValuesIn(kGather),
                         CaseName);

std::string Scatter(absl::string_view indices, absl::string_view updates,
                    absl::string_view attrs,
                    absl::string_view operands = "a, i, u") {
  return absl::StrCat(
      "a = f32[3,4] parameter(0)\ni = ", indices, " parameter(1)\nu = ",
      updates, " parameter(2)\nta = (f32[3,4]) tuple(a)\n",
      "bad = f32[3,4] scatter(", operands, "), ", attrs);
}
std::string ScatterDims(absl::string_view window, absl::string_view inserted,
                        absl::string_view to_operand, absl::string_view ivd) {
  return absl::StrCat("update_window_dims={", window,
                      "}, inserted_window_dims={", inserted,
                      "}, scatter_dims_to_operand_dims={", to_operand,
                      "}, index_vector_dim=", ivd);
}
constexpr char kIdx[] = "s32[2,1]";
constexpr char kUpd[] = "f32[2,4]";
const std::string kScatterAttrs = ScatterDims("1", "0", "0", "1") + ", to_apply=add";

const Case kScatter[] = {
    {"OperandNotArray", Scatter(kIdx, kUpd, kScatterAttrs, "ta, i, u"),
     "scatter operand must be an array"},
    {"UpdatesNotArray", Scatter(kIdx, kUpd, kScatterAttrs, "a, i, ta"),
     "scatter updates must be an array"},
    {"IndicesNotInteger", Scatter("f32[2,1]", kUpd, kScatterAttrs),
     "scatter indices must be an integer array"},
    {"UpdatesType", Scatter(kIdx, "s32[2,4]", kScatterAttrs),
     "scatter updates type differs from operand"},
    {"IndexVectorDim",
     Scatter(kIdx, kUpd, ScatterDims("1", "0", "0", "3") + ", to_apply=add"),
     "scatter index_vector_dim out of range"},
    {"ToOperandLength",
     Scatter(kIdx, kUpd, ScatterDims("1", "0", "0,1", "1") + ", to_apply=add"),
     "scatter_dims_to_operand_dims does not match index vectors"},
    {"ToOperandRange",
     Scatter(kIdx, kUpd, ScatterDims("1", "0", "7", "1") + ", to_apply=add"),
     "scatter_dims_to_operand_dims {7} has dimension 7 out of range for rank 2"},
    {"InsertedRange",
     Scatter(kIdx, kUpd, ScatterDims("1", "2", "0", "1") + ", to_apply=add"),
     "inserted_window_dims {2} has dimension 2 out of range for rank 2"},
    {"UpdateWindowRange",
     Scatter(kIdx, kUpd, ScatterDims("2", "0", "0", "1") + ", to_apply=add"),
     "update_window_dims {2} has dimension 2 out of range for rank 2"},
    {"UpdateWindowUnsorted",
     Scatter(kIdx, "f32[2,3,4]", ScatterDims("2,1", "", "0", "1") + ", to_apply=add"),
     "update_window_dims must be sorted"},
    {"WindowDimsVsRank",
     Scatter(kIdx, kUpd, ScatterDims("1", "", "0", "1") + ", to_apply=add"),
     "update_window_dims + inserted_window_dims must equal the operand rank"},
    {"UpdatesRank", Scatter(kIdx, "f32[2,4,1]", kScatterAttrs),
     "scatter updates rank 3 does not match indices and window dims"},
    {"WindowLargerThanOperand", Scatter(kIdx, "f32[2,5]", kScatterAttrs),
     "scatter update window larger than operand"},
    {"ScatterDimsVsIndices", Scatter(kIdx, "f32[3,4]", kScatterAttrs),
     "scatter updates scatter dims do not match indices"},
    {"NoReducer", Scatter(kIdx, kUpd, ScatterDims("1", "0", "0", "1")),
     "(scatter): needs one to_apply computation"},
    {"ReducerType",
     Scatter(kIdx, kUpd, ScatterDims("1", "0", "0", "1") + ", to_apply=addi"),
     "reducer computation addi parameter 0 must be f32[]"},
};
INSTANTIATE_TEST_SUITE_P(Scatter, ShapeRejectionTest,
                         ::testing::ValuesIn(kScatter), CaseName);

}  // namespace
}  // namespace kiln::ir
