#include "server/compile_cache.h"

namespace kiln::server {

absl::StatusOr<CompileCache::Result> CompileCache::GetOrCompile(
    const std::string& key, const std::string& content, const CompileFn& compile) {
  {
    absl::MutexLock lock(&mu_);
    // Wait while another call compiles this key.
    auto done = [this, &key]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !in_flight_.contains(key);
    };
    mu_.Await(absl::Condition(&done));
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.content == content) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        return Result{it->second.executable, true};
      }
      // The same key for another program: never reuse, replace below.
      ++collisions_;
      Erase(it);
    }
    // Not cached (or a concurrent compile failed): compile it here.
    in_flight_[key] = 1;
  }
  // Even if `compile` throws, the key must not stay in flight: every later
  // call for it would wait forever.
  struct InFlight {
    CompileCache* cache;
    const std::string& key;
    bool done = false;
    ~InFlight() {
      if (done) return;
      absl::MutexLock lock(&cache->mu_);
      cache->in_flight_.erase(key);
    }
  } in_flight{this, key};
  absl::StatusOr<std::shared_ptr<runtime::Executable>> compiled = compile();
  absl::MutexLock lock(&mu_);
  in_flight_.erase(key);
  in_flight.done = true;
  if (!compiled.ok()) return compiled.status();
  const int64_t bytes = static_cast<int64_t>(content.size()) + (*compiled)->held_bytes();
  if (bytes > max_bytes_ || capacity_ == 0) return Result{*compiled, false};
  lru_.push_front(key);
  entries_[key] = Entry{*compiled, content, lru_.begin(), bytes};
  bytes_ += bytes;
  while ((entries_.size() > capacity_ || bytes_ > max_bytes_) && !lru_.empty()) {
    Erase(entries_.find(lru_.back()));
  }
  return Result{*compiled, false};
}

void CompileCache::Erase(absl::flat_hash_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

int64_t CompileCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t CompileCache::collisions() const {
  absl::MutexLock lock(&mu_);
  return collisions_;
}

size_t CompileCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace kiln::server
