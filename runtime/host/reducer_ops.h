// The scalar binary ops that reducers, window reductions and scatter
// combiners apply on their fast paths (see MatchScalarBinary).
#ifndef KILN_RUNTIME_HOST_REDUCER_OPS_H_
#define KILN_RUNTIME_HOST_REDUCER_OPS_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "compiler/ir/opcode.h"
#include "base/type_dispatch.h"

namespace kiln::host {

// Accumulator type of a storage type: half types accumulate in float.
template <typename T>
using Accumulator = std::conditional_t<ir::kIsHalf<T>, float, T>;

#if defined(__SSE2__)
// f32 maximum and minimum of four lanes as SSE2 masks and blends: the same
// results as the generic rules below, with no branch for the compiler to
// mispredict. The Exact forms handle every lane; the others take them only
// when a lane is unordered (a NaN), which is rare: for ordered lanes,
// max_ps(x, y) and max_ps(y, x) differ only on +0 against -0 (each returns
// its second operand when equal), and their bitwise and (or, for minimum)
// picks +0 (-0).
inline __m128 ExactMaxF32x4(__m128 x, __m128 y) {
  __m128 r = _mm_max_ps(x, y);  // x > y ? x : y (y when equal or unordered)
  const __m128 eq = _mm_cmpeq_ps(x, y);
  r = _mm_or_ps(_mm_and_ps(eq, _mm_and_ps(x, y)), _mm_andnot_ps(eq, r));  // +0 over -0
  const __m128 y_nan = _mm_cmpunord_ps(y, y);
  r = _mm_or_ps(_mm_and_ps(y_nan, y), _mm_andnot_ps(y_nan, r));
  const __m128 x_nan = _mm_cmpunord_ps(x, x);
  return _mm_or_ps(_mm_and_ps(x_nan, x), _mm_andnot_ps(x_nan, r));
}
inline __m128 ExactMinF32x4(__m128 x, __m128 y) {
  __m128 r = _mm_min_ps(x, y);
  const __m128 eq = _mm_cmpeq_ps(x, y);
  r = _mm_or_ps(_mm_and_ps(eq, _mm_or_ps(x, y)), _mm_andnot_ps(eq, r));  // -0 under +0
  const __m128 y_nan = _mm_cmpunord_ps(y, y);
  r = _mm_or_ps(_mm_and_ps(y_nan, y), _mm_andnot_ps(y_nan, r));
  const __m128 x_nan = _mm_cmpunord_ps(x, x);
  return _mm_or_ps(_mm_and_ps(x_nan, x), _mm_andnot_ps(x_nan, r));
}
__attribute__((always_inline)) inline __m128 MaxF32x4(__m128 x, __m128 y) {
  if (__builtin_expect(_mm_movemask_ps(_mm_cmpunord_ps(x, y)) != 0, 0)) {
    return ExactMaxF32x4(x, y);
  }
  return _mm_and_ps(_mm_max_ps(x, y), _mm_max_ps(y, x));
}
__attribute__((always_inline)) inline __m128 MinF32x4(__m128 x, __m128 y) {
  if (__builtin_expect(_mm_movemask_ps(_mm_cmpunord_ps(x, y)) != 0, 0)) {
    return ExactMinF32x4(x, y);
  }
  return _mm_or_ps(_mm_min_ps(x, y), _mm_min_ps(y, x));
}
inline float MaxF32(float a, float b) {
  return _mm_cvtss_f32(MaxF32x4(_mm_set_ss(a), _mm_set_ss(b)));
}
inline float MinF32(float a, float b) {
  return _mm_cvtss_f32(MinF32x4(_mm_set_ss(a), _mm_set_ss(b)));
}
#endif

// op(a, b) for add, multiply, maximum, minimum, and, or; NaN propagates
// through maximum and minimum.
template <typename A>
__attribute__((always_inline)) inline A ApplyReducerOp(ir::Opcode op, A a, A b) {
  switch (op) {
    case ir::Opcode::kAdd:
      if constexpr (std::is_same_v<A, bool>) return a || b;
      else return static_cast<A>(a + b);
    case ir::Opcode::kMultiply:
      if constexpr (std::is_same_v<A, bool>) return a && b;
      else return static_cast<A>(a * b);
    // As elementwise maximum and minimum: NaN wins, and +0 is above -0.
    // Floats without branches (pooling compares unpredictable data): of two
    // equal values the bits' AND is +0 when either is, their OR -0.
    case ir::Opcode::kMaximum:
#if defined(__SSE2__)
      if constexpr (std::is_same_v<A, float>) return MaxF32(a, b);
#endif
      if constexpr (std::is_floating_point_v<A>) {
        using Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;
        A r = a > b ? a : b;
        r = a == b ? std::bit_cast<A>(std::bit_cast<Bits>(a) & std::bit_cast<Bits>(b)) : r;
        r = b != b ? b : r;
        return a != a ? a : r;
      }
      return a > b ? a : b;
    case ir::Opcode::kMinimum:
#if defined(__SSE2__)
      if constexpr (std::is_same_v<A, float>) return MinF32(a, b);
#endif
      if constexpr (std::is_floating_point_v<A>) {
        using Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;
        A r = a < b ? a : b;
        r = a == b ? std::bit_cast<A>(std::bit_cast<Bits>(a) | std::bit_cast<Bits>(b)) : r;
        r = b != b ? b : r;
        return a != a ? a : r;
      }
      return a < b ? a : b;
    case ir::Opcode::kAnd:
      if constexpr (std::is_same_v<A, bool>) return a && b;
      else if constexpr (std::is_integral_v<A>) return static_cast<A>(a & b);
      else return a;
    case ir::Opcode::kOr:
      if constexpr (std::is_same_v<A, bool>) return a || b;
      else if constexpr (std::is_integral_v<A>) return static_cast<A>(a | b);
      else return a;
    default:
      return a;
  }
}

// f(std::integral_constant<Opcode, op>{}) for the reducer ops of the fast
// paths (those MatchScalarBinary matches), so that loops over elements have
// no switch inside.
template <typename F>
void WithReducer(ir::Opcode op, F&& f) {
  using ir::Opcode;
  switch (op) {
    case Opcode::kAdd: return f(std::integral_constant<Opcode, Opcode::kAdd>{});
    case Opcode::kMultiply: return f(std::integral_constant<Opcode, Opcode::kMultiply>{});
    case Opcode::kMaximum: return f(std::integral_constant<Opcode, Opcode::kMaximum>{});
    case Opcode::kMinimum: return f(std::integral_constant<Opcode, Opcode::kMinimum>{});
    case Opcode::kAnd: return f(std::integral_constant<Opcode, Opcode::kAnd>{});
    case Opcode::kOr: return f(std::integral_constant<Opcode, Opcode::kOr>{});
    default: return f(std::integral_constant<Opcode, Opcode::kAdd>{});  // not matched
  }
}

#if defined(__SSE2__)
// ApplyReducerOp on four f32 lanes at once, for the ops fixed at compile
// time; and/or leave `a`, as ApplyReducerOp does for floats.
template <ir::Opcode kOp>
__attribute__((always_inline)) inline __m128 ApplyReducerOpF32x4(__m128 a, __m128 b) {
  if constexpr (kOp == ir::Opcode::kAdd) return _mm_add_ps(a, b);
  else if constexpr (kOp == ir::Opcode::kMultiply) return _mm_mul_ps(a, b);
  else if constexpr (kOp == ir::Opcode::kMaximum) return MaxF32x4(a, b);
  else if constexpr (kOp == ir::Opcode::kMinimum) return MinF32x4(a, b);
  else return a;
}

// The first `n` (1 to 4) floats at `p` in the low lanes, zeros above (rows
// whose length is not a multiple of four end with one of these), loaded and
// stored without touching memory past them.
inline __m128 LoadF32x4(const float* p, int64_t n) {
  // Pairs of floats move as one unaligned 64-bit integer (the double
  // forms of these intrinsics assume 8-byte alignment).
  switch (n) {
    case 1: return _mm_load_ss(p);
    case 2: return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    case 3:
      return _mm_movelh_ps(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
                           _mm_load_ss(p + 2));
    default: return _mm_loadu_ps(p);
  }
}
inline void StoreF32x4(float* p, __m128 v, int64_t n) {
  switch (n) {
    case 1: return _mm_store_ss(p, v);
    case 2: return _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_castps_si128(v));
    case 3:
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_castps_si128(v));
      return _mm_store_ss(p + 2, _mm_movehl_ps(v, v));
    default: return _mm_storeu_ps(p, v);
  }
}
#endif

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_REDUCER_OPS_H_
