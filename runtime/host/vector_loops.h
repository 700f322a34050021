// The f32 loops of fused elementwise groups, built for several vector units
// (AVX-512, AVX2, and the x86-64 baseline) and chosen once, when the program
// loads, for the CPU it runs on. Each function returns false for an op it
// does not cover, and the caller runs its generic loop.
//
// Results are bit-identical to the generic loops: no contraction into fused
// multiply-adds, no approximations, and NaN and signed-zero rules as in
// elementwise.cc (maximum and minimum propagate NaN; max(-0, +0) is +0).
#ifndef KILN_RUNTIME_HOST_VECTOR_LOOPS_H_
#define KILN_RUNTIME_HOST_VECTOR_LOOPS_H_

#include <cstdint>

#include "base/element_type.h"
#include "compiler/ir/opcode.h"

namespace kiln::host::vec {

// out[i] = op(a[i]) for negate, abs, sqrt, floor, ceil.
bool UnaryF32(ir::Opcode op, const float* a, float* out, int64_t n);
// out[i] = op(a[i], b[i]) for add, subtract, multiply, divide, maximum,
// minimum.
bool BinaryF32(ir::Opcode op, const float* a, const float* b, float* out, int64_t n);
// out[i] = a[i] <direction> b[i].
bool CompareF32(ir::ComparisonDirection direction, const float* a, const float* b, bool* out,
                int64_t n);
// out[i] = p[i] ? t[i] : f[i].
void SelectF32(const bool* p, const float* t, const float* f, float* out, int64_t n);
// out[i] = float(a[i]) for `from` u8, s8, u16, s16, s32 and pred (where a
// float holds every value exactly but s32's large ones, rounded to nearest
// as a conversion does). Other types: returns false and writes nothing.
bool ConvertToF32(ElementType from, const void* a, float* out, int64_t n);

// The widest vector unit the loops were chosen for: "avx512", "avx2" or
// "baseline".
const char* VectorUnit();

}  // namespace kiln::host::vec

#endif  // KILN_RUNTIME_HOST_VECTOR_LOOPS_H_
