#include "base/half.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(HalfTest, FromFloatRoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(bf16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bf16(0.1f)), 0.10009765625f);
  EXPECT_EQ(static_cast<float>(f16(0.1f)), 0.0999755859375f);
  // 1 + 2^-11 is halfway between f16 neighbours 1 and 1 + 2^-10: even wins.
  EXPECT_EQ(static_cast<float>(f16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(static_cast<float>(f16(65520.0f)), INFINITY);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(NAN))));
}

// From double, one rounding: a value just above a halfway point rounds up,
// where a detour through float (which rounds it onto the halfway point)
// would round to even.
TEST(HalfTest, FromDoubleRoundsOnce) {
  const double just_above = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(static_cast<float>(f16(just_above)), 1.0f + 0x1p-10f);
  EXPECT_EQ(static_cast<float>(f16(static_cast<float>(just_above))), 1.0f);
  const double bf_above = 1.0 + 0x1p-8 + 0x1p-40;
  EXPECT_EQ(static_cast<float>(bf16(bf_above)), 1.0f + 0x1p-7f);
  EXPECT_EQ(static_cast<float>(bf16(1.0 + 0x1p-8)), 1.0f);  // exact tie: even
  EXPECT_EQ(static_cast<float>(bf16(-bf_above)), -(1.0f + 0x1p-7f));
  EXPECT_EQ(static_cast<float>(f16(1e-300)), 0.0f);
  EXPECT_EQ(static_cast<float>(f16(1e300)), INFINITY);
  EXPECT_EQ(static_cast<float>(bf16(0.1)), 0.10009765625f);
}

}  // namespace
}  // namespace kiln
