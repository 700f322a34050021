#include "runtime/gpu/blas.h"

#include <cublasLt.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/gpu/cuda_library.h"

namespace kiln::gpu {
namespace {

constexpr char kSoname[] = "libcublasLt.so." KILN_CUDA_MAJOR;

struct Lt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

absl::StatusOr<Lt> Load() {
  ASSIGN_OR_RETURN(void* lib, OpenCudaLibrary(kSoname));
  Lt l;
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtCreate", &l.create));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtGetStatusString", &l.status_string));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulDescCreate", &l.desc_create));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulDescDestroy", &l.desc_destroy));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulDescSetAttribute", &l.desc_set));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatrixLayoutCreate", &l.layout_create));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatrixLayoutDestroy", &l.layout_destroy));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatrixLayoutSetAttribute", &l.layout_set));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulPreferenceCreate", &l.pref_create));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulPreferenceDestroy", &l.pref_destroy));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulPreferenceSetAttribute", &l.pref_set));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmulAlgoGetHeuristic", &l.heuristic));
  RETURN_IF_ERROR(Bind(lib, kSoname, "cublasLtMatmul", &l.matmul));
  return l;
}

absl::StatusOr<const Lt*> Get() {
  static const absl::StatusOr<Lt>* const lt = new absl::StatusOr<Lt>(Load());
  if (!lt->ok()) return lt->status();
  return &**lt;
}

absl::Status Check(const Lt& lt, cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", lt.status_string(status)));
}

// Where the non-batch dimensions of an operand are: its free and
// contracting dimension (-1 when absent).
struct Operand {
  int64_t free = -1, contracting = -1;
};

std::optional<Operand> Classify(const ir::Shape& s, const std::vector<int64_t>& batch,
                                const std::vector<int64_t>& contracting) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i] != static_cast<int64_t>(i)) return std::nullopt;
  }
  if (contracting.size() > 1) return std::nullopt;
  Operand o;
  if (!contracting.empty()) o.contracting = contracting[0];
  int free_dims = 0;
  for (int64_t d = static_cast<int64_t>(batch.size()); d < s.rank(); ++d) {
    if (d != o.contracting) {
      o.free = d;
      ++free_dims;
    }
  }
  if (free_dims > 1) return std::nullopt;
  return o;
}

}  // namespace

std::optional<GemmShape> PlanGemm(const ir::Instruction& dot) {
  const ir::Shape& lhs = dot.operand(0)->shape();
  const ir::Shape& rhs = dot.operand(1)->shape();
  const ElementType t = lhs.type();
  if (t != rhs.type() || t != dot.shape().type()) return std::nullopt;
  if (t != ElementType::kF32 && t != ElementType::kF64 && t != ElementType::kF16 &&
      t != ElementType::kBF16) {
    return std::nullopt;
  }
  const ir::DotDims& d = dot.attrs().dot;
  auto l = Classify(lhs, d.lhs_batch, d.lhs_contracting);
  auto r = Classify(rhs, d.rhs_batch, d.rhs_contracting);
  if (!l || !r) return std::nullopt;
  GemmShape g;
  g.type = t;
  for (int64_t b : d.lhs_batch) g.batch *= lhs.dim(b);
  if (l->free >= 0) g.m = lhs.dim(l->free);
  if (l->contracting >= 0) g.k = lhs.dim(l->contracting);
  if (r->free >= 0) g.n = rhs.dim(r->free);
  g.lhs_transposed = l->free >= 0 && l->contracting >= 0 && l->contracting < l->free;
  g.rhs_transposed = r->free >= 0 && r->contracting >= 0 && r->free < r->contracting;
  if (g.batch * g.m * g.n * g.k == 0) return std::nullopt;
  return g;
}

absl::StatusOr<void*> CreateBlasHandle() {
  ASSIGN_OR_RETURN(const Lt* lt, Get());
  cublasLtHandle_t handle;
  RETURN_IF_ERROR(Check(*lt, lt->create(&handle), "cublasLtCreate"));
  return static_cast<void*>(handle);
}

