#include "compiler/ir/opcode.h"

#include "absl/container/flat_hash_map.h"

namespace kiln::ir {

namespace {
struct OpInfo {
  absl::string_view name;
  int arity;
  OpCategory category;
};
constexpr OpInfo kOpInfo[] = {
#define KILN_OPCODE(e, name, arity, category) {name, arity, OpCategory::category},
#include "compiler/ir/opcode.def"
#undef KILN_OPCODE
};
}  // namespace

absl::string_view OpcodeName(Opcode op) {
  return kOpInfo[static_cast<int>(op)].name;
}
int OpcodeArity(Opcode op) { return kOpInfo[static_cast<int>(op)].arity; }
OpCategory OpcodeCategory(Opcode op) {
  return kOpInfo[static_cast<int>(op)].category;
}

std::optional<Opcode> OpcodeFromName(absl::string_view name) {
  static const auto* const kByName = [] {
    auto* m = new absl::flat_hash_map<absl::string_view, Opcode>();
    for (size_t i = 0; i < std::size(kOpInfo); ++i) {
      (*m)[kOpInfo[i].name] = static_cast<Opcode>(i);
    }
    return m;
  }();
  auto it = kByName->find(name);
  if (it == kByName->end()) return std::nullopt;
  return it->second;
}

absl::string_view ComparisonDirectionName(ComparisonDirection d) {
  switch (d) {
    case ComparisonDirection::kEq: return "EQ";
    case ComparisonDirection::kNe: return "NE";
    case ComparisonDirection::kLt: return "LT";
    case ComparisonDirection::kLe: return "LE";
    case ComparisonDirection::kGt: return "GT";
    case ComparisonDirection::kGe: return "GE";
  }
  return "EQ";
}

std::optional<ComparisonDirection> ComparisonDirectionFromName(
    absl::string_view name) {
  for (auto d : {ComparisonDirection::kEq, ComparisonDirection::kNe,
                 ComparisonDirection::kLt, ComparisonDirection::kLe,
                 ComparisonDirection::kGt, ComparisonDirection::kGe}) {
    if (ComparisonDirectionName(d) == name) return d;
  }
  return std::nullopt;
}

}  // namespace kiln::ir
