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
  // `content` is the exact program the key stands for: a hit is confirmed
  // by comparing it with the stored one, so even a colliding key never
  // hands one program's executable to another (it compiles and replaces
  // the entry instead, counted in collisions()).
  absl::StatusOr<Result> GetOrCompile(const std::string& key, const std::string& content,
                                      const CompileFn& compile);
  size_t collisions() const;
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<runtime::Executable> executable;
    std::string content;
    std::list<std::string>::iterator lru;
  };
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  size_t collisions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_COMPILE_CACHE_H_
