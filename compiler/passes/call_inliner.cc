#include "compiler/passes/call_inliner.h"

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/status_macros.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/rewriter.h"
#include "compiler/passes/side_effects.h"

namespace kiln::passes {
namespace {

// Copies `callee`'s instructions into the rewriter's computation with
// `args` for its parameters; returns the copy of its root.
absl::StatusOr<ir::Instruction*> Inline(const ir::Computation& callee,
                                        const std::vector<ir::Instruction*>& args,
                                        Rewriter& rewriter) {
  absl::flat_hash_map<const ir::Instruction*, ir::Instruction*> copy_of;
  for (const auto& instr : callee.instructions()) {
    if (instr->opcode() == ir::Opcode::kParameter) {
      const int64_t number = instr->attrs().parameter_number;
      if (number < 0 || number >= static_cast<int64_t>(args.size())) {
        return absl::InternalError("a call passes fewer arguments than its callee takes");
      }
      copy_of[instr.get()] = args[number];
      continue;
    }
    auto copy = std::make_unique<ir::Instruction>(instr->opcode(), instr->shape(), "");
    copy->mutable_attrs() = instr->attrs();
    copy->set_source_line(instr->source_line());
    for (const ir::Instruction* op : instr->operands()) copy->AddOperand(copy_of.at(op));
    for (ir::Computation* c : instr->called()) copy->AddCalled(c);
    ASSIGN_OR_RETURN(copy_of[instr.get()], rewriter.Add(std::move(copy), instr->name()));
  }
  return copy_of.at(callee.root());
}

}  // namespace

// Instructions and constant bytes of `c`.
std::pair<int64_t, int64_t> SizeOf(const ir::Computation& c) {
  int64_t bytes = 0;
  for (const auto& instr : c.instructions()) {
    if (instr->opcode() == ir::Opcode::kConstant) {
      bytes += static_cast<int64_t>(instr->attrs().literal.bytes().size());
    }
  }
  return {c.instruction_count(), bytes};
}

absl::StatusOr<bool> CallInliner::Run(ir::Module* module) {
  bool changed = false;
  // Inlining copies a callee per call site: a module whose calls fan out
  // (each level calling the next twice) would grow exponentially. Calls
  // past the budget stay calls.
  int64_t instructions = 0, constant_bytes = 0;
  for (const auto& comp : module->computations()) {
    const auto [n, bytes] = SizeOf(*comp);
    instructions += n;
    constant_bytes += bytes;
  }
  const int64_t max_instructions = 4 * instructions + kExtraInstructions;
  const int64_t max_constant_bytes = 2 * constant_bytes + kExtraConstantBytes;
  // Each sweep inlines one level of nesting; a call graph is acyclic, so
  // the sweeps end.
  for (bool swept = true; swept;) {
    swept = false;
    const SideEffects effects(*module);
    for (const auto& comp : module->computations()) {
      Rewriter rewriter(comp.get());
      ASSIGN_OR_RETURN(bool comp_changed,
                       rewriter.Run([&](ir::Instruction* instr)
                                        -> absl::StatusOr<ir::Instruction*> {
                         if (instr->opcode() != ir::Opcode::kCall ||
                             effects.HasSideEffect(*instr)) {
                           return nullptr;
                         }
                         const auto [n, bytes] = SizeOf(*instr->called(0));
                         if (instructions + n > max_instructions ||
                             constant_bytes + bytes > max_constant_bytes) {
                           return nullptr;
                         }
                         instructions += n;
                         constant_bytes += bytes;
                         // A callee whose copy shape inference refuses
                         // stays called (and still runs).
                         absl::StatusOr<ir::Instruction*> root =
                             Inline(*instr->called(0), instr->operands(), rewriter);
                         return root.ok() ? *root : nullptr;
                       }));
      swept = swept || comp_changed;
    }
    changed = changed || swept;
    // The replaced calls stay behind without users; the next sweep must
    // not meet them again.
    if (swept) RETURN_IF_ERROR(Dce().Run(module).status());
  }
  return changed;
}

}  // namespace kiln::passes
