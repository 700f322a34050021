// Dead-code elimination.
#ifndef KILN_COMPILER_PASSES_DCE_H_
#define KILN_COMPILER_PASSES_DCE_H_

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Removes every instruction that neither reaches its computation's root nor
// has a side effect (side_effects.h), and every computation that no
// remaining instruction calls (transitively from the entry). Parameters
// always stay: they are the computation's signature. Kept instructions keep
// their names and relative order, so random draws keep their order too.
class Dce : public Pass {
 public:
  absl::string_view name() const override { return "dce"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_DCE_H_
