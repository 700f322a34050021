// Dot bias fusion: a matrix product plus a bias along its columns, and the
// relu of that sum where it is the sum's one reader, becomes one call that
// a kernel runs as the product followed by the bias and relu over its
// rows in place, while they are in cache (the epilogue of a dense layer).
#ifndef KILN_COMPILER_PASSES_DOT_BIAS_FUSION_H_
#define KILN_COMPILER_PASSES_DOT_BIAS_FUSION_H_

#include <optional>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Outlines `add(dot(a, b), broadcast(bias))` (either operand order of the
// add) into a computation `fused_dot_bias.N` called as `call(a, b, bias)`
// where the add was (IsDotBiasFusion); with a relu that is the add's one
// reader (IsReluOf), the relu joins it and the call stands where the relu
// was. Fused only where:
//  - the dot is one a GEMM runs (IsGemmDot), read by the add alone (and
//    not the root);
//  - `bias` is an f32 vector of the product's columns, broadcast along
//    dimension 1 alone.
// The product, then the sum rounded as the add rounds it, then the
// maximum, as apart (the fused call's product may run on the other GEMM
// library, each timed for it: results may then differ in the last bits). Runs after
// dot-fusion (an addend of the product's shape is its) and before
// loop-fusion; rewrites the computations it does (FusibleComputations).
class DotBiasFusion : public Pass {
 public:
  absl::string_view name() const override { return "dot-bias-fusion"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

// What a call of a dot bias fusion computes: dot(parameter 0, parameter 1)
// plus parameter 2 broadcast along the columns, and with `relu` the
// maximum of that and +0.
struct DotBiasFusionForm {
  const ir::Instruction* dot = nullptr;
  bool relu = false;
};

// The form of `c` when it is what DotBiasFusion outlines, which a backend
// checks again before running a call of it as one kernel (modules come
// from clients): three parameters (a, b, bias); a dot of the first two as
// above; the broadcast of the third along dimension 1; their sum, the root,
// or read by the root, a relu with its scalar +0 and broadcast. Nothing
// else.
std::optional<DotBiasFusionForm> MatchDotBiasFusion(const ir::Computation& c);
inline bool IsDotBiasFusion(const ir::Computation& c) {
  return MatchDotBiasFusion(c).has_value();
}

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_DOT_BIAS_FUSION_H_
