// The compile cache's on-disk layer (--compile_cache_dir): what a backend
// keeps of a compiled program (runtime::Compiler::CompileForCache), so that
// a restarted server loads a known program instead of compiling it.
//
// An entry is keyed by every part that shapes the compiled form: the exact
// module's hash, the backend kind and config, the compile options, Kiln's
// version, and the backend's libraries and processor. A miss says which
// part differed from the nearest entry for the same module. Entries are
// written to a temporary file and renamed into place, so several servers
// may share a directory and a reader never sees half an entry; each carries
// a checksum, and a damaged entry is removed. The directory is bounded in
// bytes: the least recently used entries go first.
//
// The directory is trusted like the server's binaries: whoever can write
// it can plant programs. It is created 0700 and entries are written 0600
// (they hold programs with their constants); only regular files of at most
// the bound are read.
#ifndef KILN_SERVER_PERSISTENT_CACHE_H_
#define KILN_SERVER_PERSISTENT_CACHE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln::server {

struct PersistentKey {
  std::string module;        // SHA-256 of the canonical module
  std::string backend;       // kind: "cpu"
  std::string config;        // the backend config that shapes code
  std::string options;       // compile options: "seed=42"
  std::string kiln_version;  // "0.4.0"
  std::string dependencies;  // Compiler::ArtifactDependencies()

  // SHA-256 over every part.
  std::string Digest() const;
};

// Thread-safe; several processes may share a directory.
class PersistentCache {
 public:
  // Creates `dir` if needed. FAILED_PRECONDITION when it cannot be created
  // or written.
  static absl::StatusOr<std::unique_ptr<PersistentCache>> Open(const std::string& dir,
                                                               int64_t max_bytes);

  struct Lookup {
    std::optional<std::string> artifact;  // set on a hit
    // On a miss: one word for metrics ("absent", "backend", "config",
    // "options", "kiln_version", "dependencies", "corrupt") and a sentence
    // for the log naming what differed.
    std::string reason;
    std::string explanation;
  };
  Lookup Find(const PersistentKey& key);

  // Writes the entry atomically, then removes the least recently used
  // entries while the directory holds more than its bound. An entry larger
  // than the bound alone is not written (OK, nothing stored).
  absl::Status Store(const PersistentKey& key, const std::string& artifact);

  const std::string& dir() const { return dir_; }
  // Bytes of the entries in the directory, as of the last Store or Open.
  int64_t bytes() const;

 private:
  PersistentCache(std::string dir, int64_t max_bytes)
      : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string PathOf(const PersistentKey& key) const;
  void Evict();

  const std::string dir_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_PERSISTENT_CACHE_H_
