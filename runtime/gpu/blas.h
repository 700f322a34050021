// Dots as cuBLASLt matrix products. A dot whose operands each read as a
// batch of row-major or transposed matrices (batch dimensions leading, at
// most one free and one contracting dimension each) becomes one strided
// batched GEMM in full float32 (no TF32), float64, or half storage with
// float32 accumulation; other dots keep their generated kernels.
#ifndef KILN_RUNTIME_GPU_BLAS_H_
#define KILN_RUNTIME_GPU_BLAS_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "compiler/ir/instruction.h"

namespace kiln::gpu {

struct GemmShape {
  ElementType type;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool lhs_transposed = false;  // the lhs is stored [k, m]
  bool rhs_transposed = false;  // the rhs is stored [n, k]
};

// How `dot` maps to a GEMM, or nullopt when it does not.
std::optional<GemmShape> PlanGemm(const ir::Instruction& dot);

// A planned GEMM with its cuBLASLt descriptors. Thread-safe.
class Gemm {
 public:
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(const GemmShape& shape);
  ~Gemm();
  // out[b] = lhs[b] x rhs[b] on `stream`, with the handle and workspace of
  // the device that owns the stream.
  absl::Status Run(void* handle, void* workspace, size_t workspace_bytes, const void* lhs,
                   const void* rhs, void* out, cudaStream_t stream) const;

 private:
  Gemm() = default;
  struct Descriptors;
  std::unique_ptr<Descriptors> d_;
};

// One cuBLASLt handle (created on the current device). FAILED_PRECONDITION
// when the library cannot be loaded.
absl::StatusOr<void*> CreateBlasHandle();

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_BLAS_H_
