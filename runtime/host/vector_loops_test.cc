#include "runtime/host/vector_loops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/type_dispatch.h"

namespace kiln::host::vec {
namespace {

using ir::ComparisonDirection;
using ir::Opcode;

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

// The reference semantics, as the generic loops of elementwise.cc define them.
float RefMax(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
float RefMin(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

// Special values in every pairing, then random ones; an odd length so the
// vector loops also run their scalar tails.
void Operands(std::vector<float>* a, std::vector<float>* b) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float neg_nan = -nan;
  const float inf = std::numeric_limits<float>::infinity();
  const float denorm = std::numeric_limits<float>::denorm_min();
  const std::vector<float> special = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -7.25f, nan, neg_nan,
                                      inf, -inf, denorm, -denorm, 3e38f, -3e38f, 1e-38f};
  for (float x : special) {
    for (float y : special) {
      a->push_back(x);
      b->push_back(y);
    }
  }
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (int i = 0; i < 1001; ++i) {
    a->push_back(dist(gen));
    b->push_back(i % 5 == 0 ? (*a)[a->size() - 1] : dist(gen));
  }
}

TEST(VectorLoopsTest, NamesAVectorUnit) {
  const std::string unit = VectorUnit();
  EXPECT_TRUE(unit == "avx512" || unit == "avx2" || unit == "baseline") << unit;
}

TEST(VectorLoopsTest, BinaryOpsAreBitIdenticalToTheScalarDefinitions) {
  std::vector<float> a, b;
  Operands(&a, &b);
  const int64_t n = static_cast<int64_t>(a.size());
  struct Case {
    Opcode op;
    float (*ref)(float, float);
  };
  const Case cases[] = {
      {Opcode::kAdd, [](float x, float y) { return x + y; }},
      {Opcode::kSubtract, [](float x, float y) { return x - y; }},
      {Opcode::kMultiply, [](float x, float y) { return x * y; }},
      {Opcode::kDivide, [](float x, float y) { return x / y; }},
      {Opcode::kMaximum, RefMax},
      {Opcode::kMinimum, RefMin},
  };
  for (const Case& c : cases) {
    std::vector<float> out(n);
    ASSERT_TRUE(BinaryF32(c.op, a.data(), b.data(), out.data(), n)) << ir::OpcodeName(c.op);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(out[i]), Bits(c.ref(a[i], b[i])))
          << ir::OpcodeName(c.op) << "(" << a[i] << ", " << b[i] << ") at " << i;
    }
  }
  std::vector<float> out(n);
  EXPECT_FALSE(BinaryF32(Opcode::kPower, a.data(), b.data(), out.data(), n));
}

TEST(VectorLoopsTest, UnaryOpsAreBitIdenticalToTheStandardLibrary) {
  std::vector<float> a, b;
  Operands(&a, &b);
  const int64_t n = static_cast<int64_t>(a.size());
  struct Case {
    Opcode op;
    float (*ref)(float);
  };
  const Case cases[] = {
      {Opcode::kNegate, [](float x) { return -x; }},
      {Opcode::kAbs, [](float x) { return std::abs(x); }},
      {Opcode::kSqrt, [](float x) { return std::sqrt(x); }},
      {Opcode::kFloor, [](float x) { return std::floor(x); }},
      {Opcode::kCeil, [](float x) { return std::ceil(x); }},
  };
  for (const Case& c : cases) {
    std::vector<float> out(n);
    ASSERT_TRUE(UnaryF32(c.op, a.data(), out.data(), n)) << ir::OpcodeName(c.op);
    for (int64_t i = 0; i < n; ++i) {
      const float want = c.ref(a[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[i])) << ir::OpcodeName(c.op) << "(" << a[i] << ")";
      } else {
        ASSERT_EQ(Bits(out[i]), Bits(want)) << ir::OpcodeName(c.op) << "(" << a[i] << ")";
      }
    }
  }
  std::vector<float> out(n);
  EXPECT_FALSE(UnaryF32(Opcode::kExp, a.data(), out.data(), n));
}

