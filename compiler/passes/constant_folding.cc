#include "compiler/passes/constant_folding.h"

#include <optional>
#include <vector>

#include "base/status_macros.h"
#include "compiler/passes/evaluator.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {
namespace {

// The operands' values when every operand is an array constant and the
// result stays within the size bounds.
std::optional<std::vector<const ir::Literal*>> FoldableOperands(
    const ir::Instruction& instr) {
  if (!IsEvaluable(instr.opcode()) || !instr.shape().IsArray()) {
    return std::nullopt;
  }
  std::vector<const ir::Literal*> values;
  int64_t operand_bytes = 0;
  for (const ir::Instruction* op : instr.operands()) {
    if (op->opcode() != ir::Opcode::kConstant || !op->shape().IsArray()) {
      return std::nullopt;
    }
    values.push_back(&op->attrs().literal);
    operand_bytes += op->shape().ByteSize();
  }
  const int64_t bytes = instr.shape().ByteSize();
  if (bytes > ConstantFolding::kMaxBytes || bytes > operand_bytes) {
    return std::nullopt;
  }
  return values;
}

// The constant that replaces `instr`, or nullptr to leave it.
absl::StatusOr<ir::Instruction*> Fold(ir::Instruction* instr,
                                      Rewriter& rewriter) {
  std::optional<std::vector<const ir::Literal*>> values =
      FoldableOperands(*instr);
  if (!values.has_value()) return nullptr;
  std::optional<ir::Literal> value = Evaluate(*instr, *values);
  if (!value.has_value()) return nullptr;
  auto constant = std::make_unique<ir::Instruction>(ir::Opcode::kConstant,
                                                    instr->shape(), "");
  constant->mutable_attrs().literal = *std::move(value);
  return rewriter.Add(std::move(constant), instr->name());
}

}  // namespace

absl::StatusOr<bool> ConstantFolding::Run(ir::Module* module) {
  bool changed = false;
  for (const auto& comp : module->computations()) {
    Rewriter rewriter(comp.get());
    ASSIGN_OR_RETURN(bool comp_changed,
                     rewriter.Run([&](ir::Instruction* instr) {
                       return Fold(instr, rewriter);
                     }));
    changed = changed || comp_changed;
  }
  return changed;
}

}  // namespace kiln::passes
