// A stable fingerprint of a module's meaning: the compile cache's key.
#ifndef KILN_COMPILER_IR_FINGERPRINT_H_
#define KILN_COMPILER_IR_FINGERPRINT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

// 64 hex digits: the SHA-256 of the canonical text of the module (structure,
// shapes, attributes and constants, but not names or metadata) followed by
// the exact bytes of every constant, so that values the text cannot tell
// apart (NaN payloads) still differ. Equal modules give equal fingerprints
// in every process; different ones collide only as SHA-256 does.
std::string Fingerprint(const Module& module);

// What Fingerprint hashes: the canonical text and the constants' exact
// bytes. Equal for two modules exactly when they are the same program.
std::string CanonicalBytes(const Module& module);

// SHA-256 of `data`, as 64 lowercase hex digits.
std::string Sha256Hex(absl::string_view data);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_FINGERPRINT_H_