struct Gemm::Descriptors {
  const Lt* lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  bool is_double = false;
  mutable absl::Mutex mu;
  mutable bool have_algo ABSL_GUARDED_BY(mu) = false;
  mutable cublasLtMatmulAlgo_t algo ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(const GemmShape& g) {
  ASSIGN_OR_RETURN(const Lt* lt, Get());
  std::unique_ptr<Gemm> gemm(new Gemm());
  gemm->d_ = std::make_unique<Descriptors>();
  Descriptors& d = *gemm->d_;
  d.lt = lt;
  cudaDataType_t data;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // full float32: no TF32
  cudaDataType_t scale = CUDA_R_32F;
  switch (g.type) {
    case ElementType::kF64: data = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; scale = CUDA_R_64F;
      d.is_double = true; break;
    case ElementType::kF16: data = CUDA_R_16F; break;
    case ElementType::kBF16: data = CUDA_R_16BF; break;
    default: data = CUDA_R_32F; break;
  }
  RETURN_IF_ERROR(Check(*lt, lt->desc_create(&d.op, compute, scale), "cublasLtMatmulDescCreate"));
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS's first operand
  // is our rhs, its second our lhs.
  const cublasOperation_t ta = g.rhs_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.lhs_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  RETURN_IF_ERROR(Check(*lt, lt->desc_set(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
                        "CUBLASLT_MATMUL_DESC_TRANSA"));
  RETURN_IF_ERROR(Check(*lt, lt->desc_set(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
                        "CUBLASLT_MATMUL_DESC_TRANSB"));
  auto layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t stride) {
    RETURN_IF_ERROR(Check(*lt, lt->layout_create(l, data, rows, cols, rows),
                          "cublasLtMatrixLayoutCreate"));
    const int32_t batch = static_cast<int32_t>(g.batch);
    RETURN_IF_ERROR(Check(*lt, lt->layout_set(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                              sizeof(batch)), "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT"));
    return Check(*lt, lt->layout_set(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                     sizeof(stride)), "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
  };
  // The stored shapes, column-major: rhs is n x k (k x n transposed), lhs
  // k x m (m x k transposed), the result n x m.
  RETURN_IF_ERROR(g.rhs_transposed ? layout(&d.a, g.k, g.n, g.n * g.k)
                                   : layout(&d.a, g.n, g.k, g.n * g.k));
  RETURN_IF_ERROR(g.lhs_transposed ? layout(&d.b, g.m, g.k, g.m * g.k)
                                   : layout(&d.b, g.k, g.m, g.m * g.k));
  RETURN_IF_ERROR(layout(&d.c, g.n, g.m, g.n * g.m));
  return gemm;
}

Gemm::~Gemm() {
  if (d_ == nullptr) return;
  if (d_->a) d_->lt->layout_destroy(d_->a);
  if (d_->b) d_->lt->layout_destroy(d_->b);
  if (d_->c) d_->lt->layout_destroy(d_->c);
  if (d_->op) d_->lt->desc_destroy(d_->op);
}

absl::Status Gemm::Run(void* handle, void* workspace, size_t workspace_bytes, const void* lhs,
                       const void* rhs, void* out, cudaStream_t stream) const {
  const Lt& lt = *d_->lt;
  auto* h = static_cast<cublasLtHandle_t>(handle);
  cublasLtMatmulAlgo_t algo;
  {
    absl::MutexLock lock(&d_->mu);
    if (!d_->have_algo) {
      cublasLtMatmulPreference_t pref;
      RETURN_IF_ERROR(Check(lt, lt.pref_create(&pref), "cublasLtMatmulPreferenceCreate"));
      const uint64_t bytes = workspace_bytes;
      lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes));
      cublasLtMatmulHeuristicResult_t result;
      int found = 0;
      const cublasStatus_t status =
          lt.heuristic(h, d_->op, d_->a, d_->b, d_->c, d_->c, pref, 1, &result, &found);
      lt.pref_destroy(pref);
      RETURN_IF_ERROR(Check(lt, status, "cublasLtMatmulAlgoGetHeuristic"));
      if (found == 0) return absl::InternalError("cuBLASLt has no algorithm for this dot");
      d_->algo = result.algo;
      d_->have_algo = true;
    }
    algo = d_->algo;
  }
  const float alpha_f = 1, beta_f = 0;
  const double alpha_d = 1, beta_d = 0;
  const void* alpha = d_->is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = d_->is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  return Check(lt,
               lt.matmul(h, d_->op, alpha, rhs, d_->a, lhs, d_->b, beta, out, d_->c, out, d_->c,
                         &algo, workspace, workspace_bytes, stream),
               "cublasLtMatmul");
}

}  // namespace kiln::gpu
