#include "compiler/passes/cse.h"

#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "base/status_macros.h"
#include "compiler/passes/rewriter.h"
#include "compiler/passes/side_effects.h"

namespace kiln::passes {
namespace {

// A hash of what makes two instructions equal, cheap next to comparing
// them: attributes other than a constant's bytes are left to the equality
// check.
size_t HashOf(const ir::Instruction& instr) {
  size_t h = absl::HashOf(instr.opcode(), instr.shape().ToString(),
                          instr.operands(), instr.called());
  if (instr.opcode() == ir::Opcode::kConstant) {
    const std::vector<uint8_t>& bytes = instr.attrs().literal.bytes();
    h = absl::HashOf(
        h, std::string_view(reinterpret_cast<const char*>(bytes.data()),
                            bytes.size()));
  }
  return h;
}

bool SameValue(const ir::Instruction& a, const ir::Instruction& b) {
  // Attributes compare literals by shape and exact bytes.
  return a.opcode() == b.opcode() && a.shape() == b.shape() &&
         a.operands() == b.operands() && a.called() == b.called() &&
         a.attrs() == b.attrs();
}

}  // namespace

absl::StatusOr<bool> Cse::Run(ir::Module* module) {
  const SideEffects effects(*module);
  bool changed = false;
  for (const auto& comp : module->computations()) {
    absl::flat_hash_map<size_t, std::vector<ir::Instruction*>> seen;
    Rewriter rewriter(comp.get());
    ASSIGN_OR_RETURN(
        bool comp_changed,
        rewriter.Run([&](ir::Instruction* instr) -> ir::Instruction* {
          if (instr->opcode() == ir::Opcode::kParameter ||
              effects.HasSideEffect(*instr)) {
            return nullptr;
          }
          std::vector<ir::Instruction*>& bucket = seen[HashOf(*instr)];
          for (ir::Instruction* earlier : bucket) {
            if (SameValue(*earlier, *instr)) return earlier;
          }
          bucket.push_back(instr);
          return nullptr;
        }));
    changed = changed || comp_changed;
  }
  return changed;
}

}  // namespace kiln::passes
