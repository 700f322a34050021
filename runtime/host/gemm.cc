#include "runtime/host/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "dnnl.h"
#include "runtime/host/cancel.h"
#include "runtime/host/threads.h"

namespace kiln::host {
namespace {

// BLAS takes int dimensions; larger products are split along m.
constexpr int64_t kMaxBlasDim = INT_MAX;
// Larger products run in bands of rows of about this many multiply-adds
// (several milliseconds), checking for cancellation between bands; a band
// has at least kMinBandRows rows so that BLAS's packing of B is amortized.
constexpr int64_t kBandMacs = int64_t{1} << 28;
constexpr int64_t kMinBandRows = 256;

// Overloads so one template serves float and double. f32 goes to the
// library asked for: oneDNN's by default (it runs on the same OpenMP team as
// oneDNN's convolutions), OpenBLAS's where a dot's tuning found it faster.
void Blas(GemmLibrary library, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
          const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (library == GemmLibrary::kOneDnn &&
      dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, 1.0f, a,
                 lda, b, ldb, beta, c, ldc) == dnnl_success) {
    return;
  }
  // OpenBLAS, also where oneDNN refuses (not expected for valid dimensions).
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
void Blas(GemmLibrary, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
          const double* a, int lda, const double* b, int ldb, double beta, double* c,
          int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void BlasGemm(GemmLibrary library, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
              const T* b, T* c, T beta = 0) {
  if (m == 0 || n == 0) return;
  UseComputeThreads();
  if (k == 0) {
    if (beta == 0) {
      std::memset(c, 0, sizeof(T) * m * n);
    } else {
      for (int64_t i = 0; i < m * n; ++i) c[i] *= beta;
    }
    return;
  }
  if (m <= kMaxBlasDim && n <= kMaxBlasDim && k <= kMaxBlasDim) {
    const int64_t band = std::max(kMinBandRows, kBandMacs / std::max<int64_t>(1, n * k));
    for (int64_t row = 0; row < m; row += band) {
      if (row > 0 && Cancelled()) return;
      const int64_t rows = std::min(band, m - row);
      // Rows of A start `row` rows in ([m,k]) or `row` columns in ([k,m]).
      Blas(library, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
           static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k),
           ta ? a + row : a + row * k, static_cast<int>(ta ? m : k), b,
           static_cast<int>(tb ? k : n), beta, c + row * n, static_cast<int>(n));
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T s = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      }
      c[i * n + j] = beta == 0 ? s : s + beta * c[i * n + j];
    }
  }
}

}  // namespace

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float* c) {
  BlasGemm(GemmLibrary::kOneDnn, ta, tb, m, n, k, a, b, c);
}

void Gemm(GemmLibrary library, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
          const float* a, const float* b, float* c, float beta) {
  BlasGemm(library, ta, tb, m, n, k, a, b, c, beta);
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a,
          const double* b, double* c) {
  BlasGemm(GemmLibrary::kOpenBlas, ta, tb, m, n, k, a, b, c);
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const int64_t* a,
          const int64_t* b, int64_t* c) {
  std::fill(c, c + m * n, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const uint64_t av = static_cast<uint64_t>(ta ? a[p * m + i] : a[i * k + p]);
      for (int64_t j = 0; j < n; ++j) {
        const uint64_t bv = static_cast<uint64_t>(tb ? b[j * k + p] : b[p * n + j]);
        c[i * n + j] = static_cast<int64_t>(static_cast<uint64_t>(c[i * n + j]) + av * bv);
      }
    }
  }
}

}  // namespace kiln::host
