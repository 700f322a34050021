#include "runtime/host/vector_loops.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::host::vec {
namespace {

using ir::ComparisonDirection;
using ir::Opcode;

// Each function below is compiled once per listed target and resolved when
// the program loads (GNU ifunc) by the CPU's features (never by CPU model
// names, which an "arch=" clone would test). The loops are plain C++ that the compiler
// vectorizes; this file is built with -O3, -fno-math-errno (sqrt becomes
// the exact instruction) and -ffp-contract=off. Not under ThreadSanitizer:
// the resolvers run while the program is relocated, before its runtime
// exists, and their instrumentation crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define KILN_VECTOR_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KILN_VECTOR_CLONES
#endif

inline uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}
inline float FromBits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// NaN propagates (the first NaN operand wins); of two equal values the one
// with the sign bit clear wins for max and set for min (+0 vs -0).
inline float Max(float a, float b) {
  float r = a > b ? a : b;
  r = a == b ? FromBits(Bits(a) & Bits(b)) : r;
  r = b != b ? b : r;
  return a != a ? a : r;
}
inline float Min(float a, float b) {
  float r = a < b ? a : b;
  r = a == b ? FromBits(Bits(a) | Bits(b)) : r;
  r = b != b ? b : r;
  return a != a ? a : r;
}

}  // namespace

KILN_VECTOR_CLONES
bool UnaryF32(Opcode op, const float* __restrict a, float* __restrict out, int64_t n) {
  switch (op) {
    case Opcode::kNegate:
      for (int64_t i = 0; i < n; ++i) out[i] = -a[i];
      return true;
    case Opcode::kAbs:
      for (int64_t i = 0; i < n; ++i) out[i] = std::fabs(a[i]);
      return true;
    case Opcode::kSqrt:
      for (int64_t i = 0; i < n; ++i) out[i] = std::sqrt(a[i]);
      return true;
    case Opcode::kFloor:
      for (int64_t i = 0; i < n; ++i) out[i] = std::floor(a[i]);
      return true;
    case Opcode::kCeil:
      for (int64_t i = 0; i < n; ++i) out[i] = std::ceil(a[i]);
      return true;
    default:
      return false;
  }
}

KILN_VECTOR_CLONES
bool BinaryF32(Opcode op, const float* __restrict a, const float* __restrict b,
               float* __restrict out, int64_t n) {
  switch (op) {
    case Opcode::kAdd:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return true;
    case Opcode::kSubtract:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
      return true;
    case Opcode::kMultiply:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      return true;
    case Opcode::kDivide:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] / b[i];
      return true;
    case Opcode::kMaximum:
      for (int64_t i = 0; i < n; ++i) out[i] = Max(a[i], b[i]);
      return true;
    case Opcode::kMinimum:
      for (int64_t i = 0; i < n; ++i) out[i] = Min(a[i], b[i]);
      return true;
    default:
      return false;
  }
}

KILN_VECTOR_CLONES
bool CompareF32(ComparisonDirection direction, const float* __restrict a,
                const float* __restrict b, bool* __restrict out, int64_t n) {
  switch (direction) {
#define KILN_CMP(code, op)                                       \
  case ComparisonDirection::code:                               \
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] op b[i];       \
    return true;
    KILN_CMP(kEq, ==)
    KILN_CMP(kNe, !=)
    KILN_CMP(kLt, <)
    KILN_CMP(kLe, <=)
    KILN_CMP(kGt, >)
    KILN_CMP(kGe, >=)
#undef KILN_CMP
  }
  return false;
}

KILN_VECTOR_CLONES
void SelectF32(const bool* __restrict p, const float* __restrict t, const float* __restrict f,
               float* __restrict out, int64_t n) {
  // A blend through bit masks, which the compiler vectorizes (a conditional
  // expression becomes a branch per element). Any nonzero byte selects `t`.
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(p);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t take = 0u - static_cast<uint32_t>(bytes[i] != 0);
    out[i] = std::bit_cast<float>((std::bit_cast<uint32_t>(t[i]) & take) |
                                  (std::bit_cast<uint32_t>(f[i]) & ~take));
  }
}

namespace {

// One function per type: target clones are not made of templates.
#define KILN_WIDEN(From)                                                                \
  KILN_VECTOR_CLONES void WidenToF32(const From* __restrict a, float* __restrict out,   \
                                     int64_t n) {                                      \
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(a[i]);                 \
  }
KILN_WIDEN(uint8_t)
KILN_WIDEN(int8_t)
KILN_WIDEN(uint16_t)
KILN_WIDEN(int16_t)
KILN_WIDEN(int32_t)
#undef KILN_WIDEN

}  // namespace

bool ConvertToF32(ElementType from, const void* a, float* out, int64_t n) {
  switch (from) {
    case ElementType::kPred:  // stored as 0 or 1
    case ElementType::kU8:
      WidenToF32(static_cast<const uint8_t*>(a), out, n);
      return true;
    case ElementType::kS8:
      WidenToF32(static_cast<const int8_t*>(a), out, n);
      return true;
    case ElementType::kU16:
      WidenToF32(static_cast<const uint16_t*>(a), out, n);
      return true;
    case ElementType::kS16:
      WidenToF32(static_cast<const int16_t*>(a), out, n);
      return true;
    case ElementType::kS32:
      WidenToF32(static_cast<const int32_t*>(a), out, n);
      return true;
    default:
      return false;
  }
}

const char* VectorUnit() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
  return "baseline";
}

}  // namespace kiln::host::vec
