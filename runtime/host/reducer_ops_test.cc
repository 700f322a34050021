#include "runtime/host/reducer_ops.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::host {
namespace {

#if defined(__SSE2__)
// The generic rules (as double, which keeps a float's NaN payload and the
// sign of zero): NaN propagates (the first operand's when both are), +0 is
// above -0.
float RuleMax(float a, float b) {
  return static_cast<float>(ApplyReducerOp<double>(ir::Opcode::kMaximum, a, b));
}
float RuleMin(float a, float b) {
  return static_cast<float>(ApplyReducerOp<double>(ir::Opcode::kMinimum, a, b));
}

// Every pair of special and plain values, in every lane, alone and beside
// NaNs in other lanes (which send the vector through the exact path), bit
// for bit against the generic rules.
TEST(ReducerOpsTest, VectorMaxAndMinMatchTheScalarRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float payload = std::bit_cast<float>(uint32_t{0xffc01234});  // a negative NaN
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {nan, payload, 0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, 3.5f,
                                     std::numeric_limits<float>::denorm_min()};
  int checked = 0;
  for (float a : values) {
    for (float b : values) {
      for (int lane = 0; lane < 4; ++lane) {
        for (bool nan_beside : {false, true}) {
          alignas(16) float x[4] = {2.0f, -2.0f, 0.5f, 7.0f};
          alignas(16) float y[4] = {1.0f, -3.0f, 0.5f, 8.0f};
          if (nan_beside) x[(lane + 1) % 4] = nan;
          x[lane] = a;
          y[lane] = b;
          alignas(16) float mx[4], mn[4];
          _mm_store_ps(mx, MaxF32x4(_mm_load_ps(x), _mm_load_ps(y)));
          _mm_store_ps(mn, MinF32x4(_mm_load_ps(x), _mm_load_ps(y)));
          for (int l = 0; l < 4; ++l) {
            ASSERT_EQ(std::bit_cast<uint32_t>(mx[l]), std::bit_cast<uint32_t>(RuleMax(x[l], y[l])))
                << "max(" << x[l] << ", " << y[l] << ") lane " << l;
            ASSERT_EQ(std::bit_cast<uint32_t>(mn[l]), std::bit_cast<uint32_t>(RuleMin(x[l], y[l])))
                << "min(" << x[l] << ", " << y[l] << ") lane " << l;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 10 * 10 * 4 * 2 * 4);
}
#endif

}  // namespace
}  // namespace kiln::host
