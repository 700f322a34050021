// Parses XLA's HLO text syntax into a Module.
#ifndef KILN_COMPILER_IR_HLO_PARSER_H_
#define KILN_COMPILER_IR_HLO_PARSER_H_

#include <memory>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

// Parses `text` (with or without the `HloModule` header, `%` sigils, operand
// shapes, layouts and metadata). Errors are InvalidArgument with the line
// number and what was unexpected, e.g. "line 4: unknown opcode 'fft'".
// The result is structurally complete but not verified: call Verify().
absl::StatusOr<std::unique_ptr<Module>> ParseModule(absl::string_view text);

// Parses a shape such as "f32[2,3]{1,0}" or "(f32[], s32[4])".
absl::StatusOr<Shape> ParseShape(absl::string_view text);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_HLO_PARSER_H_
