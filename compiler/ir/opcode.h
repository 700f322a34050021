// Opcode enum, names, arity and category, generated from opcode.def.
#ifndef KILN_COMPILER_IR_OPCODE_H_
#define KILN_COMPILER_IR_OPCODE_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include <string_view>

namespace kiln::ir {

enum class Opcode : uint8_t {
#define KILN_OPCODE(e, name, arity, category) e,
#include "compiler/ir/opcode.def"
#undef KILN_OPCODE
};

enum class OpCategory : uint8_t { kUnary, kBinary, kTernary, kOther };

absl::string_view OpcodeName(Opcode op);
std::optional<Opcode> OpcodeFromName(absl::string_view name);
// Fixed operand count, or -1 for variadic ops.
int OpcodeArity(Opcode op);
OpCategory OpcodeCategory(Opcode op);
// Ops in which the replicas of a replicated execution exchange values.
inline bool IsCollective(Opcode op) {
  return op == Opcode::kAllReduce || op == Opcode::kAllGather || op == Opcode::kReduceScatter ||
         op == Opcode::kAllToAll || op == Opcode::kCollectivePermute ||
         op == Opcode::kCollectiveBroadcast;
}
inline bool IsElementwise(Opcode op) {
  return OpcodeCategory(op) != OpCategory::kOther;
}

// Comparison directions of `compare`.
enum class ComparisonDirection : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
absl::string_view ComparisonDirectionName(ComparisonDirection d);
std::optional<ComparisonDirection> ComparisonDirectionFromName(
    absl::string_view name);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_OPCODE_H_
