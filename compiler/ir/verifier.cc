#include "compiler/ir/verifier.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/shape_inference.h"
#include "base/status_macros.h"

namespace kiln::ir {
namespace {

absl::Status InstrError(const Computation& c, const Instruction& instr,
                        absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat(instr.source_line() > 0 ? absl::StrCat("line ", instr.source_line(), ": ") : "",
                   "computation ", c.name(), ", instruction ", instr.name(), " (",
                   OpcodeName(instr.opcode()), "): ", msg));
}

absl::Status VerifyStructure(Computation& c,
                             const absl::flat_hash_set<const Computation*>& owned) {
  if (c.root() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("computation ", c.name(), " has no root instruction"));
  }
  if (c.root()->parent() != &c) {
    return absl::InvalidArgumentError(absl::StrCat(
        "computation ", c.name(), " has a root from another computation"));
  }
  RETURN_IF_ERROR(c.Canonicalize());
  absl::flat_hash_set<absl::string_view> names;
  int param_count = 0;
  for (const auto& instr : c.instructions()) {
    if (!names.insert(instr->name()).second) {
      return InstrError(c, *instr, "duplicate instruction name");
    }
    for (const Computation* callee : instr->called()) {
      if (callee == nullptr || !owned.contains(callee)) {
        return InstrError(c, *instr, "calls a computation outside the module");
      }
    }
    if (instr->opcode() == Opcode::kParameter) {
      ++param_count;
      int64_t n = instr->attrs().parameter_number;
      if (n < 0 || n >= Computation::kMaxParameters) {
        return InstrError(c, *instr,
                          absl::StrCat("parameter number ", n, " out of range"));
      }
      if (c.parameter(static_cast<int>(n)) != instr.get()) {
        return InstrError(c, *instr,
                          absl::StrCat("parameter number ", n, " used twice"));
      }
    }
  }
  if (param_count != c.parameter_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "computation ", c.name(), " has parameter numbers with gaps (",
        param_count, " parameters, highest number ", c.parameter_count() - 1,
        ")"));
  }
  return absl::OkStatus();
}

// Compiling and running a call chain recurses once per level: the chain's
// length is bounded (after VerifyNoRecursion, so there are no cycles).
absl::Status VerifyCallDepth(const Module& module) {
  absl::flat_hash_map<const Computation*, int> depth;  // longest chain from it
  for (const auto& start : module.computations()) {
    if (depth.contains(start.get())) continue;
    // Iterative post-order: a computation's depth once its callees have one.
    std::vector<std::pair<const Computation*, bool>> stack{{start.get(), false}};
    while (!stack.empty()) {
      auto [comp, expanded] = stack.back();
      stack.pop_back();
      if (depth.contains(comp)) continue;
      if (!expanded) {
        stack.push_back({comp, true});
        for (const auto& instr : comp->instructions()) {
          for (const Computation* callee : instr->called()) {
            if (!depth.contains(callee)) stack.push_back({callee, false});
          }
        }
        continue;
      }
      int d = 1;
      for (const auto& instr : comp->instructions()) {
        for (const Computation* callee : instr->called()) d = std::max(d, depth[callee] + 1);
      }
      if (d > kMaxCallDepth) {
        return absl::InvalidArgumentError(absl::StrCat(
            "computation ", comp->name(), " starts a chain of ", d,
            " nested calls; at most ", kMaxCallDepth, " are allowed"));
      }
      depth[comp] = d;
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyNoRecursion(const Module& module) {
  // Colors: 1 on the current path, 2 finished.
  absl::flat_hash_map<const Computation*, int> color;
  std::vector<std::pair<const Computation*, size_t>> stack;
  std::vector<const Computation*> callees_of;
  auto callees = [](const Computation* c) {
    std::vector<const Computation*> out;
    for (const auto& instr : c->instructions()) {
      for (const Computation* k : instr->called()) out.push_back(k);
    }
    return out;
  };
  for (const auto& root : module.computations()) {
    if (color[root.get()] != 0) continue;
    std::vector<std::pair<const Computation*, std::vector<const Computation*>>>
        path;
    path.push_back({root.get(), callees(root.get())});
    color[root.get()] = 1;
    while (!path.empty()) {
      auto& [comp, rest] = path.back();
      if (rest.empty()) {
        color[comp] = 2;
        path.pop_back();
        continue;
      }
      const Computation* next = rest.back();
      rest.pop_back();
      int& col = color[next];
      if (col == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "computation ", next->name(), " calls itself (recursion)"));
      }
      if (col == 0) {
        col = 1;
        path.push_back({next, callees(next)});
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Verify(Module& module) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  absl::flat_hash_set<const Computation*> owned;
  absl::flat_hash_set<absl::string_view> comp_names;
  for (const auto& c : module.computations()) {
    owned.insert(c.get());
    if (!comp_names.insert(c->name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate computation name ", c->name()));
    }
  }
  if (!owned.contains(module.entry())) {
    return absl::InvalidArgumentError("entry computation not in module");
  }
  for (const auto& c : module.computations()) {
    RETURN_IF_ERROR(VerifyStructure(*c, owned));
  }
  RETURN_IF_ERROR(VerifyNoRecursion(module));
  RETURN_IF_ERROR(VerifyCallDepth(module));
  for (const auto& c : module.computations()) {
    for (const auto& instr : c->instructions()) {
      // Shape inference also checks the declared shape is valid.
      absl::StatusOr<Shape> inferred = InferShape(*instr);
      if (!inferred.ok()) return InstrError(*c, *instr, inferred.status().message());
      if (*inferred != instr->shape()) {
        return InstrError(*c, *instr,
                          absl::StrCat("declared shape ",
                                       instr->shape().ToString(),
                                       " but operands give ",
                                       inferred->ToString()));
      }
      // A replica may appear in one group only.
      absl::flat_hash_set<int64_t> ids;
      for (const auto& group : instr->attrs().replica_groups) {
        if (group.empty()) return InstrError(*c, *instr, "empty replica group");
        for (int64_t id : group) {
          if (id < 0 || !ids.insert(id).second) {
            return InstrError(*c, *instr, "invalid replica_groups");
          }
        }
      }
      const size_t precisions = instr->attrs().operand_precision.size();
      if (precisions != 0 && precisions != static_cast<size_t>(instr->operand_count())) {
        return InstrError(*c, *instr,
                          absl::StrCat("operand_precision has ", precisions, " entries for ",
                                       instr->operand_count(), " operands"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::ir
