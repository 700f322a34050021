// CUDA C++ for the GPU backend's kernels. The emitter writes one
// translation unit per module: a preamble of conversions and integer
// semantics that match the host interpreter, one device function per scalar
// computation a kernel calls (reducers, comparators), and one kernel per
// instruction it is given. Nothing here needs a GPU: the text is compiled by
// NVRTC (nvrtc.h) on any machine with the toolkit.
#ifndef KILN_RUNTIME_GPU_CODEGEN_H_
#define KILN_RUNTIME_GPU_CODEGEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::gpu {

// One kernel launch. Every kernel of an instruction takes, in order: one
// device pointer per operand of the instruction, then one per output array
// (the instruction's array, or each element of its tuple).
struct Launch {
  std::string name;
  // Iterations of the kernel's grid-stride loop (one per output element).
  int64_t iterations = 0;
  // Run the iterations in order on one thread (where they may conflict).
  bool one_thread = false;
  // Threads per block when each block computes one iteration together
  // (long reductions with few outputs); 0: one thread per iteration.
  int block_per_iteration = 0;
};

// The launches that compute an instruction, in order, and the buffers they
// read: the instruction's operands, or for a fused kernel the operands of
// the instructions fused into it.
struct KernelInfo {
  std::vector<Launch> launches;
  std::vector<const ir::Instruction*> inputs;
};

// Whether `producer`, used by `consumer` alone, may be computed inside
// consumer's kernel: an elementwise consumer, and an elementwise,
// broadcast or iota producer of the same shape.
bool CanFuse(const ir::Instruction& producer, const ir::Instruction& consumer);

// Whether the emitter has a kernel for `instr` (the executable runs the
// others itself: aliases, control flow, host work).
bool HasKernel(const ir::Instruction& instr);

// Thread-compatible.
class KernelEmitter {
 public:
  KernelEmitter();
  // Adds the kernel of `instr` (HasKernel must hold) and the device
  // functions it calls; the operands of `instr` in `fused` (see CanFuse)
  // are computed inside the kernel, recursively. UNIMPLEMENTED, naming the
  // instruction, for what the emitter cannot express (a reducer that is not
  // scalar code).
  absl::StatusOr<KernelInfo> Emit(const ir::Instruction& instr,
                                  const absl::flat_hash_set<const ir::Instruction*>& fused = {});
  // The translation unit so far.
  const std::string& source() const { return source_; }
  int kernel_count() const { return kernels_; }

 private:
  // The device function that evaluates the scalar computation `c`: its
  // parameters by value, then one pointer per result.
  absl::StatusOr<std::string> Function(const ir::Computation& c);
  // The device function a reduction over elements of `type` folds with:
  // Function(c), except that a sum or product of half-precision elements
  // accumulates in float and rounds once, at the store, as the host's
  // reductions do (runtime/host/reducer_ops.h).
  absl::StatusOr<std::string> Reducer(const ir::Computation& c, ElementType type);

  std::string source_;
  int kernels_ = 0;
  absl::flat_hash_map<const ir::Computation*, std::string> functions_;
  absl::flat_hash_set<std::string> accumulators_;  // Reducer's float functions emitted
};

// The CUDA value type of an element type inside generated code: halves are
// carried as float (always holding a value exact in the half type).
std::string ValueType(ElementType type);

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_CODEGEN_H_
