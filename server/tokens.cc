#include "server/tokens.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/status_macros.h"
#include "compiler/ir/fingerprint.h"

namespace kiln::server {
namespace {

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// Equal without an early exit, on digests of one length, so that the time
// taken tells an attacker neither how much of a guess was right nor how
// long the tokens are.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadTokensFile(
    const std::string& path) {
  // The mode is checked on the file that is read (no window between the
  // check and the open).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot read the tokens file ", path));
  struct stat st;
  std::string text;
  absl::Status problem;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = absl::FailedPreconditionError(
        absl::StrCat("the tokens file ", path, " is not a regular file"));
  } else if ((st.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
    // Group read is allowed (a Kubernetes secret mounted for an fsGroup is
    // 0440); anything for others, and group write, is not.
    problem = absl::FailedPreconditionError(absl::StrCat(
        "the tokens file ", path, " is readable or writable by others (or writable by its ",
        "group); chmod 600 it"));
  } else if (st.st_size > (1 << 20)) {
    problem = absl::FailedPreconditionError(
        absl::StrCat("the tokens file ", path, " is larger than 1 MiB"));
  } else if (std::optional<std::string> read = ReadUpTo(fd, static_cast<size_t>(st.st_size))) {
    text = *std::move(read);
  } else {
    problem = absl::NotFoundError(absl::StrCat("cannot read the tokens file ", path));
  }
  close(fd);
  if (!problem.ok()) return problem;
  return TokenStore::Parse(text, path);
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> TokenStore::Parse(
    absl::string_view text, absl::string_view origin) {
  std::vector<std::pair<std::string, std::string>> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line_number, ": ", why));
    };
    if (fields.size() != 2) return error("expected a name and a token");
    const absl::string_view name = fields[0], token = fields[1];
    if (!std::all_of(name.begin(), name.end(), IsNameChar)) {
      return error("a token's name is letters, digits, '_', '.' and '-'");
    }
    if (token.size() < kMinTokenLength) {
      return error(absl::StrCat("token '", name, "' is shorter than ", kMinTokenLength,
                                " characters"));
    }
    if (!std::all_of(token.begin(), token.end(),
                     [](char c) { return c > ' ' && c < 0x7f; })) {
      return error(absl::StrCat("token '", name, "' has characters other than printable ASCII"));
    }
    for (const auto& [other_name, other_token] : tokens) {
      if (other_name == name) return error(absl::StrCat("the name '", name, "' is used twice"));
      if (other_token == token) return error(absl::StrCat("token '", name, "' repeats '", other_name, "'"));
    }
    tokens.emplace_back(std::string(name), std::string(token));
  }
  if (tokens.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(origin, " holds no token"));
  }
  return tokens;
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Load(const std::string& path) {
  std::unique_ptr<TokenStore> store(new TokenStore(path));
  RETURN_IF_ERROR(store->Reload().status());
  return store;
}

absl::StatusOr<size_t> TokenStore::Reload() {
  ASSIGN_OR_RETURN(auto tokens, ReadTokensFile(path_));
  // Only digests are kept: what is compared, and what a core dump shows.
  for (auto& [name, token] : tokens) token = ir::Sha256Hex(token);
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(tokens);
  return tokens_.size();
}

absl::StatusOr<std::string> TokenStore::Authenticate(absl::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "this server requires a bearer token (ConnectOptions::token or KILN_TOKEN)");
  }
  constexpr absl::string_view kScheme = "Bearer ";
  if (authorization.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError("the authorization is not a bearer token");
  }
  const std::string digest = ir::Sha256Hex(authorization.substr(kScheme.size()));
  absl::MutexLock lock(&mu_);
  const std::string* found = nullptr;
  for (const auto& [name, known] : tokens_) {
    if (ConstantTimeEquals(digest, known)) found = &name;
  }
  if (found == nullptr) return absl::UnauthenticatedError("unknown bearer token");
  return *found;
}

}  // namespace kiln::server
