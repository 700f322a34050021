#include "compiler/passes/dce.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "compiler/passes/clone.h"
#include "compiler/passes/side_effects.h"

namespace kiln::passes {

absl::StatusOr<bool> Dce::Run(ir::Module* module) {
  if (module->entry() == nullptr) return false;
  const SideEffects effects(*module);
  absl::flat_hash_set<const ir::Instruction*> live;
  absl::flat_hash_set<const ir::Computation*> live_comps{module->entry()};
  std::vector<ir::Computation*> work{module->entry()};
  int total_instructions = 0;
  for (const auto& c : module->computations()) {
    total_instructions += c->instruction_count();
  }
  while (!work.empty()) {
    ir::Computation* comp = work.back();
    work.pop_back();
    // Users after operands, so one backward walk marks everything.
    RETURN_IF_ERROR(comp->Canonicalize());
    const auto& instrs = comp->instructions();
    for (auto it = instrs.rbegin(); it != instrs.rend(); ++it) {
      const ir::Instruction* instr = it->get();
      const bool keep = instr == comp->root() ||
                        instr->opcode() == ir::Opcode::kParameter ||
                        effects.HasSideEffect(*instr) || live.contains(instr);
      if (!keep) continue;
      live.insert(instr);
      for (const ir::Instruction* op : instr->operands()) live.insert(op);
      for (ir::Computation* callee : instr->called()) {
        if (live_comps.insert(callee).second) work.push_back(callee);
      }
    }
  }
  if (static_cast<int>(live.size()) == total_instructions &&
      live_comps.size() == module->computations().size()) {
    return false;
  }
  CloneFilter filter;
  filter.keep_computation = [&](const ir::Computation& c) {
    return live_comps.contains(&c);
  };
  filter.keep_instruction = [&](const ir::Instruction& i) {
    return live.contains(&i);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> pruned,
                   CloneModule(*module, filter));
  *module = std::move(*pruned);
  return true;
}

}  // namespace kiln::passes
