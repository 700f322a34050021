#include "runtime/host/reduce_precision.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace kiln::host {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(f));
  return bits;
}

// Values worked out by hand from the bit patterns.
TEST(ReducePrecisionTest, RoundsTheMantissaToNearestEven) {
  // To bf16's 7 mantissa bits: below half rounds down, half rounds to the
  // even neighbour, above half rounds up.
  EXPECT_EQ(ReducePrecision(1.0f + std::ldexp(1.0f, -10), 8, 7), 1.0f);
  EXPECT_EQ(ReducePrecision(1.0f + std::ldexp(1.0f, -8), 8, 7), 1.0f);
  EXPECT_EQ(ReducePrecision(1.0f + 3 * std::ldexp(1.0f, -8), 8, 7), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(ReducePrecision(1.0f + 5 * std::ldexp(1.0f, -9), 8, 7), 1.0f + std::ldexp(1.0f, -7));
  // No mantissa bit: 1.5 is a tie between 1 and 2; the even neighbour is
  // the one whose last kept bit (here the exponent's lowest) is zero, 2.
  EXPECT_EQ(ReducePrecision(1.5f, 8, 0), 2.0f);
  EXPECT_EQ(ReducePrecision(1.25f, 8, 0), 1.0f);
  // Negative values round by magnitude.
  EXPECT_EQ(ReducePrecision(-(1.0f + 3 * std::ldexp(1.0f, -8)), 8, 7),
            -(1.0f + std::ldexp(1.0f, -6)));
}

TEST(ReducePrecisionTest, OverflowsToInfinityAndFlushesBelowTheNormalRange) {
  // f16's format: 65504 is its largest finite value; 65520 rounds up to
  // 65536, past it.
  EXPECT_EQ(ReducePrecision(65504.0f, 5, 10), 65504.0f);
  EXPECT_EQ(ReducePrecision(65520.0f, 5, 10), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ReducePrecision(-1e6f, 5, 10), -std::numeric_limits<float>::infinity());
  // 2^-14 is f16's smallest normal; below it (f16's denormals) is zero,
  // signed as the input.
  EXPECT_EQ(ReducePrecision(std::ldexp(1.0f, -14), 5, 10), std::ldexp(1.0f, -14));
  EXPECT_EQ(Bits(ReducePrecision(std::ldexp(1.0f, -15), 5, 10)), 0u);
  EXPECT_EQ(Bits(ReducePrecision(-std::ldexp(1.0f, -20), 5, 10)), 0x80000000u);
  // Infinity stays infinity.
  EXPECT_EQ(ReducePrecision(std::numeric_limits<float>::infinity(), 5, 10),
            std::numeric_limits<float>::infinity());
}

TEST(ReducePrecisionTest, KeepsNaNsWhileAMantissaBitRemains) {
  const float nan = FromBits(0x7fc00001u);
  EXPECT_EQ(Bits(ReducePrecision(nan, 5, 10)), 0x7fc00001u);
  // A NaN whose payload lies only in the bits rounded away is still NaN.
  EXPECT_EQ(Bits(ReducePrecision(FromBits(0x7f800001u), 8, 7)), 0x7f800001u);
  EXPECT_EQ(ReducePrecision(nan, 5, 0), std::numeric_limits<float>::infinity());
}

TEST(ReducePrecisionTest, AsWideAFormatChangesNothing) {
  for (double v : {0.1, -3.75, 1e300, 5e-324}) {
    EXPECT_EQ(ReducePrecision(v, 11, 52), v);
  }
  EXPECT_EQ(Bits(ReducePrecision(0.1f, 8, 23)), Bits(0.1f));
  // An f16 denormal stays: f16's own format has them.
  const f16 tiny = f16::FromBits(0x0001);
  EXPECT_EQ(ReducePrecision(tiny, 5, 10).bits, 0x0001);
  // bf16 to 3 mantissa bits: 1 + 2^-4 + 2^-7 (0x3f89) rounds up to
  // 1 + 2^-3 (0x3f90).
  EXPECT_EQ(ReducePrecision(bf16::FromBits(0x3f89), 8, 3).bits, 0x3f90);
}

}  // namespace
}  // namespace kiln::host
