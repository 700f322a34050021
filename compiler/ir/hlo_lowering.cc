#include "compiler/ir/hlo_lowering.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"

namespace kiln::ir {
namespace {

absl::StatusOr<Computation*> Elementwise(Module* module, const Computation& scalar,
                                         const std::vector<int64_t>& dims, int depth) {
  // The chain of calls is the text's: bounded before recursing.
  if (depth > kMaxCallDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "map's computations call each other more than ", kMaxCallDepth, " deep"));
  }
  const std::string name = absl::StrCat(scalar.name(), ".map.", absl::StrJoin(dims, "x"));
  if (Computation* made = module->FindComputation(name)) return made;
  auto array = std::make_unique<Computation>(name);
  auto refuse = [&](const Instruction& instr, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("map's computation ", scalar.name(),
                                                   " cannot be applied elementwise: %",
                                                   instr.name(), " ", why));
  };
  absl::flat_hash_map<const Instruction*, Instruction*> made;
  // Made first, connected second: the text's order need not put operands
  // first.
  for (const auto& instr : scalar.instructions()) {
    const Shape& shape = instr->shape();
    if (!shape.IsArray() || shape.rank() != 0) {
      return refuse(*instr, absl::StrCat("has shape ", shape.ToString(), ", not a scalar"));
    }
    const Shape promoted(shape.type(), dims);
    const Opcode op = instr->opcode();
    if (op == Opcode::kConstant) {
      auto value = std::make_unique<Instruction>(op, shape, instr->name() + ".scalar");
      value->mutable_attrs() = instr->attrs();
      Instruction* scalar_value = array->AddInstruction(std::move(value));
      auto spread = std::make_unique<Instruction>(Opcode::kBroadcast, promoted, instr->name());
      spread->AddOperand(scalar_value);
      made[instr.get()] = array->AddInstruction(std::move(spread));
      continue;
    }
    if (op != Opcode::kParameter && op != Opcode::kCall && !IsElementwise(op)) {
      return refuse(*instr, absl::StrCat("is a ", OpcodeName(op)));
    }
    auto copy = std::make_unique<Instruction>(op, promoted, instr->name());
    copy->mutable_attrs() = instr->attrs();
    if (op == Opcode::kCall) {
      for (const Computation* callee : instr->called()) {
        ASSIGN_OR_RETURN(Computation * promoted_callee,
                         Elementwise(module, *callee, dims, depth + 1));
        copy->AddCalled(promoted_callee);
      }
    }
    made[instr.get()] = array->AddInstruction(std::move(copy));
  }
  for (const auto& instr : scalar.instructions()) {
    if (instr->opcode() == Opcode::kConstant) continue;
    for (const Instruction* operand : instr->operands()) {
      auto it = made.find(operand);
      if (it == made.end()) return refuse(*instr, "uses an instruction of another computation");
      made[instr.get()]->AddOperand(it->second);
    }
  }
  if (scalar.root() == nullptr) return refuse(*scalar.instructions().front(), "has no root");
  array->set_root(made[scalar.root()]);
  Computation* added = module->AddComputation(std::move(array));
  RETURN_IF_ERROR(added->Canonicalize());
  return added;
}

// The logical dimensions of `shape` from major to minor in memory under
// `layout` (minor to major; empty: row-major).
absl::StatusOr<std::vector<int64_t>> MajorToMinor(const Shape& shape,
                                                  const std::vector<int64_t>& layout) {
  std::vector<int64_t> order(shape.rank());
  std::iota(order.begin(), order.end(), 0);
  if (layout.empty()) return order;
  std::vector<int64_t> sorted = layout;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != order) {
    return absl::InvalidArgumentError(absl::StrCat("layout {", absl::StrJoin(layout, ","),
                                                   "} is not a permutation of the dimensions of ",
                                                   shape.ToString()));
  }
  return std::vector<int64_t>(layout.rbegin(), layout.rend());
}

bool IsIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Computation*> ElementwiseComputation(Module* module, const Computation& scalar,
                                                    const std::vector<int64_t>& dims) {
  return Elementwise(module, scalar, dims, 0);
}

absl::StatusOr<BitcastSteps> PlanBitcast(const Shape& from, const std::vector<int64_t>& from_layout,
                                         const Shape& to, const std::vector<int64_t>& to_layout) {
  if (!from.IsArray() || !to.IsArray() || from.ElementCount() != to.ElementCount()) {
    return absl::InvalidArgumentError(absl::StrCat("bitcast from ", from.ToString(), " to ",
                                                   to.ToString(), " changes the element count"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> from_order, MajorToMinor(from, from_layout));
  ASSIGN_OR_RETURN(std::vector<int64_t> to_order, MajorToMinor(to, to_layout));
  BitcastSteps steps;
  // The operand's values in memory order: a transpose whose output
  // dimension i is the operand's from_order[i].
  if (!IsIdentity(from_order)) steps.to_physical = from_order;
  for (int64_t d : to_order) steps.physical_dims.push_back(to.dim(d));
  // Back to the result's logical order: its dimension j is the physical
  // dimension where to_order holds j.
  std::vector<int64_t> back(to.rank());
  for (int64_t p = 0; p < to.rank(); ++p) back[to_order[p]] = p;
  if (!IsIdentity(back)) steps.from_physical = back;
  return steps;
}

}  // namespace kiln::ir
