// Common-subexpression elimination.
#ifndef KILN_COMPILER_PASSES_CSE_H_
#define KILN_COMPILER_PASSES_CSE_H_

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Within each computation, replaces an instruction by an earlier one that
// computes the same value: the same opcode, result shape, operands (after
// earlier merges, in the same order), called computations and attributes.
// Constants merge only when their literals hold exactly the same bytes, so
// -0 and +0, or NaNs with different payloads, stay apart. Instructions with
// a side effect (rng draws, feeds, tokens, collectives, custom calls, and
// calls of computations holding one) and parameters never merge. Operand
// order is not normalized: add(a, b) and add(b, a) can differ in which NaN
// payload they return.
class Cse : public Pass {
 public:
  absl::string_view name() const override { return "cse"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CSE_H_
