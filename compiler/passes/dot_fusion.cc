#include "compiler/passes/dot_fusion.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::ElementType;
using ir::Instruction;
using ir::Opcode;

}  // namespace

bool IsGemmDot(const Instruction& d) {
  if (d.opcode() != Opcode::kDot || d.operand_count() != 2 ||
      !d.shape().IsArray() || d.shape().type() != ElementType::kF32 ||
      d.shape().rank() != 2) {
    return false;
  }
  for (const Instruction* o : d.operands()) {
    if (!o->shape().IsArray() || o->shape().type() != ElementType::kF32 ||
        o->shape().rank() != 2) {
      return false;
    }
  }
  const ir::DotDims& dims = d.attrs().dot;
  return dims.lhs_batch.empty() && dims.rhs_batch.empty() &&
         dims.lhs_contracting.size() == 1 && dims.rhs_contracting.size() == 1;
}

namespace {

// The value of a scalar f32 constant other than zero: a GEMM with beta 0
// does not read C, where `c * 0` is NaN for a c that is NaN or infinite.
std::optional<double> ScalarConstant(const Instruction& i) {
  if (i.opcode() != Opcode::kConstant || !i.shape().IsArray() ||
      i.shape().rank() != 0 || i.shape().type() != ElementType::kF32 ||
      i.attrs().literal.element_count() != 1) {
    return std::nullopt;
  }
  const double value = i.attrs().literal.GetAsDouble(0);
  if (value == 0) return std::nullopt;
  return value;
}

// `multiply(c, broadcast(s))` in either order, with `s` a scalar f32
// constant broadcast to the product's shape: c and the constant.
std::optional<std::pair<Instruction*, Instruction*>> Scaled(Instruction* m) {
  if (m->opcode() != Opcode::kMultiply || m->operand_count() != 2)
    return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    Instruction* b = m->operand(k);
    if (b->opcode() == Opcode::kBroadcast && b->operand_count() == 1 &&
        b->attrs().dimensions.empty() && b->shape() == m->shape() &&
        ScalarConstant(*b->operand(0)).has_value()) {
      return std::make_pair(m->operand(1 - k), b->operand(0));
    }
  }
  return std::nullopt;
}

// An add DotFusion outlines, and its parts.
struct Candidate {
  Instruction* add = nullptr;
  Instruction* dot = nullptr;
  Instruction* addend = nullptr;       // c
  const Instruction* scale = nullptr;  // the constant s, or null for beta 1
};

std::optional<Candidate> Match(Instruction* add, const Computation& comp,
                               Users& readers) {
  if (add->opcode() != Opcode::kAdd || add->operand_count() != 2 ||
      !add->shape().IsArray()) {
    return std::nullopt;
  }
  for (int k = 0; k < 2; ++k) {
    Instruction* dot = add->operand(k);
    Instruction* other = add->operand(1 - k);
    if (!IsGemmDot(*dot) || dot == other || dot == comp.root() ||
        readers[dot].size() != 1) {
      continue;
    }
    Candidate c{.add = add, .dot = dot, .addend = other};
    if (auto scaled = Scaled(other); scaled.has_value() &&
                                     other != comp.root() &&
                                     readers[other].size() == 1) {
      c.addend = scaled->first;
      c.scale = scaled->second;
    }
    // A broadcast addend (a bias) stays the loop's to expand as it reads
    // the product: written out for the GEMM, it would cost a pass.
    if (!c.addend->shape().IsArray() || c.addend->shape() != dot->shape() ||
        c.addend == dot->operand(0) || c.addend == dot->operand(1) ||
        c.addend->opcode() == Opcode::kBroadcast) {
      continue;
    }
    return c;
  }
  return std::nullopt;
}

