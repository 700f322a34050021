// The verifier: the gate every module passes before compilation.
#ifndef KILN_COMPILER_IR_VERIFIER_H_
#define KILN_COMPILER_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

// Longest chain of nested calls (call, while, conditional, reducers, ...) a
// module may have: compiling and running recurse once per level.
inline constexpr int kMaxCallDepth = 64;

// Checks `module` is well formed: an entry exists; every computation has a
// root, parameters numbered 0..n-1 once each, unique instruction names, no
// cycles; called computations belong to the module, do not recurse and nest
// at most kMaxCallDepth deep; every
// shape is valid and equals what shape inference computes. Returns
// InvalidArgument naming the computation and instruction at fault.
// Reorders instructions into canonical order (operands before users).
absl::Status Verify(Module& module);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_VERIFIER_H_
