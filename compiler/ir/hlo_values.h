// The values of HLO text attributes and constants, as the parser reads
// them: literals, integer lists, windows, dim_labels, slices, paddings,
// replica groups. Each returns InvalidArgument naming what it could not
// read (without the line: the parser adds it).
#ifndef KILN_COMPILER_IR_HLO_VALUES_H_
#define KILN_COMPILER_IR_HLO_VALUES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/instruction.h"
#include "compiler/ir/literal.h"

namespace kiln::ir::hlo_text {

// A constant's values for `shape` (a tuple: "(a, b)"); `line` goes into
// its errors. The values are counted before anything is allocated.
absl::StatusOr<Literal> ParseLiteral(absl::string_view text, const Shape& shape, int line);
// "{1,2,3}".
absl::StatusOr<std::vector<int64_t>> ParseIntList(absl::string_view v);
absl::StatusOr<int64_t> ParseInt(absl::string_view v);
// "{size=2x2 stride=...}"; `reversed` receives the dimensions marked
// rhs_reversal=1.
absl::StatusOr<std::vector<WindowDim>> ParseWindow(absl::string_view v,
                                                   std::vector<int64_t>* reversed);
// "b01f_01io->b01f".
absl::StatusOr<ConvDims> ParseDimLabels(absl::string_view v);
// "{[0:2], [1:5:2]}".
absl::StatusOr<std::vector<SliceDim>> ParseSlice(absl::string_view v);
// "0_1x2_3_1".
absl::StatusOr<std::vector<PadDim>> ParsePadding(absl::string_view v);
// "{{0,1},{2,3}}".
absl::StatusOr<std::vector<std::vector<int64_t>>> ParseReplicaGroups(absl::string_view v);
// A string value: "text" with C escapes (\", \\, \n, \000, ...), as
// Quote writes it; anything else is an error.
absl::StatusOr<std::string> ReadQuoted(absl::string_view v);
// `s` as a string value that ReadQuoted reads back to the same bytes.
std::string Quote(absl::string_view s);

}  // namespace kiln::ir::hlo_text

#endif  // KILN_COMPILER_IR_HLO_VALUES_H_
