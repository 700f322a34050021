#include "compiler/ir/instruction.h"

#include "absl/strings/ascii.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kiln::ir {

absl::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kHigh: return "high";
    case Precision::kHighest: return "highest";
    default: return "default";
  }
}

std::optional<Precision> PrecisionFromName(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "default") return Precision::kDefault;
  if (lower == "high") return Precision::kHigh;
  if (lower == "highest") return Precision::kHighest;
  return std::nullopt;
}

absl::string_view TransposeKindName(TransposeKind t) {
  switch (t) {
    case TransposeKind::kTranspose: return "TRANSPOSE";
    case TransposeKind::kAdjoint: return "ADJOINT";
    default: return "NO_TRANSPOSE";
  }
}

std::optional<TransposeKind> TransposeKindFromName(absl::string_view name) {
  if (name == "NO_TRANSPOSE") return TransposeKind::kNoTranspose;
  if (name == "TRANSPOSE") return TransposeKind::kTranspose;
  if (name == "ADJOINT") return TransposeKind::kAdjoint;
  return std::nullopt;
}

Instruction* Computation::AddInstruction(std::unique_ptr<Instruction> instr) {
  instr->parent_ = this;
  instr->index_ = static_cast<int>(instructions_.size());
  instructions_.push_back(std::move(instr));
  Instruction* added = instructions_.back().get();
  NoteParameter(added);
  return added;
}

void Computation::NoteParameter(Instruction* instr) {
  if (instr->opcode() != Opcode::kParameter) return;
  int64_t n = instr->attrs().parameter_number;
  if (n < 0 || n >= kMaxParameters) return;  // the verifier reports it
  if (static_cast<int64_t>(parameters_.size()) <= n) {
    parameters_.resize(n + 1, nullptr);
  }
  if (parameters_[n] == nullptr) parameters_[n] = instr;
}

absl::Status Computation::Canonicalize() {
  const int n = instruction_count();
  std::vector<int> state(n, 0);  // 0 new, 1 on stack, 2 done
  std::vector<std::unique_ptr<Instruction>> ordered;
  ordered.reserve(n);
  absl::Status status;
  // Iterative DFS so that deep graphs do not overflow the stack.
  auto visit = [&](Instruction* start) {
    if (state[start->index_] == 2) return;
    std::vector<std::pair<Instruction*, int>> stack{{start, 0}};
    state[start->index_] = 1;
    while (!stack.empty() && status.ok()) {
      auto& [instr, next] = stack.back();
      if (next < instr->operand_count()) {
        Instruction* op = instr->operand(next++);
        if (op->parent_ != this) {
          status = absl::InvalidArgumentError(absl::StrCat(
              "instruction ", instr->name(), " uses ", op->name(),
              " from another computation"));
          return;
        }
        if (state[op->index_] == 1) {
          status = absl::InvalidArgumentError(absl::StrCat(
              "cycle through instruction ", op->name(), " in computation ",
              name_));
          return;
        }
        if (state[op->index_] == 0) {
          state[op->index_] = 1;
          stack.push_back({op, 0});
        }
        continue;
      }
      state[instr->index_] = 2;
      ordered.push_back(std::move(instructions_[instr->index_]));
      stack.pop_back();
    }
  };
  if (root_ != nullptr) visit(root_);
  for (int i = 0; i < n && status.ok(); ++i) {
    if (instructions_[i] != nullptr && state[i] == 0) {
      visit(instructions_[i].get());
    }
  }
  if (!status.ok()) {
    // Put back whatever was moved so the computation stays whole.
    for (auto& instr : ordered) {
      int idx = instr->index_;
      instructions_[idx] = std::move(instr);
    }
    return status;
  }
  instructions_ = std::move(ordered);
  parameters_.clear();
  for (int i = 0; i < n; ++i) {
    Instruction* instr = instructions_[i].get();
    instr->index_ = i;
    NoteParameter(instr);
  }
  return absl::OkStatus();
}

std::vector<Shape> Computation::ParameterShapes() const {
  std::vector<Shape> shapes;
  for (const Instruction* p : parameters_) {
    shapes.push_back(p != nullptr ? p->shape() : Shape());
  }
  return shapes;
}

Computation* Module::AddComputation(std::unique_ptr<Computation> c) {
  computations_.push_back(std::move(c));
  return computations_.back().get();
}

Computation* Module::FindComputation(absl::string_view name) const {
  for (const auto& c : computations_) {
    if (c->name() == name) return c.get();
  }
  return nullptr;
}

std::vector<const Computation*> Module::PostOrder() const {
  std::vector<const Computation*> order;
  absl::flat_hash_set<const Computation*> seen;
  std::function<void(const Computation*, int)> visit =
      [&](const Computation* c, int depth) {
        if (c == nullptr || depth > 256 || !seen.insert(c).second) return;
        for (const auto& instr : c->instructions()) {
          for (const Computation* callee : instr->called()) {
            visit(callee, depth + 1);
          }
        }
        order.push_back(c);
      };
  visit(entry_, 0);
  return order;
}

}  // namespace kiln::ir
