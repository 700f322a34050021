#include "compiler/ir/shape.h"

#include "base/half.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/literal.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

TEST(ShapeTest, ArrayBasics) {
  Shape s(ElementType::kF32, {2, 3});
  EXPECT_EQ(s.ElementCount(), 6);
  EXPECT_EQ(s.ByteSize(), 24);
  EXPECT_EQ(s.ToString(), "f32[2,3]");
  EXPECT_EQ(Shape::Scalar(ElementType::kPred).ToString(), "pred[]");
}

TEST(ShapeTest, TupleToString) {
  Shape t = Shape::Tuple({Shape(ElementType::kS32, {4}), Shape::Token()});
  EXPECT_EQ(t.ToString(), "(s32[4], token[])");
  EXPECT_EQ(t.ByteSize(), 16);
}

TEST(ShapeTest, FlattenedArraysAreDepthFirstWithoutTokens) {
  const Shape nested = Shape::Tuple(
      {Shape(ElementType::kS32, {4}),
       Shape::Tuple({Shape::Token(), Shape(ElementType::kF32, {2, 3})}),
       Shape::Scalar(ElementType::kPred)});
  const std::vector<Shape> arrays = FlattenedArrays(nested);
  ASSERT_EQ(arrays.size(), 3u);
  EXPECT_EQ(arrays[0].ToString(), "s32[4]");
  EXPECT_EQ(arrays[1].ToString(), "f32[2,3]");
  EXPECT_EQ(arrays[2].ToString(), "pred[]");
  EXPECT_EQ(FlattenedArrays(Shape(ElementType::kF32, {5})).size(), 1u);
  EXPECT_TRUE(FlattenedArrays(Shape::Token()).empty());
}

TEST(ShapeTest, ValidateRejectsOverflowAndNegative) {
  EXPECT_FALSE(ValidateShape(Shape(ElementType::kF32, {-1})).ok());
  absl::Status st =
      ValidateShape(Shape(ElementType::kF32, {1 << 30, 1 << 30, 1 << 30}));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("overflows"), std::string::npos);
}

// A tuple of arrays that are each within the element limit must not add
// up past int64 (2^21 arrays of 2^43 bytes are 2^64): its bytes together
// are bounded too.
TEST(ShapeTest, ValidateBoundsATuplesBytes) {
  const Shape huge(ElementType::kF64, {kMaxElements});
  EXPECT_TRUE(ValidateShape(huge).ok());
  EXPECT_TRUE(ValidateShape(Shape::Tuple({huge, huge})).ok());
  const absl::Status st = ValidateShape(Shape::Tuple({huge, huge, Shape(ElementType::kU8, {1})}));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("holds more than the limit"), std::string::npos) << st;
  EXPECT_FALSE(ValidateShape(Shape::Tuple({Shape::Tuple({huge, huge}), huge})).ok());
}

TEST(ShapeTest, ParseShapeWithLayoutAndTuple) {
  auto s = ParseShape("(f32[2,3]{1,0}, bf16[])");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ToString(), "(f32[2,3], bf16[])");
  EXPECT_FALSE(ParseShape("f33[2]").ok());
  EXPECT_FALSE(ParseShape("f32[?]").ok());
}

TEST(HalfTest, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1+2^-7: ties to even (1).
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even (1+2^-6).
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_EQ(static_cast<float>(bf16(-2.5f)), -2.5f);
}

TEST(HalfTest, F16Conversions) {
  EXPECT_EQ(static_cast<float>(f16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(f16(70000.0f))));
  EXPECT_EQ(static_cast<float>(f16(5.9604645e-8f)), 5.9604645e-8f);  // 2^-24
  EXPECT_EQ(f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(static_cast<float>(f16(0.1f)), 0.0999755859375f);
}

TEST(LiteralTest, TextForm) {
  Literal lit = Literal::FromVector<float>(ElementType::kF32, {2, 2},
                                          {1, 2.5f, -3, 0.1f});
  EXPECT_EQ(lit.ToText(), "{{1, 2.5}, {-3, 0.1}}");
  Literal p = Literal::FromVector<int>(ElementType::kPred, {2}, {1, 0});
  EXPECT_EQ(p.ToText(), "{true, false}");
}

TEST(LiteralTest, ConvertSaturatesAndMapsNanToZero) {
  EXPECT_EQ(ConvertValue<int8_t>(1000.0f), 127);
  EXPECT_EQ(ConvertValue<int8_t>(-1000.0f), -128);
  EXPECT_EQ(ConvertValue<int32_t>(std::nanf("")), 0);
  EXPECT_EQ(ConvertValue<uint8_t>(-3.0), 0);
  EXPECT_TRUE(ConvertValue<bool>(0.5f));
}

}  // namespace
}  // namespace kiln::ir
