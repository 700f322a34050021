// The sweep the rewriting passes share: visit a computation's instructions
// in order and replace each by an equivalent one.
#ifndef KILN_COMPILER_PASSES_REWRITER_H_
#define KILN_COMPILER_PASSES_REWRITER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::passes {

// Rewrites one computation (borrowed) in a single forward sweep. Before an
// instruction is visited its operands are redirected to what replaced
// them, so a rule always sees the rewritten graph and a chain folds in one
// sweep. Replaced instructions stay behind without users for DCE. Not
// thread-safe.
class Rewriter {
 public:
  // What a rule returns for `instr`: nullptr to leave it alone, `instr`
  // itself after changing it in place, or another instruction of the
  // computation with the same shape to replace it everywhere.
  using Rule =
      std::function<absl::StatusOr<ir::Instruction*>(ir::Instruction* instr)>;

  explicit Rewriter(ir::Computation* computation);

  // Visits every instruction present when it starts (not the ones rules
  // add), then redirects the root and restores operand-before-user order.
  // Returns whether any rule changed anything; INTERNAL when a rule
  // replaces an instruction by one of another shape.
  absl::StatusOr<bool> Run(const Rule& rule);

  // Adds `instr` (operands in this computation) under a name made unique
  // from `base_name`. INTERNAL unless shape inference gives its declared
  // shape.
  absl::StatusOr<ir::Instruction*> Add(std::unique_ptr<ir::Instruction> instr,
                                       absl::string_view base_name);

  ir::Computation* computation() const { return computation_; }

 private:
  ir::Instruction* Resolve(ir::Instruction* instr) const;

  ir::Computation* computation_;
  absl::flat_hash_set<std::string> names_;
  absl::flat_hash_map<const ir::Instruction*, ir::Instruction*> replaced_;
};

// Gives `instr` the operands `operands` (as many as it has) and attributes
// `attrs` when shape inference finds its shape unchanged by them; returns
// whether it did. Called computations stay.
bool UpdateIfShapeHolds(ir::Instruction* instr,
                        const std::vector<ir::Instruction*>& operands,
                        const ir::Attributes& attrs);

// Whether every element of `x` holds the bytes of the scalar `probe`: x is
// a constant, or a broadcast of one, all of whose elements do.
bool IsUniform(const ir::Instruction* x, const ir::Literal& probe);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_REWRITER_H_
