// The server's compile cache: executables keyed by (fingerprint, backend
// kind and config, compile options), shared by every session and every
// device of a backend, bounded with LRU eviction. Concurrent
// requests for one key compile once; the others wait for that result.
#ifndef KILN_SERVER_COMPILE_CACHE_H_
#define KILN_SERVER_COMPILE_CACHE_H_

#include <functional>
#include <list>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device.h"

namespace kiln::server {

// Thread-safe.
class CompileCache {
 public:
  explicit CompileCache(size_t capacity) : capacity_(capacity) {}

  struct Result {
    std::shared_ptr<runtime::Executable> executable;
    bool hit = false;  // found in the cache or compiled by a concurrent call
  };
  using CompileFn =
      std::function<absl::StatusOr<std::shared_ptr<runtime::Executable>>()>;

  // Returns the cached executable for `key`, or runs `compile` (once, even
  // under concurrent calls) and caches its result. Failures are not cached.
  absl::StatusOr<Result> GetOrCompile(const std::string& key,
                                      const CompileFn& compile);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<runtime::Executable> executable;
    std::list<std::string>::iterator lru;
  };
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server

#endif  // KILN_SERVER_COMPILE_CACHE_H_
