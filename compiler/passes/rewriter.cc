#include "compiler/passes/rewriter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/shape_inference.h"

namespace kiln::passes {

Rewriter::Rewriter(ir::Computation* computation) : computation_(computation) {
  for (const auto& instr : computation->instructions()) {
    names_.insert(instr->name());
  }
}

ir::Instruction* Rewriter::Resolve(ir::Instruction* instr) const {
  // Rules return instructions that are already final, so chains are short;
  // following them keeps a rule that returns an older name correct anyway.
  for (auto it = replaced_.find(instr); it != replaced_.end();
       it = replaced_.find(instr)) {
    instr = it->second;
  }
  return instr;
}

absl::StatusOr<bool> Rewriter::Run(const Rule& rule) {
  bool changed = false;
  const int count = computation_->instruction_count();
  for (int i = 0; i < count; ++i) {
    ir::Instruction* instr = computation_->instructions()[i].get();
    for (int k = 0; k < instr->operand_count(); ++k) {
      ir::Instruction* op = Resolve(instr->operand(k));
      if (op != instr->operand(k)) instr->ReplaceOperand(k, op);
    }
    ASSIGN_OR_RETURN(ir::Instruction * result, rule(instr));
    if (result == nullptr) continue;
    changed = true;
    if (result == instr) continue;
    if (result->shape() != instr->shape()) {
      return absl::InternalError(absl::StrCat(
          "rewrite replaces ", instr->name(), " (", instr->shape().ToString(),
          ") by ", result->name(), " (", result->shape().ToString(), ")"));
    }
    replaced_[instr] = result;
  }
  if (!changed) return false;
  computation_->set_root(Resolve(computation_->root()));
  RETURN_IF_ERROR(computation_->Canonicalize());
  return true;
}

absl::StatusOr<ir::Instruction*> Rewriter::Add(
    std::unique_ptr<ir::Instruction> instr, absl::string_view base_name) {
  absl::StatusOr<ir::Shape> inferred = ir::InferShape(*instr);
  if (!inferred.ok() || *inferred != instr->shape()) {
    return absl::InternalError(absl::StrCat(
        "new ", ir::OpcodeName(instr->opcode()), " declares ",
        instr->shape().ToString(), " but shape inference gives ",
        inferred.ok() ? inferred->ToString() : inferred.status().message()));
  }
  std::string name(base_name);
  for (int n = 1; names_.contains(name); ++n) {
    name = absl::StrCat(base_name, ".", n);
  }
  names_.insert(name);
  instr->set_name(std::move(name));
  return computation_->AddInstruction(std::move(instr));
}

bool UpdateIfShapeHolds(ir::Instruction* instr,
                        const std::vector<ir::Instruction*>& operands,
                        const ir::Attributes& attrs) {
  if (static_cast<int>(operands.size()) != instr->operand_count()) return false;
  ir::Instruction candidate(instr->opcode(), instr->shape(), instr->name());
  for (ir::Instruction* op : operands) candidate.AddOperand(op);
  for (ir::Computation* callee : instr->called()) candidate.AddCalled(callee);
  candidate.mutable_attrs() = attrs;
  absl::StatusOr<ir::Shape> inferred = ir::InferShape(candidate);
  if (!inferred.ok() || *inferred != instr->shape()) return false;
  for (size_t k = 0; k < operands.size(); ++k) {
    instr->ReplaceOperand(static_cast<int>(k), operands[k]);
  }
  instr->mutable_attrs() = attrs;
  return true;
}

bool IsUniform(const ir::Instruction* x, const ir::Literal& probe) {
  if (x->opcode() == ir::Opcode::kBroadcast) x = x->operand(0);
  if (x->opcode() != ir::Opcode::kConstant || !x->shape().IsArray()) return false;
  const ir::Literal& lit = x->attrs().literal;
  if (lit.shape().type() != probe.shape().type()) return false;
  const size_t size = probe.bytes().size();
  for (int64_t i = 0; i < lit.element_count(); ++i) {
    if (std::memcmp(lit.bytes().data() + i * size, probe.bytes().data(),
                    size) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace kiln::passes
