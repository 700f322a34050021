#include "compiler/ir/verifier.h"

#include "compiler/ir/hlo_parser.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

// Parses `text` and returns the verifier's message ("" when it passes).
std::string VerifyText(absl::string_view text) {
  auto m = ParseModule(text);
  if (!m.ok()) return "parse: " + std::string(m.status().message());
  absl::Status st = Verify(**m);
  return st.ok() ? "" : std::string(st.message());
}

void ExpectRejected(absl::string_view text, const std::string& instr,
                    const std::string& what) {
  std::string msg = VerifyText(text);
  ASSERT_FALSE(msg.empty()) << "accepted:\n" << text;
  EXPECT_NE(msg.find(instr), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(VerifierTest, AcceptsWellFormed) {
  EXPECT_EQ(VerifyText("ENTRY e {\n a = f32[2] parameter(0)\n ROOT b = f32[2] add(a, a)\n}"), "");
}

TEST(VerifierTest, WrongArity) {
  ExpectRejected("ENTRY e {\n a = f32[2] parameter(0)\n ROOT b = f32[2] add(a)\n}",
                 "instruction b", "takes 2 operands, got 1");
}

TEST(VerifierTest, ShapeMismatch) {
  ExpectRejected(
      "ENTRY e {\n a = f32[2] parameter(0)\n c = f32[3] parameter(1)\n ROOT b = f32[2] add(a, c)\n}",
      "instruction b", "operand shapes differ");
  ExpectRejected("ENTRY e {\n a = f32[2] parameter(0)\n ROOT b = f32[3] negate(a)\n}",
                 "instruction b", "declared shape f32[3] but operands give f32[2]");
}

TEST(VerifierTest, TypeNotAccepted) {
  ExpectRejected("ENTRY e {\n a = s32[2] parameter(0)\n ROOT b = s32[2] exponential(a)\n}",
                 "instruction b", "does not accept element type s32");
}

TEST(VerifierTest, UnknownComputation) {
  std::string msg = VerifyText(
      "ENTRY e {\n a = f32[2] parameter(0)\n z = f32[] constant(0)\n"
      " ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=nothere\n}");
  EXPECT_NE(msg.find("unknown computation %nothere"), std::string::npos) << msg;
}

TEST(VerifierTest, Cycle) {
  ExpectRejected(
      "ENTRY e {\n a = f32[2] add(b, b)\n b = f32[2] negate(a)\n ROOT c = f32[2] copy(b)\n}",
      "cycle", "instruction");
}

TEST(VerifierTest, RecursiveCall) {
  ExpectRejected(
      "f {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=f\n}\n"
      "ENTRY e {\n a = f32[] parameter(0)\n ROOT r = f32[] call(a), to_apply=f\n}",
      "computation f", "recursion");
}

TEST(VerifierTest, BadDimensionNumbers) {
  ExpectRejected(
      "ENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[3,4] parameter(1)\n"
      " ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n}",
      "instruction d", "out of range for rank 2");
  ExpectRejected(
      "ENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[4,4] parameter(1)\n"
      " ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}",
      "instruction d", "contracting dimension sizes differ");
  ExpectRejected(
      "ENTRY e {\n a = f32[2,3] parameter(0)\n ROOT t = f32[3,2] transpose(a), dimensions={0,0}\n}",
      "instruction t", "repeats dimension 0");
}

TEST(VerifierTest, OutOfRangeSlice) {
  ExpectRejected(
      "ENTRY e {\n a = f32[4] parameter(0)\n ROOT s = f32[3] slice(a), slice={[2:5]}\n}",
      "instruction s", "slice [2:5:1] out of range");
}

TEST(VerifierTest, ElementCountOverflow) {
  std::string msg = VerifyText(
      "ENTRY e {\n ROOT a = f32[1048576,1048576,1048576] parameter(0)\n}");
  EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
}

TEST(VerifierTest, ParameterGapsAndDuplicates) {
  ExpectRejected("ENTRY e {\n a = f32[] parameter(0)\n b = f32[] parameter(0)\n ROOT c = f32[] add(a, b)\n}",
                 "instruction b", "used twice");
  std::string msg = VerifyText(
      "ENTRY e {\n a = f32[] parameter(0)\n b = f32[] parameter(2)\n ROOT c = f32[] add(a, b)\n}");
  EXPECT_NE(msg.find("gaps"), std::string::npos) << msg;
}

TEST(VerifierTest, ReducerSignature) {
  ExpectRejected(
      "bad {\n x = f32[] parameter(0)\n ROOT n = f32[] negate(x)\n}\n"
      "ENTRY e {\n a = f32[4] parameter(0)\n z = f32[] constant(0)\n"
      " ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=bad\n}",
      "instruction r", "takes 1 parameters, expected 2");
}

TEST(VerifierTest, WhileBodyShape) {
  ExpectRejected(
      "c {\n p = f32[] parameter(0)\n ROOT t = pred[] constant(true)\n}\n"
      "b {\n p = f32[] parameter(0)\n ROOT t = s32[] constant(1)\n}\n"
      "ENTRY e {\n a = f32[] parameter(0)\n ROOT w = f32[] while(a), condition=c, body=b\n}",
      "instruction w", "while body b returns s32[]");
}

TEST(VerifierTest, GatherSliceSizeTooBig) {
  ExpectRejected(
      "ENTRY e {\n a = f32[3,4] parameter(0)\n i = s32[2,1] parameter(1)\n"
      " ROOT g = f32[2,5] gather(a, i), offset_dims={1}, collapsed_slice_dims={0},"
      " start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}\n}",
      "instruction g", "slice size 5 out of range");
}

}  // namespace
}  // namespace kiln::ir
