// What every host kernel sees: the per-execution state and the kernel
// signature. Kernels are built once per instruction at compile time, with all
// shape arithmetic done then, and run many times.
#ifndef KILN_RUNTIME_HOST_KERNEL_H_
#define KILN_RUNTIME_HOST_KERNEL_H_

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "runtime/device.h"
#include "runtime/host/arena.h"
#include "runtime/host/host_buffer.h"

namespace kiln::host {

// Kernels see host buffers only.
using Buffer = HostBuffer;
using BufferPtr = HostBufferPtr;

// Per-execution state, owned by the Execute call.
struct ExecState {
  runtime::MemoryTracker* memory = nullptr;
  runtime::FeedQueue* infeed = nullptr;
  runtime::FeedQueue* outfeed = nullptr;
  const runtime::ExecuteOptions* options = nullptr;
  std::mt19937_64* rng = nullptr;
  // Each step's simulated cost is added here when set (tpusim).
  runtime::CostCounters* cost = nullptr;

  // Allocate's `result` for memory a kernel drops before it returns.
  static constexpr int kScratch = -2;
  // A new array (or tuple) of `shape`: the running step's planned array of
  // that shape when its program's arena offers one (arena.h), else fresh
  // memory charged to `memory`. `result`: which element of the step's
  // tuple it is (-1: its one array, or any), or kScratch.
  absl::StatusOr<BufferPtr> Allocate(const ir::Shape& shape, int result = -1) {
    if (t_offer != nullptr) {
      if (BufferPtr planned = t_offer->Take(shape, result)) return planned;
    }
    return Buffer::Allocate(shape, memory);
  }
};

using Kernel = std::function<absl::StatusOr<BufferPtr>(
    ExecState&, const std::vector<BufferPtr>& operands)>;

class Program;

// Gives kernel factories the compiled programs of called computations.
class ProgramSource {
 public:
  virtual ~ProgramSource() = default;
  virtual absl::StatusOr<std::shared_ptr<const Program>> Get(
      const ir::Computation* computation) = 0;
};

// The scalar binary op a computation applies to its two parameters, if it is
// exactly `op(p0, p1)` or `op(p1, p0)` for a commutative op (add, multiply,
// maximum, minimum, and, or): the fast path for reducers. The reducers
// reduction-fusion takes (passes::CommutativeReducerOp) are these.
std::optional<ir::Opcode> MatchScalarBinary(const ir::Computation& c);

// Kernel factories, one per op family.
absl::StatusOr<Kernel> MakeDataKernel(const ir::Instruction& instr);
absl::StatusOr<Kernel> MakeReduceKernel(const ir::Instruction& instr,
                                        ProgramSource& programs);
absl::StatusOr<Kernel> MakeWindowKernel(const ir::Instruction& instr,
                                        ProgramSource& programs);
absl::StatusOr<Kernel> MakeDotKernel(const ir::Instruction& instr);
// A call of a dot fusion (passes::MatchDotFusion): one GEMM that
// accumulates into its third operand. INVALID_ARGUMENT for a call of
// anything else.
absl::StatusOr<Kernel> MakeDotFusionKernel(const ir::Instruction& call);
// A call of a dot bias fusion (passes::MatchDotBiasFusion): one GEMM,
// then its rows plus the bias (and its relu) in place. INVALID_ARGUMENT for
// a call of anything else.
absl::StatusOr<Kernel> MakeDotBiasFusionKernel(const ir::Instruction& call);
absl::StatusOr<Kernel> MakeConvolutionKernel(const ir::Instruction& instr);
// A call of a convolution fusion (passes::MatchConvolutionFusion): one
// convolution that adds its third operand, a bias, along the output
// features, and takes the relu of the sum where the call's form has one. INVALID_ARGUMENT for a call of anything else.
absl::StatusOr<Kernel> MakeConvolutionFusionKernel(const ir::Instruction& call);
absl::StatusOr<Kernel> MakeGatherScatterKernel(const ir::Instruction& instr,
                                               ProgramSource& programs);
absl::StatusOr<Kernel> MakeSortKernel(const ir::Instruction& instr,
                                      ProgramSource& programs);
absl::StatusOr<Kernel> MakeCollectiveKernel(const ir::Instruction& instr);
absl::StatusOr<Kernel> MakeLinalgKernel(const ir::Instruction& instr);
// XLA's LAPACK calls that the parser keeps as custom calls (getrf, geqrf,
// orgqr, syevd, gesdd: compiler/ir/hlo_lowering.h), through LAPACK.
absl::StatusOr<Kernel> MakeLapackKernel(const ir::Instruction& instr);
absl::StatusOr<Kernel> MakeControlKernel(const ir::Instruction& instr,
                                         ProgramSource& programs);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_KERNEL_H_