// The computation of `c`: parameters a, b, c; the dot; the scaled addend;
// the add.
std::unique_ptr<Computation> Outline(const Candidate& c, const std::string& name) {
  auto fused = std::make_unique<Computation>(name);
  const std::vector<Instruction*> params =
      AddParameters(fused.get(), {c.dot->operand(0), c.dot->operand(1), c.addend});
  auto dot = NewInstruction(Opcode::kDot, c.dot->shape(), c.dot->name(), {params[0], params[1]});
  dot->mutable_attrs() = c.dot->attrs();
  dot->set_source_line(c.dot->source_line());
  Instruction* product = fused->AddInstruction(std::move(dot));
  Instruction* addend = params[2];
  if (c.scale != nullptr) {
    auto s = NewInstruction(Opcode::kConstant, c.scale->shape(), c.scale->name());
    s->mutable_attrs() = c.scale->attrs();
    Instruction* scale = fused->AddInstruction(std::move(s));
    Instruction* broadcast = fused->AddInstruction(
        NewInstruction(Opcode::kBroadcast, c.addend->shape(), "beta", {scale}));
    addend = fused->AddInstruction(
        NewInstruction(Opcode::kMultiply, c.addend->shape(), "scaled", {params[2], broadcast}));
  }
  auto sum = NewInstruction(Opcode::kAdd, c.add->shape(), c.add->name(), {product, addend});
  sum->set_source_line(c.add->source_line());
  fused->set_root(fused->AddInstruction(std::move(sum)));
  MakeInstructionNamesUnique(fused.get());
  return fused;
}

}  // namespace

absl::StatusOr<bool> DotFusion::Run(ir::Module* module) {
  return FuseEachComputation(
      module, [&](Computation* comp, absl::flat_hash_set<std::string>& names) {
        // The add's readers read the call; the add, the dot and the
        // scaling stay behind without readers for DCE.
        return OutlineAdds(module, comp, names, "fused_dot",
                           [&](Instruction* add, Users& readers,
                               const std::string& name) -> std::optional<OutlinedAdd> {
                             std::optional<Candidate> c = Match(add, *comp, readers);
                             if (!c.has_value()) return std::nullopt;
                             std::unique_ptr<Computation> fused = Outline(*c, name);
                             if (!IsDotFusion(*fused)) return std::nullopt;
                             return OutlinedAdd{std::move(fused),
                                                {c->dot->operand(0), c->dot->operand(1), c->addend}};
                           });
      });
}

std::optional<DotFusionForm> MatchDotFusion(const Computation& c) {
  if (c.parameter_count() != 3) return std::nullopt;
  const Instruction* root = c.root();
  if (root == nullptr || root->opcode() != Opcode::kAdd ||
      root->operand_count() != 2) {
    return std::nullopt;
  }
  const Instruction* p[3] = {c.parameter(0), c.parameter(1), c.parameter(2)};
  for (int k = 0; k < 2; ++k) {
    const Instruction* dot = root->operand(k);
    const Instruction* other = root->operand(1 - k);
    if (!IsGemmDot(*dot) || dot->operand(0) != p[0] ||
        dot->operand(1) != p[1] || p[2]->shape() != dot->shape() ||
        root->shape() != dot->shape()) {
      continue;
    }
    if (other == p[2] && c.instruction_count() == 5)
      return DotFusionForm{dot, 1.0};
    // The scaled addend: multiply(p2, broadcast(constant)) in either order.
    if (c.instruction_count() != 8 || other->opcode() != Opcode::kMultiply ||
        other->operand_count() != 2 || other->shape() != dot->shape()) {
      continue;
    }
    for (int j = 0; j < 2; ++j) {
      const Instruction* b = other->operand(j);
      if (other->operand(1 - j) != p[2] || b->opcode() != Opcode::kBroadcast ||
          b->operand_count() != 1 || !b->attrs().dimensions.empty() ||
          b->shape() != dot->shape()) {
        continue;
      }
      if (std::optional<double> beta = ScalarConstant(*b->operand(0))) {
        return DotFusionForm{dot, *beta};
      }
    }
  }
  return std::nullopt;
}

}  // namespace kiln::passes
