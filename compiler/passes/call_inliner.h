// Call inlining.
#ifndef KILN_COMPILER_PASSES_CALL_INLINER_H_
#define KILN_COMPILER_PASSES_CALL_INLINER_H_

#include <cstdint>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Replaces each `call` (and so each `fusion` a parsed module spelled, which
// the parser reads as a call) by a copy of the called computation's
// instructions, its parameters replaced by the call's operands, so that
// what the callee computes can be simplified and fused with the caller's
// work. Calls into computations with a side effect (feeds, random numbers,
// collectives) stay, keeping the order of those effects. Nested calls are
// inlined too; computations left without callers are dropped by DCE. The
// module grows to at most 4 times its instructions plus
// kExtraInstructions, and twice its constant bytes plus
// kExtraConstantBytes; calls past that stay calls.
class CallInliner : public Pass {
 public:
  static constexpr int64_t kExtraInstructions = 100000;
  static constexpr int64_t kExtraConstantBytes = int64_t{64} << 20;

  absl::string_view name() const override { return "call-inliner"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CALL_INLINER_H_
