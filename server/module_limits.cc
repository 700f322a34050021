#include "server/module_limits.h"

#include <algorithm>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

absl::Status Over(const std::string& what, int64_t value, const std::string& flag,
                  int64_t limit) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", value, " exceeds the server's limit of ",
                                                 limit, " (", flag, ")"));
}

// Bytes of a literal and its tuple elements (nested at most as deep as the
// wire decoder allows; deeper ones are refused when decoded).
int64_t LiteralBytes(const v1::LiteralProto& literal, int depth = 0) {
  int64_t bytes = static_cast<int64_t>(literal.data().size());
  if (depth < ir::kMaxTupleDepth) {
    for (const v1::LiteralProto& e : literal.tuple_elements()) bytes += LiteralBytes(e, depth + 1);
  }
  return bytes;
}

int MaxRank(const ir::Shape& shape) {
  if (!shape.IsTuple()) return shape.rank();
  int rank = 0;
  for (const ir::Shape& s : shape.tuple_shapes()) rank = std::max(rank, MaxRank(s));
  return rank;
}

}  // namespace

absl::Status CheckModuleProto(const v1::ModuleProto& module, const ModuleLimits& limits) {
  const int64_t bytes = static_cast<int64_t>(module.ByteSizeLong());
  if (bytes > limits.module_bytes) {
    return Over("a module of bytes", bytes, "--max_module_bytes", limits.module_bytes);
  }
  if (module.computations_size() > limits.computations) {
    return Over("the module's computation count", module.computations_size(),
                "--max_computations", limits.computations);
  }
  int64_t instructions = 0, literal_bytes = 0;
  for (const v1::ComputationProto& c : module.computations()) {
    instructions += c.instructions_size();
    for (const v1::InstructionProto& i : c.instructions()) {
      if (i.has_literal()) literal_bytes += LiteralBytes(i.literal());
    }
  }
  if (instructions > limits.instructions) {
    return Over("the module's instruction count", instructions, "--max_instructions",
                limits.instructions);
  }
  if (literal_bytes > limits.literal_bytes) {
    return Over("the bytes of the module's constants", literal_bytes, "--max_literal_bytes",
                limits.literal_bytes);
  }
  return absl::OkStatus();
}

absl::Status CheckModule(const ir::Module& module, const ModuleLimits& limits) {
  // Verified: no recursion, and chains are at most ir::kMaxCallDepth long,
  // so this recursion is bounded.
  absl::flat_hash_map<const ir::Computation*, int> depth;
  std::function<int(const ir::Computation*)> depth_of = [&](const ir::Computation* c) {
    if (auto it = depth.find(c); it != depth.end()) return it->second;
    int d = 1;
    for (const auto& instr : c->instructions()) {
      for (const ir::Computation* callee : instr->called()) d = std::max(d, depth_of(callee) + 1);
    }
    depth[c] = d;
    return d;
  };
  for (const auto& c : module.computations()) {
    const int d = depth_of(c.get());
    if (d > limits.call_depth) {
      return Over(absl::StrCat("computation ", c->name(), " starts a chain of nested calls of length"),
                  d, "--max_call_depth", limits.call_depth);
    }
    for (const auto& instr : c->instructions()) {
      const int rank = MaxRank(instr->shape());
      if (rank > limits.rank) {
        return Over(absl::StrCat("instruction ", instr->name(), " has rank"), rank, "--max_rank",
                    limits.rank);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
