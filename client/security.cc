#include "client/security.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::client {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

void Fill(std::string* field, const char* env) {
  if (field->empty()) *field = Env(env);
}

}  // namespace

absl::StatusOr<SecurityOptions> ResolveSecurity(const SecurityOptions& options) {
  SecurityOptions s = options;
  if (!s.tls) {
    const std::string v = Env("KILN_TLS");
    s.tls = v == "1" || v == "true" || v == "yes";
  }
  Fill(&s.tls_ca_file, "KILN_TLS_CA");
  Fill(&s.tls_cert_file, "KILN_TLS_CERT");
  Fill(&s.tls_key_file, "KILN_TLS_KEY");
  Fill(&s.tls_server_name, "KILN_TLS_SERVER_NAME");
  Fill(&s.token, "KILN_TOKEN");
  if (s.token.empty()) {
    const std::string file = Env("KILN_TOKEN_FILE");
    if (!file.empty()) {
      std::ifstream in(file);
      std::string line;
      if (!in || !std::getline(in, line)) {
        return absl::InvalidArgumentError(
            absl::StrCat("KILN_TOKEN_FILE ", file, ": cannot read a token from it"));
      }
      s.token = std::string(absl::StripAsciiWhitespace(line));
    }
  }
  if (s.tls_cert_file.empty() != s.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and a key its certificate "
        "(tls_cert_file/KILN_TLS_CERT with tls_key_file/KILN_TLS_KEY)");
  }
  for (char c : s.token) {
    if (c <= ' ' || c >= 0x7f) {
      return absl::InvalidArgumentError(
          "the bearer token has spaces or characters other than printable ASCII");
    }
  }
  return s;
}

}  // namespace kiln::client
