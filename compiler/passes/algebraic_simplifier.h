// Algebraic simplification: rewrites that give bit-identical results.
#ifndef KILN_COMPILER_PASSES_ALGEBRAIC_SIMPLIFIER_H_
#define KILN_COMPILER_PASSES_ALGEBRAIC_SIMPLIFIER_H_

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Rewrites, each exact for every value of every element type it applies to
// (a constant below is a constant or a broadcast of one whose elements all
// equal the value, bit for bit):
//
// Identities (x itself replaces the op):
//   x + c, c + x    c = -0.0 for floats (x + -0 = x for every x, -0 and +0
//                   included; x + +0 is not: -0 + +0 = +0), 0 for integers
//   x - c           c = +0.0 for floats, 0 for integers
//   x * c, c * x    c = 1
//   x / c           c = 1
//   x | c, c | x, x ^ c, c ^ x   c = 0 or false
//   x & c, c & x    c = all ones or true
//   x << c, x >> c  c = 0 (both right shifts)
//   max(x, x), min(x, x), x & x, x | x
//   negate(negate(x)), not(not(x)), convert(x) to x's own type
//   select(p, x, x); select(c, x, y) with c all true (x) or all false (y)
//   get-tuple-element(tuple(..., x, ...)) of x's position
//   reshape to x's own dims; transpose by the identity; broadcast to x's
//   own dims in order; a slice of all of x; a pad by nothing; a reverse of
//   no dimension longer than 1; a concatenate of x alone.
// The float identities hold for NaNs too, up to one thing the arithmetic
// they replace would do: quiet a signaling NaN (x * 1 turns a signaling
// NaN into the same NaN, quiet; x keeps it signaling).
//
// Chains (the outer op is changed to read the innermost operand):
//   reshape(reshape(x))            -> reshape(x)
//   transpose(transpose(x, p), q)  -> transpose(x, p∘q), or x if identity
//   broadcast(broadcast(x, d), e)  -> broadcast(x, e∘d), or x if identity
//
// Broadcasts: an elementwise op whose operands are all broadcast the same
// way (a scalar each, say) runs before the broadcast instead:
//   op(broadcast(a), broadcast(b)) -> broadcast(op(a, b))
//
// Dots: dot(transpose(a), b) reads a directly, the transpose moved into the
// dimension numbers (batch and contracting dims renamed through the
// permutation), when the free dimensions keep their order, so the result's
// dimensions are unchanged; likewise for the right operand. Sums may then
// be accumulated in another order by the backend's matrix kernel.
//
// A rule that would drop an operand (select, get-tuple-element) applies only
// when what it drops has no side effect upstream (an rng draw must neither
// vanish nor move). Copies stay: a copy is asked for explicitly.
class AlgebraicSimplifier : public Pass {
 public:
  absl::string_view name() const override { return "algebraic-simplifier"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_ALGEBRAIC_SIMPLIFIER_H_