TEST(VectorLoopsTest, ComparisonsFollowIeeeOrdering) {
  std::vector<float> a, b;
  Operands(&a, &b);
  const int64_t n = static_cast<int64_t>(a.size());
  struct Case {
    ComparisonDirection direction;
    bool (*ref)(float, float);
  };
  const Case cases[] = {
      {ComparisonDirection::kEq, [](float x, float y) { return x == y; }},
      {ComparisonDirection::kNe, [](float x, float y) { return x != y; }},
      {ComparisonDirection::kLt, [](float x, float y) { return x < y; }},
      {ComparisonDirection::kLe, [](float x, float y) { return x <= y; }},
      {ComparisonDirection::kGt, [](float x, float y) { return x > y; }},
      {ComparisonDirection::kGe, [](float x, float y) { return x >= y; }},
  };
  for (const Case& c : cases) {
    std::unique_ptr<bool[]> out(new bool[n]);
    ASSERT_TRUE(CompareF32(c.direction, a.data(), b.data(), out.get(), n));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], c.ref(a[i], b[i]))
          << static_cast<int>(c.direction) << " on " << a[i] << ", " << b[i];
    }
  }
}

TEST(VectorLoopsTest, SelectPicksPerElement) {
  std::vector<float> a, b;
  Operands(&a, &b);
  const int64_t n = static_cast<int64_t>(a.size());
  std::unique_ptr<bool[]> p(new bool[n]);
  for (int64_t i = 0; i < n; ++i) p[i] = (i * 7) % 3 == 0;
  std::vector<float> out(n);
  SelectF32(p.get(), a.data(), b.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(Bits(out[i]), Bits(p[i] ? a[i] : b[i])) << i;
}

// Every integer type's extremes and a run of random values (an odd count,
// so the scalar tails run too) convert as ConvertValue converts one value;
// s32's values past 2^24 round to nearest even.
template <typename T>
void ExpectConvertsAsOneValue(ElementType type) {
  std::vector<T> a = {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), T(0), T(1)};
  if constexpr (std::is_same_v<T, int32_t>) {
    for (int32_t v : {16777217, -16777217, 2147483520, 2147483583, 2147483584}) a.push_back(v);
  }
  std::mt19937 gen(11);
  std::uniform_int_distribution<int64_t> dist(std::numeric_limits<T>::min(),
                                              std::numeric_limits<T>::max());
  for (int i = 0; i < 1001; ++i) a.push_back(static_cast<T>(dist(gen)));
  std::vector<float> out(a.size(), -1.0f);
  ASSERT_TRUE(ConvertToF32(type, a.data(), out.data(), static_cast<int64_t>(a.size())));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(Bits(out[i]), Bits(ConvertValue<float>(a[i]))) << ElementTypeName(type) << " " << i;
  }
}

TEST(VectorLoopsTest, IntegersConvertToF32AsOneValueDoes) {
  ExpectConvertsAsOneValue<uint8_t>(ElementType::kU8);
  ExpectConvertsAsOneValue<int8_t>(ElementType::kS8);
  ExpectConvertsAsOneValue<uint16_t>(ElementType::kU16);
  ExpectConvertsAsOneValue<int16_t>(ElementType::kS16);
  ExpectConvertsAsOneValue<int32_t>(ElementType::kS32);
  const bool p[] = {true, false, false, true, true};
  float out[5];
  ASSERT_TRUE(ConvertToF32(ElementType::kPred, p, out, 5));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], p[i] ? 1.0f : 0.0f);
  // The others are left to the generic loop.
  const double d = 1.0;
  EXPECT_FALSE(ConvertToF32(ElementType::kF64, &d, out, 1));
  EXPECT_FALSE(ConvertToF32(ElementType::kS64, &d, out, 1));
}

}  // namespace
}  // namespace kiln::host::vec
