// Constant folding.
#ifndef KILN_COMPILER_PASSES_CONSTANT_FOLDING_H_
#define KILN_COMPILER_PASSES_CONSTANT_FOLDING_H_

#include <cstdint>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Replaces an instruction whose operands are all constants by a constant
// holding its value, computed by Evaluate (evaluator.h) exactly
// as the host interpreter would; ops and values it does not cover stay.
// Chains fold in one run. Folding never makes constants larger than what
// they replace: a folded literal holds at most kMaxBytes, and no more bytes
// than its operands together, so a broadcast or an iota stays an
// instruction the backend generates (and fuses) rather than becoming an
// array in memory. (The algebraic simplifier moves elementwise ops on
// broadcasts before the broadcast, where they fold small.)
class ConstantFolding : public Pass {
 public:
  static constexpr int64_t kMaxBytes = int64_t{1} << 20;

  absl::string_view name() const override { return "constant-folding"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CONSTANT_FOLDING_H_
