// Epilogues that library fusions (compiler/passes/convolution_fusion.h,
// dot_bias_fusion.h) apply to a product's rows in place: a bias and a relu.
#ifndef KILN_RUNTIME_HOST_EPILOGUE_H_
#define KILN_RUNTIME_HOST_EPILOGUE_H_

#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace kiln::host {

// max(v, +0) as the maximum op computes it: NaN stays NaN, -0 becomes +0.
inline float Relu(float v) { return v <= 0.0f ? 0.0f : v; }

// at[j] = Relu(at[j] + add[j]) (add null: Relu(at[j])) for j < n, without
// branches (the sign of a pre-activation is unpredictable): four at a time
// where SSE is there.
inline void ReluRow(float* at, const float* add, int64_t n) {
  int64_t j = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps();
  for (; j + 4 <= n; j += 4) {
    __m128 v = _mm_loadu_ps(at + j);
    if (add != nullptr) v = _mm_add_ps(v, _mm_loadu_ps(add + j));
    // v > 0 or NaN keeps v; the rest (-0 too) is +0.
    _mm_storeu_ps(at + j, _mm_and_ps(v, _mm_cmpnle_ps(v, zero)));
  }
#endif
  for (; j < n; ++j) at[j] = Relu(add != nullptr ? at[j] + add[j] : at[j]);
}

// at[j] = Relu(at[j] + b) for j < n, as ReluRow.
inline void ReluRow(float* at, float b, int64_t n) {
  int64_t j = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps(), bias = _mm_set1_ps(b);
  for (; j + 4 <= n; j += 4) {
    const __m128 v = _mm_add_ps(_mm_loadu_ps(at + j), bias);
    _mm_storeu_ps(at + j, _mm_and_ps(v, _mm_cmpnle_ps(v, zero)));
  }
#endif
  for (; j < n; ++j) at[j] = Relu(at[j] + b);
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_EPILOGUE_H_
