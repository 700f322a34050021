// What a client cannot make the compiler do: recurse without bound (deep
// call chains, nested tuples, high ranks), read a constant that has no data,
// or allocate what a header claims before the data is there.
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;

absl::Status ParseAndVerify(const std::string& text) {
  auto m = ParseModule(text);
  if (!m.ok()) return m.status();
  return Verify(**m);
}

// c0 calls c1 calls ... c(n-1), each through `call`.
std::string CallChain(int n) {
  std::string text = "HloModule chain\n";
  text += absl::StrCat("c", n - 1, " {\n  x = f32[] parameter(0)\n  ROOT y = f32[] negate(x)\n}\n");
  for (int i = n - 2; i >= 0; --i) {
    absl::StrAppend(&text, "c", i, " {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), to_apply=c",
                    i + 1, "\n}\n");
  }
  text += "ENTRY main {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), to_apply=c0\n}\n";
  return text;
}

TEST(LimitsTest, CallChainsAreBounded) {
  // The entry adds one level: kMaxCallDepth levels in all is fine.
  EXPECT_TRUE(ParseAndVerify(CallChain(kMaxCallDepth - 1)).ok());
  absl::Status deep = ParseAndVerify(CallChain(500));
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(deep.message(), HasSubstr("nested calls; at most 64 are allowed"));
}

TEST(LimitsTest, DeepTupleShapesAndHighRanksAreRefused) {
  std::string nested = "f32[]";
  for (int i = 0; i < 10000; ++i) nested = "(" + nested + ")";
  auto shape = ParseShape(nested);
  ASSERT_FALSE(shape.ok());
  EXPECT_THAT(shape.status().message(), HasSubstr("nested more than 32 deep"));

  std::string dims = "1";
  for (int i = 1; i < 100; ++i) dims += ",1";
  auto high = ParseShape("f32[" + dims + "]");
  ASSERT_FALSE(high.ok());
  EXPECT_THAT(high.status().message(), HasSubstr("rank 100 exceeds the limit of 64"));
  EXPECT_TRUE(ParseShape("f32[" + dims.substr(0, 2 * 64 - 1) + "]").ok());

  // The same through the wire form, whose nesting the sender chooses.
  v1::ShapeProto proto;
  v1::ShapeProto* at = &proto;
  for (int i = 0; i < 10000; ++i) {
    at->set_element_type(v1::TUPLE);
    at = at->add_tuple_shapes();
  }
  at->set_element_type(v1::F32);
  auto from_proto = ShapeFromProto(proto);
  ASSERT_FALSE(from_proto.ok());
  EXPECT_THAT(from_proto.status().message(), HasSubstr("nested more than 32 deep"));
  v1::ShapeProto wide;
  wide.set_element_type(v1::F32);
  for (int i = 0; i < 1000000; ++i) wide.add_dims(1);
  EXPECT_THAT(ShapeFromProto(wide).status().message(), HasSubstr("rank 1000000 exceeds"));
}

TEST(LimitsTest, TextConstantsAreCountedBeforeTheyAreAllocated) {
  // 2^40 elements declared, one given: refused without allocating 4 TiB.
  absl::Status huge = ParseAndVerify(
      "ENTRY e {\n ROOT c = f32[1048576,1048576] constant({1})\n}");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.message(), HasSubstr("constant has 1 values, f32[1048576,1048576] needs"));
  absl::Status extra = ParseAndVerify("ENTRY e {\n ROOT c = f32[2] constant({1, 2, 3})\n}");
  EXPECT_THAT(extra.message(), HasSubstr("more than 2 values"));
}

TEST(LimitsTest, AConstantWithoutItsDataIsRefused) {
  auto m = ParseModule("ENTRY e {\n ROOT c = f32[4] constant({1, 2, 3, 4})\n}");
  ASSERT_TRUE(m.ok());
  v1::ModuleProto proto = ModuleToProto(**m);
  // The literal left out of the wire form.
  proto.mutable_computations(0)->mutable_instructions(0)->clear_literal();
  auto missing = ModuleFromProto(proto);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("c: a constant needs its literal"));
  // A scalar constant whose literal was never filled in (its default shape
  // is f32[], with no bytes) is caught by the verifier.
  auto scalar = ParseModule("ENTRY e {\n ROOT c = f32[] constant(1)\n}");
  ASSERT_TRUE(scalar.ok());
  (*scalar)->entry()->root()->mutable_attrs().literal = Literal();
  absl::Status empty = Verify(**scalar);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.message(), HasSubstr("does not hold its data"));
}

}  // namespace
}  // namespace kiln::ir
