#include "compiler/passes/clone.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kiln::passes {
namespace {

absl::Status Dropped(absl::string_view user, absl::string_view what,
                     absl::string_view name) {
  return absl::InternalError(absl::StrCat("module copy keeps ", user,
                                          " but drops its ", what, " ", name));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ir::Module>> CloneModule(
    const ir::Module& module, const CloneFilter& filter) {
  auto keep_comp = [&](const ir::Computation& c) {
    return !filter.keep_computation || filter.keep_computation(c);
  };
  auto keep_instr = [&](const ir::Instruction& i) {
    return !filter.keep_instruction || filter.keep_instruction(i);
  };
  auto result = std::make_unique<ir::Module>(module.name());
  // Every object first, then the references between them: operands and
  // callees may come after their users in a module not yet canonical.
  absl::flat_hash_map<const ir::Computation*, ir::Computation*> comp_of;
  absl::flat_hash_map<const ir::Instruction*, ir::Instruction*> instr_of;
  for (const auto& c : module.computations()) {
    if (!keep_comp(*c)) continue;
    ir::Computation* copy =
        result->AddComputation(std::make_unique<ir::Computation>(c->name()));
    comp_of[c.get()] = copy;
    for (const auto& instr : c->instructions()) {
      if (!keep_instr(*instr)) continue;
      auto out = std::make_unique<ir::Instruction>(
          instr->opcode(), instr->shape(), instr->name());
      // Before AddInstruction, which files parameters by their number.
      out->mutable_attrs() = instr->attrs();
      instr_of[instr.get()] = copy->AddInstruction(std::move(out));
    }
  }
  for (const auto& c : module.computations()) {
    auto comp_it = comp_of.find(c.get());
    if (comp_it == comp_of.end()) continue;
    for (const auto& instr : c->instructions()) {
      auto it = instr_of.find(instr.get());
      if (it == instr_of.end()) continue;
      for (const ir::Instruction* op : instr->operands()) {
        auto op_it = instr_of.find(op);
        if (op_it == instr_of.end()) {
          return Dropped(instr->name(), "operand", op->name());
        }
        it->second->AddOperand(op_it->second);
      }
      for (const ir::Computation* callee : instr->called()) {
        auto callee_it = comp_of.find(callee);
        if (callee_it == comp_of.end()) {
          return Dropped(instr->name(), "callee", callee->name());
        }
        it->second->AddCalled(callee_it->second);
      }
    }
    if (c->root() != nullptr) {
      auto root_it = instr_of.find(c->root());
      if (root_it == instr_of.end()) {
        return Dropped(c->name(), "root", c->root()->name());
      }
      comp_it->second->set_root(root_it->second);
    }
  }
  if (module.entry() != nullptr) {
    auto entry_it = comp_of.find(module.entry());
    if (entry_it == comp_of.end()) {
      return absl::InternalError(absl::StrCat(
          "module copy drops the entry computation ", module.entry()->name()));
    }
    result->set_entry(entry_it->second);
  }
  return result;
}

}  // namespace kiln::passes
