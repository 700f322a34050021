// Maps an ElementType to its C++ storage type at compile time, and calls a
// generic lambda with a value of that type for a run-time ElementType.
#ifndef KILN_BASE_TYPE_DISPATCH_H_
#define KILN_BASE_TYPE_DISPATCH_H_

#include <cstdint>
#include <limits>
#include <type_traits>

#include "base/half.h"
#include "base/element_type.h"

namespace kiln {

template <ElementType E> struct NativeTypeOf;
#define KILN_NATIVE(e, T) \
  template <> struct NativeTypeOf<ElementType::e> { using type = T; };
KILN_NATIVE(kPred, bool)
KILN_NATIVE(kS8, int8_t)
KILN_NATIVE(kS16, int16_t)
KILN_NATIVE(kS32, int32_t)
KILN_NATIVE(kS64, int64_t)
KILN_NATIVE(kU8, uint8_t)
KILN_NATIVE(kU16, uint16_t)
KILN_NATIVE(kU32, uint32_t)
KILN_NATIVE(kU64, uint64_t)
KILN_NATIVE(kBF16, ::kiln::bf16)
KILN_NATIVE(kF16, ::kiln::f16)
KILN_NATIVE(kF32, float)
KILN_NATIVE(kF64, double)
#undef KILN_NATIVE

template <typename T>
inline constexpr bool kIsHalf =
    std::is_same_v<T, ::kiln::bf16> || std::is_same_v<T, ::kiln::f16>;
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;

// Calls f(T{}) where T is the storage type of `type`; `type` must be an
// array type (checked by callers; tuple/token call f(uint8_t{})).
template <typename F>
decltype(auto) DispatchType(ElementType type, F&& f) {
  switch (type) {
    case ElementType::kPred: return f(bool{});
    case ElementType::kS8: return f(int8_t{});
    case ElementType::kS16: return f(int16_t{});
    case ElementType::kS32: return f(int32_t{});
    case ElementType::kS64: return f(int64_t{});
    case ElementType::kU8: return f(uint8_t{});
    case ElementType::kU16: return f(uint16_t{});
    case ElementType::kU32: return f(uint32_t{});
    case ElementType::kU64: return f(uint64_t{});
    case ElementType::kBF16: return f(::kiln::bf16{});
    case ElementType::kF16: return f(::kiln::f16{});
    case ElementType::kF32: return f(float{});
    case ElementType::kF64: return f(double{});
    default: return f(uint8_t{});
  }
}

// Converts between storage types with XLA's rules: float to integer
// saturates and maps NaN to 0; anything to pred is "!= 0".
template <typename To, typename From>
inline To ConvertValue(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    if constexpr (kIsHalf<From>) return static_cast<float>(v) != 0.0f;
    else return v != From(0);
  } else if constexpr (kIsFloat<From> && std::is_integral_v<To>) {
    double x;
    if constexpr (kIsHalf<From>) x = static_cast<float>(v);
    else x = static_cast<double>(v);
    if (x != x) return To(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
    if (x <= lo) return std::numeric_limits<To>::min();
    if (x >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else if constexpr (kIsHalf<To>) {
    // From double in one rounding (half.h); the others through float, which
    // holds every half value and every integer up to 2^24 exactly.
    if constexpr (std::is_same_v<From, double>) return To(v);
    else return To(static_cast<float>(v));
  } else if constexpr (kIsHalf<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace kiln

namespace kiln::ir {
// The IR's kernels and literals name these as their own.
using ::kiln::ConvertValue;
using ::kiln::DispatchType;
using ::kiln::kIsFloat;
using ::kiln::kIsHalf;
using ::kiln::NativeTypeOf;
}  // namespace kiln::ir

#endif  // KILN_BASE_TYPE_DISPATCH_H_
