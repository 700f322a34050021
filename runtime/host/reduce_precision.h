// XLA's reduce-precision: a value rounded to the floating-point format with
// `exponent_bits` and `mantissa_bits`, and given back in its own type.
#ifndef KILN_RUNTIME_HOST_REDUCE_PRECISION_H_
#define KILN_RUNTIME_HOST_REDUCE_PRECISION_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/half.h"

namespace kiln::host {

template <typename T>
struct FloatBits;
template <>
struct FloatBits<double> {
  using Uint = uint64_t;
  static constexpr int kMantissa = 52, kExponent = 11;
};
template <>
struct FloatBits<float> {
  using Uint = uint32_t;
  static constexpr int kMantissa = 23, kExponent = 8;
};
template <>
struct FloatBits<bf16> {
  using Uint = uint16_t;
  static constexpr int kMantissa = 7, kExponent = 8;
};
template <>
struct FloatBits<f16> {
  using Uint = uint16_t;
  static constexpr int kMantissa = 10, kExponent = 5;
};

// The mantissa is rounded to nearest, ties to even (a carry into the
// exponent is the next binade, as it should be). Then an exponent above the
// reduced format's largest becomes infinity and one at or below its
// smallest normal's predecessor becomes zero, keeping the sign: the reduced
// format has no denormals. A NaN stays the same NaN, or becomes infinity
// when no mantissa bit is left to hold it. Formats as wide as T or wider
// leave values unchanged.
template <typename T>
T ReducePrecision(T value, int exponent_bits, int mantissa_bits) {
  using Uint = typename FloatBits<T>::Uint;
  constexpr int kMantissa = FloatBits<T>::kMantissa;
  constexpr int kExponent = FloatBits<T>::kExponent;
  constexpr int kBits = static_cast<int>(sizeof(T)) * 8;
  Uint x;
  std::memcpy(&x, &value, sizeof(T));
  if (mantissa_bits < kMantissa) {
    const Uint last_kept = Uint{1} << (kMantissa - mantissa_bits);
    // 0111... below the last kept bit, plus one when that bit is set:
    // rounds half to even.
    const Uint bias = static_cast<Uint>(((last_kept >> 1) - 1) +
                                        ((x & last_kept) >> (kMantissa - mantissa_bits)));
    x = static_cast<Uint>((x + bias) & ~static_cast<Uint>(last_kept - 1));
  }
  if (exponent_bits < kExponent) {
    const Uint sign = Uint{1} << (kBits - 1);
    const Uint exponent_mask = static_cast<Uint>(((Uint{1} << kExponent) - 1) << kMantissa);
    const Uint bias = (Uint{1} << (kExponent - 1)) - 1;
    const Uint reduced_bias = (Uint{1} << (exponent_bits - 1)) - 1;
    const Uint exponent = x & exponent_mask;
    if (exponent > static_cast<Uint>((bias + reduced_bias) << kMantissa)) {
      x = static_cast<Uint>((x & sign) | exponent_mask);
    } else if (exponent <= static_cast<Uint>((bias - reduced_bias) << kMantissa)) {
      x = static_cast<Uint>(x & sign);
    }
  }
  T out;
  std::memcpy(&out, &x, sizeof(T));
  bool is_nan;
  if constexpr (std::is_floating_point_v<T>) {
    is_nan = std::isnan(value);
  } else {
    is_nan = std::isnan(static_cast<float>(value));
  }
  if (is_nan) {
    if (mantissa_bits > 0) return value;
    const Uint inf = static_cast<Uint>(((Uint{1} << kExponent) - 1) << kMantissa);
    std::memcpy(&out, &inf, sizeof(T));
  }
  return out;
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_REDUCE_PRECISION_H_
