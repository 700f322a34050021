// Bearer tokens that clients present in the `authorization` metadata of
// every call ("Bearer TOKEN"). The file has one token per line with a name
// that logs and metrics use instead of the secret:
//
//   # comment
//   trainer-a  5c1e0b2f9d...
//   producer   0a9f...
//
// Names are [A-Za-z0-9_.-]+; tokens are at least 16 printable characters
// without spaces. Reload() re-reads the file (kiln-server does on SIGHUP);
// a file that does not parse leaves the previous tokens in force.
#ifndef KILN_SERVER_TOKENS_H_
#define KILN_SERVER_TOKENS_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln::server {

// Thread-safe.
class TokenStore {
 public:
  static constexpr size_t kMinTokenLength = 16;

  // Reads `path`; INVALID_ARGUMENT naming the line when it does not parse,
  // NOT_FOUND when it cannot be read, FAILED_PRECONDITION when it holds no
  // token, or others may read or write it, or its group may write it.
  static absl::StatusOr<std::unique_ptr<TokenStore>> Load(const std::string& path);

  // Parses the text of a tokens file (`origin` names it in errors).
  static absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Parse(
      absl::string_view text, absl::string_view origin);

  // Re-reads the file; on error the tokens in force stay. Returns how many
  // tokens are now in force.
  absl::StatusOr<size_t> Reload();

  // The name of the token in an `authorization` value ("Bearer TOKEN");
  // UNAUTHENTICATED saying what was wrong otherwise. The comparison takes
  // the same time wherever a wrong token differs.
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization) const;

  const std::string& path() const { return path_; }

 private:
  explicit TokenStore(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  // (name, SHA-256 of the token)
  std::vector<std::pair<std::string, std::string>> tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server

#endif  // KILN_SERVER_TOKENS_H_
