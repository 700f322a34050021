// Deep copies of modules: what a backend compiles without touching the
// caller's module, and how DCE drops instructions (the IR's computations
// only ever grow, so a smaller module is a filtered copy).
#ifndef KILN_COMPILER_PASSES_CLONE_H_
#define KILN_COMPILER_PASSES_CLONE_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::passes {

// Which parts of a module a copy keeps; a null predicate keeps everything.
struct CloneFilter {
  std::function<bool(const ir::Computation&)> keep_computation;
  std::function<bool(const ir::Instruction&)> keep_instruction;
};

// A copy of `module` with the same names, instruction order, shapes,
// attributes and constant bytes, holding what `filter` keeps. Every kept
// instruction's operands and called computations, every kept computation's
// root and the entry must be kept: INTERNAL otherwise (a caller's bug).
// The copy shares nothing with `module`.
absl::StatusOr<std::unique_ptr<ir::Module>> CloneModule(
    const ir::Module& module, const CloneFilter& filter = {});

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CLONE_H_
