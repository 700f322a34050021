#include "compiler/ir/fingerprint.h"

#include <openssl/evp.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_printer.h"

namespace kiln::ir {

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // One-shot digest; it fails only if the library cannot allocate.
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    std::fprintf(stderr, "kiln: SHA-256 failed\n");
    std::abort();
  }
  std::string hex;
  hex.reserve(2 * length);
  static constexpr char kDigits[] = "0123456789abcdef";
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kDigits[digest[i] >> 4]);
    hex.push_back(kDigits[digest[i] & 15]);
  }
  return hex;
}

namespace {

// A literal's exact bytes, tuple elements in order, each announced by its
// size so that no two different literals append the same bytes.
void AppendExactBytes(const Literal& literal, std::string* out) {
  if (literal.shape().IsTuple()) {
    absl::StrAppend(out, "(", literal.tuple_elements().size(), ":");
    for (const Literal& e : literal.tuple_elements()) AppendExactBytes(e, out);
    out->push_back(')');
    return;
  }
  const std::vector<uint8_t>& bytes = literal.bytes();
  absl::StrAppend(out, bytes.size(), ":");
  out->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace

std::string Fingerprint(const Module& module) { return Sha256Hex(CanonicalBytes(module)); }

std::string CanonicalBytes(const Module& module) {
  PrintOptions options;
  options.canonical_names = true;
  std::string canonical = PrintModule(module, options);
  // The text prints every NaN as "nan": the constants' exact bytes follow,
  // in the order the text lists them, each announced by its size.
  for (const Computation* computation : PrintOrder(module)) {
    for (const auto& instr : computation->instructions()) {
      if (instr->opcode() != Opcode::kConstant) continue;
      canonical += "\n#";
      AppendExactBytes(instr->attrs().literal, &canonical);
    }
  }
  return canonical;
}

}  // namespace kiln::ir
