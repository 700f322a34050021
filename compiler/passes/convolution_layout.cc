#include "compiler/passes/convolution_layout.h"

#include <memory>
#include <vector>

#include "base/status_macros.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {
namespace {

using ir::Instruction;
using ir::Opcode;

// Renames dimensions of a transpose's result to its operand's: the
// transpose's dimension d is its operand's perm[d].
void Rename(const std::vector<int64_t>& perm, int64_t& d) { d = perm[d]; }
void Rename(const std::vector<int64_t>& perm, std::vector<int64_t>& dims) {
  for (int64_t& d : dims) d = perm[d];
}

// Folds transposes of `conv`'s operands into its dimension numbers; whether
// it did.
bool FoldOperandTransposes(Instruction* conv) {
  ir::Attributes attrs = conv->attrs();
  ir::ConvDims& c = attrs.conv;
  std::vector<Instruction*> operands = {conv->operand(0), conv->operand(1)};
  bool folded = false;
  if (operands[0]->opcode() == Opcode::kTranspose) {
    const std::vector<int64_t>& perm = operands[0]->attrs().dimensions;
    Rename(perm, c.input_batch);
    Rename(perm, c.input_feature);
    Rename(perm, c.input_spatial);
    operands[0] = operands[0]->operand(0);
    folded = true;
  }
  if (operands[1]->opcode() == Opcode::kTranspose) {
    const std::vector<int64_t>& perm = operands[1]->attrs().dimensions;
    Rename(perm, c.kernel_input_feature);
    Rename(perm, c.kernel_output_feature);
    Rename(perm, c.kernel_spatial);
    operands[1] = operands[1]->operand(0);
    folded = true;
  }
  return folded && UpdateIfShapeHolds(conv, operands, attrs);
}

}  // namespace

absl::StatusOr<bool> ConvolutionLayout::Run(ir::Module* module) {
  bool changed = false;
  for (const auto& comp : module->computations()) {
    const Users readers = UsersOf(*comp);
    Rewriter rewriter(comp.get());
    ASSIGN_OR_RETURN(
        bool comp_changed,
        rewriter.Run([&](Instruction* instr) -> absl::StatusOr<Instruction*> {
          if (instr->opcode() == Opcode::kConvolution && instr->operand_count() == 2) {
            return FoldOperandTransposes(instr) ? instr : nullptr;
          }
          if (instr->opcode() != Opcode::kTranspose) return nullptr;
          Instruction* conv = instr->operand(0);
          auto it = readers.find(conv);
          if (conv->opcode() != Opcode::kConvolution || conv->operand_count() != 2 ||
              it == readers.end() || it->second.size() != 1 || conv == comp->root()) {
            return nullptr;
          }
          // The convolution's output dimension d is the transpose's
          // inverse[d].
          const std::vector<int64_t>& perm = instr->attrs().dimensions;
          std::vector<int64_t> inverse(perm.size());
          for (size_t j = 0; j < perm.size(); ++j) inverse[perm[j]] = static_cast<int64_t>(j);
          auto folded = NewInstruction(Opcode::kConvolution, instr->shape(), conv->name(),
                                       {conv->operand(0), conv->operand(1)});
          folded->mutable_attrs() = conv->attrs();
          ir::ConvDims& c = folded->mutable_attrs().conv;
          Rename(inverse, c.output_batch);
          Rename(inverse, c.output_feature);
          Rename(inverse, c.output_spatial);
          folded->set_source_line(conv->source_line());
          return rewriter.Add(std::move(folded), conv->name());
        }));
    changed |= comp_changed;
  }
  if (changed) RETURN_IF_ERROR(Dce().Run(module).status());
  return changed;
}

}  // namespace kiln::passes
