#include "compiler/passes/dot_bias_fusion.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "compiler/passes/dot_fusion.h"
#include "compiler/passes/fusion.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::ElementType;
using ir::Instruction;
using ir::Opcode;

// Whether `b` broadcasts an f32 vector along dimension 1 alone of `dot`'s
// shape (a bias of its columns).
bool IsColumnBroadcast(const Instruction& b, const Instruction& dot) {
  if (b.opcode() != Opcode::kBroadcast || b.operand_count() != 1 || b.shape() != dot.shape()) {
    return false;
  }
  const ir::Shape& bias = b.operand(0)->shape();
  return bias.IsArray() && bias.type() == ElementType::kF32 && bias.rank() == 1 &&
         b.attrs().dimensions == std::vector<int64_t>{1} && bias.dim(0) == dot.shape().dim(1);
}

// An add DotBiasFusion outlines, and its parts.
struct Candidate {
  Instruction* add = nullptr;
  Instruction* dot = nullptr;
  Instruction* broadcast = nullptr;
  Instruction* relu = nullptr;  // the add's one reader, when a relu
};

std::optional<Candidate> Match(Instruction* add, const Computation& comp, Users& readers) {
  if (add->opcode() != Opcode::kAdd || add->operand_count() != 2 || !add->shape().IsArray()) {
    return std::nullopt;
  }
  for (int k = 0; k < 2; ++k) {
    Instruction* dot = add->operand(k);
    Instruction* other = add->operand(1 - k);
    if (!IsGemmDot(*dot) || dot == comp.root() || readers[dot].size() != 1 ||
        add->shape() != dot->shape() || !IsColumnBroadcast(*other, *dot)) {
      continue;
    }
    Candidate c{.add = add, .dot = dot, .broadcast = other};
    if (add != comp.root() && readers[add].size() == 1 && IsReluOf(*readers[add][0], *add)) {
      c.relu = readers[add][0];
    }
    return c;
  }
  return std::nullopt;
}

// The computation of `c`: parameters a, b, bias; the dot; the broadcast;
// the add; the relu when there is one.
std::unique_ptr<Computation> Outline(const Candidate& c, const std::string& name) {
  auto fused = std::make_unique<Computation>(name);
  const std::vector<Instruction*> params = AddParameters(
      fused.get(), {c.dot->operand(0), c.dot->operand(1), c.broadcast->operand(0)});
  auto dot = NewInstruction(Opcode::kDot, c.dot->shape(), c.dot->name(), {params[0], params[1]});
  dot->mutable_attrs() = c.dot->attrs();
  dot->set_source_line(c.dot->source_line());
  Instruction* product = fused->AddInstruction(std::move(dot));
  auto broadcast =
      NewInstruction(Opcode::kBroadcast, c.broadcast->shape(), c.broadcast->name(), {params[2]});
  broadcast->mutable_attrs() = c.broadcast->attrs();
  Instruction* bias = fused->AddInstruction(std::move(broadcast));
  auto sum = NewInstruction(Opcode::kAdd, c.add->shape(), c.add->name(), {product, bias});
  sum->set_source_line(c.add->source_line());
  Instruction* root = fused->AddInstruction(std::move(sum));
  if (c.relu != nullptr) root = AppendRelu(fused.get(), root, *c.relu);
  fused->set_root(root);
  MakeInstructionNamesUnique(fused.get());
  return fused;
}

}  // namespace

absl::StatusOr<bool> DotBiasFusion::Run(ir::Module* module) {
  return FuseEachComputation(
      module, [&](Computation* comp, absl::flat_hash_set<std::string>& names) {
        // The add (and relu), the dot and the broadcast stay behind without
        // readers for DCE (a broadcast that others read stays theirs).
        return OutlineAdds(module, comp, names, "fused_dot_bias",
                           [&](Instruction* add, Users& readers,
                               const std::string& name) -> std::optional<OutlinedAdd> {
                             std::optional<Candidate> c = Match(add, *comp, readers);
                             if (!c.has_value()) return std::nullopt;
                             std::unique_ptr<Computation> fused = Outline(*c, name);
                             if (!IsDotBiasFusion(*fused)) return std::nullopt;
                             return OutlinedAdd{std::move(fused),
                                                {c->dot->operand(0), c->dot->operand(1),
                                                 c->broadcast->operand(0)},
                                                c->relu};
                           });
      });
}

std::optional<DotBiasFusionForm> MatchDotBiasFusion(const Computation& c) {
  if (c.parameter_count() != 3 || (c.instruction_count() != 6 && c.instruction_count() != 9)) {
    return std::nullopt;
  }
  const Instruction* root = c.root();
  // With a relu: three more instructions, the zero, its broadcast and the
  // maximum, which is the root.
  const bool relu = c.instruction_count() == 9;
  if (relu && root != nullptr) root = ReluOperand(*root);
  if (root == nullptr || root->opcode() != Opcode::kAdd || root->operand_count() != 2) {
    return std::nullopt;
  }
  const Instruction* p[3] = {c.parameter(0), c.parameter(1), c.parameter(2)};
  for (int k = 0; k < 2; ++k) {
    const Instruction* dot = root->operand(k);
    const Instruction* broadcast = root->operand(1 - k);
    if (!IsGemmDot(*dot) || dot->operand(0) != p[0] || dot->operand(1) != p[1] ||
        root->shape() != dot->shape() || !IsColumnBroadcast(*broadcast, *dot) ||
        broadcast->operand(0) != p[2]) {
      continue;
    }
    return DotBiasFusionForm{dot, relu};
  }
  return std::nullopt;
}

}  // namespace kiln::passes
