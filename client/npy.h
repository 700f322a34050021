// Reading and writing NumPy .npy files (format versions 1.0 to 3.0, as
// numpy.save writes them).
#ifndef KILN_CLIENT_NPY_H_
#define KILN_CLIENT_NPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/literal.h"

namespace kiln::client {

// Parses .npy bytes into a literal of the matching element type
// (bool->pred, int8..uint64, float16, float32, float64). Little-endian,
// C-order only; anything else is InvalidArgument naming the problem.
absl::StatusOr<ir::Literal> ParseNpy(const std::string& bytes);
absl::StatusOr<ir::Literal> ReadNpyFile(const std::string& path);

// Encodes an array literal as .npy. bf16 is written as float32 holding the
// exact bf16 values (NumPy has no bfloat16).
absl::StatusOr<std::string> EncodeNpy(const ir::Literal& literal);
absl::Status WriteNpyFile(const std::string& path, const ir::Literal& literal);

// Adapts a literal read from .npy to the element type a parameter expects:
// identical types pass; a bf16 parameter takes float32 (rounded to nearest
// even) or uint16 bit patterns. Anything else is InvalidArgument.
absl::StatusOr<ir::Literal> AdaptToParameter(const ir::Literal& value,
                                             const ir::Shape& expected);

}  // namespace kiln::client

#endif  // KILN_CLIENT_NPY_H_
