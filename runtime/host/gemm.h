// Matrix multiply used by dot and convolution: oneDNN's or OpenBLAS's sgemm
// for f32, OpenBLAS for f64, a plain loop for the rest.
#ifndef KILN_RUNTIME_HOST_GEMM_H_
#define KILN_RUNTIME_HOST_GEMM_H_

#include <cstdint>

namespace kiln::host {

// Which library multiplies f32 matrices. Both run on the calling thread's
// OpenMP team (Kiln links OpenBLAS's OpenMP build where it is installed).
// Which is faster depends on the shape and the machine: dot kernels time
// both at compile time (dot_kernels.cc).
enum class GemmLibrary { kOneDnn, kOpenBlas };

// C[m,n] = sum_k A[m,k] * B[k,n], row-major; `trans_a` means A is stored as
// [k,m], `trans_b` means B is stored as [n,k]. C is overwritten. f32 without
// a library named runs on oneDNN's. With a library named, `beta` other than
// 0 accumulates: C = A B + beta C, as the libraries do it (the product's
// sum and the scaled C round together).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const float* a, const float* b, float* c);
void Gemm(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const float* a, const float* b, float* c, float beta = 0.0f);
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const double* a, const double* b, double* c);
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const int64_t* a, const int64_t* b, int64_t* c);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_GEMM_H_
