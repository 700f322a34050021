#include "compiler/passes/bias_layer.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::Instruction;
using ir::Opcode;

// Appends to `c` the relu of `x` (a +0, its broadcast and the maximum,
// named and placed as `relu`, the instruction it stands for); returns the
// maximum.
Instruction* AppendRelu(Computation* c, Instruction* x, const Instruction& relu) {
  const ir::Shape scalar = ir::Shape::Scalar(ir::ElementType::kF32);
  auto zero = NewInstruction(Opcode::kConstant, scalar, "zero");
  zero->mutable_attrs().literal = ir::Literal(scalar);
  Instruction* z = c->AddInstruction(std::move(zero));
  Instruction* zeros =
      c->AddInstruction(NewInstruction(Opcode::kBroadcast, x->shape(), "zeros", {z}));
  auto max = NewInstruction(Opcode::kMaximum, x->shape(), relu.name(), {x, zeros});
  max->set_source_line(relu.source_line());
  return c->AddInstruction(std::move(max));
}

// The operand `root` is the relu of (IsReluOf), not itself a broadcast;
// null when `root` is no relu.
const Instruction* ReluOperand(const Instruction& root) {
  if (root.opcode() != Opcode::kMaximum || root.operand_count() != 2) return nullptr;
  for (const Instruction* x : root.operands()) {
    if (x->opcode() != Opcode::kBroadcast && IsReluOf(root, *x)) return x;
  }
  return nullptr;
}

// An add FuseBiasLayers outlines, and its parts.
struct Candidate {
  Instruction* add = nullptr;
  Instruction* product = nullptr;
  Instruction* broadcast = nullptr;
  Instruction* relu = nullptr;  // the add's one reader, when a relu
};

std::optional<Candidate> Match(Instruction* add, const Computation& comp, Users& readers,
                               const BiasLayerKind& kind) {
  if (add->opcode() != Opcode::kAdd || add->operand_count() != 2 || !add->shape().IsArray()) {
    return std::nullopt;
  }
  for (int k = 0; k < 2; ++k) {
    Instruction* product = add->operand(k);
    Instruction* other = add->operand(1 - k);
    if (product->operand_count() != 2 || !kind.is_product(*product) || product == comp.root() ||
        readers[product].size() != 1 || add->shape() != product->shape() ||
        !kind.is_bias(*other, *product)) {
      continue;
    }
    Candidate c{.add = add, .product = product, .broadcast = other};
    if (add != comp.root() && readers[add].size() == 1 && IsReluOf(*readers[add][0], *add)) {
      c.relu = readers[add][0];
    }
    return c;
  }
  return std::nullopt;
}

// The computation of `c`: the parameters; the product; the broadcast; the
// add; the relu when there is one.
std::unique_ptr<Computation> Outline(const Candidate& c, const std::string& name) {
  auto fused = std::make_unique<Computation>(name);
  const std::vector<Instruction*> params = AddParameters(
      fused.get(), {c.product->operand(0), c.product->operand(1), c.broadcast->operand(0)});
  auto p = NewInstruction(c.product->opcode(), c.product->shape(), c.product->name(),
                          {params[0], params[1]});
  p->mutable_attrs() = c.product->attrs();
  p->set_source_line(c.product->source_line());
  Instruction* product = fused->AddInstruction(std::move(p));
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

bool IsReluOf(const Instruction& i, const Instruction& x) {
  if (i.opcode() != Opcode::kMaximum || i.operand_count() != 2 || i.shape() != x.shape() ||
      !x.shape().IsArray() || x.shape().type() != ir::ElementType::kF32) {
    return false;
  }
  static const ir::Literal* const plus_zero =
      new ir::Literal(ir::Literal::Scalar<float>(ir::ElementType::kF32, 0.0f));
  for (int k = 0; k < 2; ++k) {
    if (i.operand(k) == &x && IsUniform(i.operand(1 - k), *plus_zero)) return true;
  }
  return false;
}

absl::StatusOr<bool> FuseBiasLayers(ir::Module* module, absl::string_view base,
                                    const BiasLayerKind& kind,
                                    bool (*is_form)(const ir::Computation&)) {
  return FuseEachComputation(
      module, [&](Computation* comp, absl::flat_hash_set<std::string>& names) {
        // The add (and relu), the product and the broadcast stay behind
        // without readers for DCE (a broadcast that others read stays
        // theirs).
        return OutlineAdds(module, comp, names, base,
                           [&](Instruction* add, Users& readers,
                               const std::string& name) -> std::optional<OutlinedAdd> {
                             std::optional<Candidate> c = Match(add, *comp, readers, kind);
                             if (!c.has_value()) return std::nullopt;
                             std::unique_ptr<Computation> fused = Outline(*c, name);
                             if (!is_form(*fused)) return std::nullopt;
                             return OutlinedAdd{std::move(fused),
                                                {c->product->operand(0), c->product->operand(1),
                                                 c->broadcast->operand(0)},
                                                c->relu};
                           });
      });
}

std::optional<BiasLayerForm> MatchBiasLayer(const Computation& c, const BiasLayerKind& kind) {
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
    const Instruction* product = root->operand(k);
    const Instruction* broadcast = root->operand(1 - k);
    if (product->operand_count() != 2 || !kind.is_product(*product) ||
        product->operand(0) != p[0] || product->operand(1) != p[1] ||
        root->shape() != product->shape() || !kind.is_bias(*broadcast, *product) ||
        broadcast->operand(0) != p[2]) {
      continue;
    }
    return BiasLayerForm{product, relu};
  }
  return std::nullopt;
}

}  // namespace kiln::passes
