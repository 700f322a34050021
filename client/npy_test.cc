#include "client/npy.h"

#include "gtest/gtest.h"

namespace kiln::client {
namespace {

TEST(NpyTest, RoundTripEveryType) {
  for (ir::ElementType t : {ir::ElementType::kPred, ir::ElementType::kS8,
                            ir::ElementType::kS32, ir::ElementType::kS64,
                            ir::ElementType::kU8, ir::ElementType::kU32,
                            ir::ElementType::kF16, ir::ElementType::kF32,
                            ir::ElementType::kF64}) {
    ir::Literal lit = ir::Literal::FromVector<double>(t, {2, 3}, {1, 0, 3, 4, 1, 6});
    auto bytes = EncodeNpy(lit);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ((bytes->size() - lit.bytes().size()) % 64, 0u);
    auto back = ParseNpy(*bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, lit) << ir::ElementTypeName(t);
  }
}

TEST(NpyTest, Bf16WritesFloat32AndReadsBack) {
  ir::Literal lit = ir::Literal::FromVector<float>(ir::ElementType::kBF16, {2}, {1.5f, -3.0f});
  auto bytes = EncodeNpy(lit);
  ASSERT_TRUE(bytes.ok());
  auto back = ParseNpy(*bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shape().ToString(), "f32[2]");
  EXPECT_EQ(back->data<float>()[1], -3.0f);
  auto adapted = AdaptToParameter(*back, ir::Shape(ir::ElementType::kBF16, {2}));
  ASSERT_TRUE(adapted.ok());
  EXPECT_EQ(*adapted, lit);
}

TEST(NpyTest, RejectsBadFiles) {
  EXPECT_FALSE(ParseNpy("not numpy").ok());
  ir::Literal lit = ir::Literal::FromVector<float>(ir::ElementType::kF32, {4}, {1, 2, 3, 4});
  std::string bytes = *EncodeNpy(lit);
  auto truncated = ParseNpy(bytes.substr(0, bytes.size() - 4));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("needs 16"), std::string::npos);
  std::string big_endian = bytes;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  EXPECT_FALSE(ParseNpy(big_endian).ok());
}

// numpy saves a transposed view in Fortran order: the first index varies
// fastest in the file. The literal holds the same array in row-major order.
TEST(NpyTest, FortranOrderIsReadIntoRowMajor) {
  ir::Literal lit = ir::Literal::FromVector<int64_t>(ir::ElementType::kS32, {2, 3, 2},
                                                     {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  std::string bytes = *EncodeNpy(lit);
  bytes.replace(bytes.find("'fortran_order': False"), 22, "'fortran_order': True ");
  // The data in column-major order: element (i, j, k) at i + 2 j + 6 k.
  const size_t data = bytes.size() - 48;
  int32_t* words = reinterpret_cast<int32_t*>(bytes.data() + data);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 2; ++k) words[i + 2 * j + 6 * k] = lit.data<int32_t>()[i * 6 + j * 2 + k];
    }
  }
  auto back = ParseNpy(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, lit);
  bytes.replace(bytes.find("'fortran_order': True "), 22, "'fortran_order': Maybe");
  EXPECT_FALSE(ParseNpy(bytes).ok());
}

TEST(NpyTest, AdaptChecksShapeAndType) {
  ir::Literal lit = ir::Literal::FromVector<float>(ir::ElementType::kF32, {4}, {1, 2, 3, 4});
  EXPECT_FALSE(AdaptToParameter(lit, ir::Shape(ir::ElementType::kF32, {2, 2})).ok());
  EXPECT_FALSE(AdaptToParameter(lit, ir::Shape(ir::ElementType::kS32, {4})).ok());
  EXPECT_TRUE(AdaptToParameter(lit, ir::Shape(ir::ElementType::kF32, {4})).ok());
}

}  // namespace
}  // namespace kiln::client
