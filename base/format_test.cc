#include "base/format.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(FormatShortestTest, ShortestTextThatReadsBack) {
  EXPECT_EQ(FormatShortest(10.0), "10");
  EXPECT_EQ(FormatShortest(40.0), "40");
  EXPECT_EQ(FormatShortest(0.1), "0.1");
  EXPECT_EQ(FormatShortest(1e-7), "1e-07");
  EXPECT_EQ(FormatShortest(-2.5), "-2.5");
  EXPECT_EQ(FormatShortest(0.0), "0");
  EXPECT_EQ(FormatShortest(-0.0), "-0");
  EXPECT_EQ(FormatShortest(0.1f), "0.1");
  EXPECT_EQ(FormatShortest(1.0f / 3), "0.33333334");
  EXPECT_EQ(FormatShortest(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FormatShortest(-std::numeric_limits<float>::infinity()), "-inf");
  EXPECT_EQ(FormatShortest(std::nan("")), "nan");
}

TEST(FormatShortestTest, EveryValueRoundTrips) {
  const double values[] = {1.0 / 3, 2.0 / 3, 1e308, 5e-324, 123456789.123456789, 0.1 + 0.2,
                           -1e-300, 6.02214076e23};
  for (double v : values) {
    EXPECT_EQ(std::strtod(FormatShortest(v).c_str(), nullptr), v) << FormatShortest(v);
    const float f = static_cast<float>(v);
    if (std::isfinite(f)) {
      EXPECT_EQ(std::strtof(FormatShortest(f).c_str(), nullptr), f) << FormatShortest(f);
    }
  }
}

}  // namespace
}  // namespace kiln
