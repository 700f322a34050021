// Dot fusion: a matrix product added to a value of its shape becomes one
// call that a GEMM runs by accumulating into that value (C = A B + beta C),
// so that the product is never written out on its own.
#ifndef KILN_COMPILER_PASSES_DOT_FUSION_H_
#define KILN_COMPILER_PASSES_DOT_FUSION_H_

#include <optional>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Outlines `add(dot(a, b), c)` or `add(dot(a, b), multiply(c, broadcast(s)))`
// (either operand order of the add and of the multiply), where `s` is a
// scalar constant, into a computation `fused_dot.N` called as
// `call(a, b, c)` where the add was (IsDotFusion); `s` is not zero (a GEMM
// with beta 0 does not read C, where `c * 0` is NaN for a c that is NaN or
// infinite). SGD's momentum update
// `v' = 0.9 v + dW` is one: the weight gradient's GEMM accumulates into
// the velocity, which, donated, is updated in place, and the gradient is
// never written. Fused only where:
//  - the dot is f32 (operands and result), of rank-2 operands, with one
//    contracting dimension each and no batch dimensions (a GEMM as it is,
//    or with an operand transposed);
//  - the dot's result is read by the add alone (and is not the root);
//  - the scaled value `multiply(c, broadcast(s))`, when there is one, is
//    read by the add alone (otherwise the multiply's result is `c`, with
//    beta 1);
//  - `c` is an f32 array of the dot's shape, neither `a` nor `b`, and not
//    a broadcast (a bias broadcast to the product stays the loop's to
//    expand as it reads the product: written out for the GEMM, it would
//    cost a pass of its own).
// The product and the addend are rounded once together rather than each
// on its own: results may differ from the unfused ones in the last bit.
// Runs before loop-fusion; rewrites the computations it does
// (FusibleComputations).
class DotFusion : public Pass {
 public:
  absl::string_view name() const override { return "dot-fusion"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

// A dot a GEMM runs as it is: f32 rank-2 operands and result, one
// contracting dimension each, no batch dimensions (the operands perhaps
// transposed).
bool IsGemmDot(const ir::Instruction& d);

// What a call of a dot fusion computes: the result is
// dot(parameter 0, parameter 1) + beta * parameter 2.
struct DotFusionForm {
  const ir::Instruction* dot = nullptr;
  double beta = 1;
};

// The form of `c` when it is what DotFusion outlines, which a backend
// checks again before running a call of it as one GEMM (modules come from
// clients): three parameters (a, b, c); a dot of the first two as above;
// optionally a scalar f32 constant other than zero, its broadcast to the
// dot's shape and
// their product with parameter 2; the root adds the dot and parameter 2
// (or that product). Nothing else.
std::optional<DotFusionForm> MatchDotFusion(const ir::Computation& c);
inline bool IsDotFusion(const ir::Computation& c) {
  return MatchDotFusion(c).has_value();
}

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_DOT_FUSION_H_
