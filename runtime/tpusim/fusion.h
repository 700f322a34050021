// What a TPU would run as one kernel: XLA-like fusion of a module's
// computations into regions, for pricing. The simulator still runs every
// instruction with the host's kernels; only the cost model follows these
// regions.
//
// The rules (XLA's instruction fusion as its TPU backend applies it,
// simplified):
// - Loop ops fuse into their users: elementwise ops, broadcast, reshape,
//   transpose, slice, dynamic-slice, pad, concatenate, reverse, iota,
//   constant and reduce-precision.
// - A producer joins its user's region only when every user of the
//   producer is in that region, so a region writes only its root. A
//   broadcast, an iota or a constant is recomputed in each region that
//   reads it instead (duplicated; its own operands are then read).
// - A region holds at most one dot, convolution, reduce or reduce-window.
//   Loop ops fuse into a reduction's input (XLA's input fusion); a dot or a
//   convolution fuses into its elementwise users (output fusion: bias,
//   activation, residual add); only layout ops (broadcast, reshape,
//   transpose, convert, pad, slice, constant, iota) fuse into a dot's or a
//   convolution's operands.
// - Everything else (sort, scatter, gather, dynamic-update-slice, feeds,
//   collectives, random numbers, custom calls) is a region of its own, and
//   parameters, tuples, get-tuple-element and control flow are free.
// - Reductions that read the same input and do not depend on each other
//   read it in one pass (XLA's multi-output fusion of siblings): the
//   first pays for the read. A reduction of an elementwise region's
//   result runs in that region's pass (multi-output fusion of producer and
//   consumer) and reads nothing for it, unless it also reads a value
//   computed from that result elsewhere. A reduction joins at most one
//   such pass.
#ifndef KILN_RUNTIME_TPUSIM_FUSION_H_
#define KILN_RUNTIME_TPUSIM_FUSION_H_

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "compiler/ir/instruction.h"

namespace kiln::tpusim {

struct FusedRegion {
  // Operands before users; the root (whose value the region writes) last.
  std::vector<const ir::Instruction*> members;
  // Members recomputed here whose value other regions read too.
  std::vector<const ir::Instruction*> duplicated;
  // Inputs this region reads in the same pass as a sibling region
  // (multi-output fusion), which pays for the read.
  std::vector<const ir::Instruction*> shared_reads;
};

// Plans the computations that run as programs (the entry, loop bodies and
// conditions, branches, callees); a reduction's or a sort's computation is
// priced as part of that op. Immutable after construction; borrows the
// module, which must outlive it.
class FusionPlan {
 public:
  explicit FusionPlan(const ir::Module& module);

  // The region whose root is `instr`, or nullptr (fused into another
  // region, or free).
  const FusedRegion* RegionRootedAt(const ir::Instruction* instr) const;
  const std::vector<std::unique_ptr<FusedRegion>>& regions() const { return regions_; }

 private:
  void Plan(const ir::Computation& computation);
  void ShareSiblingReads(const std::vector<FusedRegion*>& reductions);

  std::vector<std::unique_ptr<FusedRegion>> regions_;
  absl::flat_hash_map<const ir::Instruction*, const FusedRegion*> root_of_;
};

// Whether `op` does no work of its own on a TPU (parameters, constants,
// tuples, control flow, ids).
bool IsFreeOp(ir::Opcode op);

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_FUSION_H_
