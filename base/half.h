// 16-bit floating-point storage types: bfloat16 and IEEE half.
// Arithmetic goes through float; conversion from float rounds to nearest even.
#ifndef KILN_BASE_HALF_H_
#define KILN_BASE_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// `d` as a float rounded to odd: when d is not exactly a float, the result
// is the neighbour of d whose last mantissa bit is set. Rounding that to a
// type of at most 22 significant bits (f16, bf16) to nearest even gives the
// correctly rounded value of d, where going through an ordinary float
// conversion would round twice.
inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(f) || static_cast<double>(f) == d) return f;
  if ((FloatBits(f) & 1) == 0) {
    f = std::nextafter(f, static_cast<double>(f) > d ? -INFINITY : INFINITY);
  }
  return f;
}

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(FromFloat(f)) {}
  explicit bf16(double d) : bf16(RoundToOddFloat(d)) {}
  template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
  explicit bf16(I i) : bf16(static_cast<float>(i)) {}
  operator float() const { return BitsToFloat(uint32_t{bits} << 16); }
  static bf16 FromBits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  static uint16_t FromFloat(float f) {
    uint32_t u = FloatBits(f);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
    uint32_t rounding_bias = 0x7fff + ((u >> 16) & 1);
    return static_cast<uint16_t>((u + rounding_bias) >> 16);
  }
};

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(FromFloat(f)) {}
  explicit f16(double d) : f16(RoundToOddFloat(d)) {}
  template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
  explicit f16(I i) : f16(static_cast<float>(i)) {}
  operator float() const { return ToFloat(bits); }
  static f16 FromBits(uint16_t b) {
    f16 h;
    h.bits = b;
    return h;
  }
  static uint16_t FromFloat(float f);
  static float ToFloat(uint16_t h);
};

inline uint16_t f16::FromFloat(float f) {
  uint32_t u = FloatBits(f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  }
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow
  if (abs < 0x38800000) {  // subnormal or zero in half
    // Scale so that the half subnormal unit (2^-24) becomes 1, then round.
    float a = BitsToFloat(abs);
    float scaled = a * 16777216.0f;  // 2^24
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant_odd = (abs >> 13) & 1;
  abs += 0xc8000fff + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (abs >> 13));
}

inline float f16::ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000 | (mant << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace kiln

#endif  // KILN_BASE_HALF_H_
