// Reduction fusion: a reduce of a value that a loop computes joins that
// loop, so that the loop's one pass over memory feeds the reduction while
// the value is in cache (or without writing the value at all).
#ifndef KILN_COMPILER_PASSES_REDUCTION_FUSION_H_
#define KILN_COMPILER_PASSES_REDUCTION_FUSION_H_

#include <optional>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Outlines a reduce and the loop that computes its operand into one
// computation `fused_reduction.N`, called where the reduce was
// (IsReductionFusion). The operand is a loop fusion's call (loop-fusion
// runs first), an element of a multi-output one, or a lone elementwise
// instruction. The loop's results that other instructions read stay
// results of the new call (a tuple: the loop's outputs, then the reduce's
// result): a bias gradient reduced from the relu gradient that the weight
// gradient also reads takes one pass. Fused only where:
//  - the reduce has one operand and its initial value has one element;
//  - the reducer is one commutative binary op of its two parameters
//    (add, multiply, maximum, minimum, and, or);
//  - the reduced dimensions are the operand's leading or its trailing
//    ones, so that a pass in row-major order meets each result's elements
//    in the order the reduce folds them (results unchanged, bit for bit);
//  - the initial value is not computed from the loop.
// A loop feeds at most one reduce. Rewrites the computations LoopFusion
// does (FusibleComputations).
class ReductionFusion : public Pass {
 public:
  absl::string_view name() const override { return "reduction-fusion"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

// The op of a reducer that is one commutative binary op of its two scalar
// parameters (add, multiply, maximum, minimum, and, or), else nullopt.
std::optional<ir::Opcode> CommutativeReducerOp(const ir::Computation& reducer);

// Whether `reduce` folds the leading dimensions of its operand (0..k-1,
// fewer than all) or its trailing ones (all of them included).
bool ReducesLeadingDims(const ir::Instruction& reduce);
bool ReducesTrailingDims(const ir::Instruction& reduce);

// Whether `c` has the form ReductionFusion outlines, which a backend checks
// again before running a call of it as one loop (modules come from
// clients): its root is a reduce as above of an instruction of the loop
// and a parameter of one element, or a tuple of one or more distinct
// instructions of the loop (not parameters) followed by such a reduce; every other
// instruction other than a parameter forms a loop of the reduced value's
// dimensions (IsLoopBody).
bool IsReductionFusion(const ir::Computation& c);

// The reduce of a computation for which IsReductionFusion holds.
const ir::Instruction* FusedReduce(const ir::Computation& c);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_REDUCTION_FUSION_H_
