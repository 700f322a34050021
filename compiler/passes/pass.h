// The interface of a compiler pass: one rewrite of a module.
#ifndef KILN_COMPILER_PASSES_PASS_H_
#define KILN_COMPILER_PASSES_PASS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/instruction.h"

namespace kiln::passes {

// A pass rewrites a verified module into an equivalent one: the same
// results for the same arguments, bit for bit unless its documentation says
// otherwise, the same entry parameters and result shape, and the same order
// of random draws. Passes are not thread-safe; one module is rewritten by
// one thread at a time.
class Pass {
 public:
  virtual ~Pass() = default;

  // A short name for errors and dumps ("dce", "cse").
  virtual absl::string_view name() const = 0;

  // Rewrites `module` (borrowed) in place and says whether it changed
  // anything. A pass leaves every computation with operands before users.
  // Errors are for what the pass cannot handle; the module is then left
  // valid but possibly partly rewritten.
  virtual absl::StatusOr<bool> Run(ir::Module* module) = 0;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_PASS_H_
