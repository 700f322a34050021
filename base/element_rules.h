// The scalar rules of elementwise arithmetic, shared by the host
// interpreter (runtime/host/elementwise.cc) and constant folding
// (compiler/passes/evaluator.cc), which must agree bit for bit: half types
// computed in float, wrapping integers, XLA's division, remainder, power and
// shift rules, and NaN-propagating maximum and minimum.
#ifndef KILN_BASE_ELEMENT_RULES_H_
#define KILN_BASE_ELEMENT_RULES_H_

#include <cmath>
#include <limits>
#include <type_traits>

#include "base/type_dispatch.h"

namespace kiln::element_rules {

// Values of half types are computed in float and rounded when stored.
template <typename T>
using Calc = std::conditional_t<kIsHalf<T>, float, T>;
template <typename T>
inline Calc<T> Ld(T v) {
  if constexpr (kIsHalf<T>) return static_cast<float>(v);
  else return v;
}
template <typename T>
inline T St(Calc<T> v) {
  if constexpr (kIsHalf<T>) return T(v);
  else return static_cast<T>(v);
}

template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <typename T>
using Unsigned = std::make_unsigned_t<T>;

// Integer arithmetic wraps (two's complement) instead of being undefined.
template <typename T> inline T WrapAdd(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
}
template <typename T> inline T WrapSub(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
}
template <typename T> inline T WrapMul(T a, T b) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, Unsigned<T>>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
// XLA: x / 0 = -1 (all ones), INT_MIN / -1 = INT_MIN; x % 0 = x.
template <typename T> inline T IntDiv(T a, T b) {
  if (b == 0) return static_cast<T>(-1);
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return a;
  }
  return static_cast<T>(a / b);
}
template <typename T> inline T IntRem(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return 0;
  }
  return static_cast<T>(a % b);
}
template <typename T> inline T IntPow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  T result = 1;
  auto e = static_cast<Unsigned<T>>(exp);
  while (e != 0) {
    if (e & 1) result = WrapMul(result, base);
    base = WrapMul(base, base);
    e >>= 1;
  }
  return result;
}
template <typename T> inline T ShiftLeft(T a, T b) {
  constexpr auto bits = sizeof(T) * 8;
  auto s = static_cast<Unsigned<T>>(b);
  if (s >= bits) return 0;
  return static_cast<T>(static_cast<Unsigned<T>>(a) << s);
}
template <typename T> inline T ShiftRightLogical(T a, T b) {
  constexpr auto bits = sizeof(T) * 8;
  auto s = static_cast<Unsigned<T>>(b);
  if (s >= bits) return 0;
  return static_cast<T>(static_cast<Unsigned<T>>(a) >> s);
}
// XLA shifts the bit pattern arithmetically (sign bit filling in) for
// unsigned types too, as its evaluator does through the signed type.
template <typename T> inline T ShiftRightArith(T a, T b) {
  constexpr auto bits = sizeof(T) * 8;
  auto s = static_cast<Unsigned<T>>(b);
  const auto v = static_cast<std::make_signed_t<T>>(a);
  if (s >= bits) return static_cast<T>(v < 0 ? -1 : 0);
  return static_cast<T>(v >> s);
}
// IEEE-754 maximum and minimum (StableHLO's semantics): NaN propagates and
// +0 counts as above -0, so the result does not depend on operand order.
template <typename C> inline C FMax(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
template <typename C> inline C FMin(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

// clamp(lo, x, hi) = min(max(x, lo), hi) with the maximum and minimum
// above: a NaN bound or operand gives NaN, and +0 counts as above -0.
template <typename C> inline C Clamp(C lo, C x, C hi) {
  if constexpr (std::is_floating_point_v<C>) {
    return FMin(FMax(x, lo), hi);
  } else {
    const C v = x < lo ? lo : x;
    return v > hi ? hi : v;
  }
}

}  // namespace kiln::element_rules

#endif  // KILN_BASE_ELEMENT_RULES_H_
