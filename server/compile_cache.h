// The server's compile cache: executables keyed by (fingerprint, backend
// kind and config, compile options), shared by every session and every
// device of a backend, bounded in entries and in bytes (each entry's
// canonical module plus what its executable holds, its constants) with LRU
// eviction. These bytes are the cache's, not any session's: they outlive
// the sessions that compiled them, and the budget is what bounds them.
// Concurrent requests for one key compile once; the others wait for that
// result.
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
  // An executable larger than `max_bytes` alone is returned but not kept.
  CompileCache(size_t capacity, int64_t max_bytes)
      : capacity_(capacity), max_bytes_(max_bytes) {}

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
  int64_t bytes() const;

 private:
  struct Entry {
    std::shared_ptr<runtime::Executable> executable;
    std::string content;
    std::list<std::string>::iterator lru;
    int64_t bytes = 0;
  };
  void Erase(absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const size_t capacity_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  size_t collisions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_COMPILE_CACHE_H_
