// A stable fingerprint of a module's meaning.
#ifndef KILN_COMPILER_IR_FINGERPRINT_H_
#define KILN_COMPILER_IR_FINGERPRINT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

// 32 hex digits hashing the canonical text of the module: structure, shapes,
// attributes and constants, but not names or metadata. The hash is our own
// fixed function, so equal modules give equal fingerprints in every process.
std::string Fingerprint(const Module& module);

// The 128-bit hash used by Fingerprint, as hex.
std::string StableHash128(absl::string_view data);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_FINGERPRINT_H_
