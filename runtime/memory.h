// Per-device memory accounting: every live buffer's bytes are charged to its
// device's tracker; allocations past the capacity fail cleanly and name the
// largest buffers that hold the memory.
#ifndef KILN_RUNTIME_MEMORY_H_
#define KILN_RUNTIME_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "compiler/ir/shape.h"

namespace kiln::runtime {

class Buffer;

struct MemoryStats {
  int64_t capacity_bytes = 0;
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t live_buffers = 0;
};

// The memory one client (a server session) holds across devices. While an
// AccountScope is current on a thread, every buffer a MemoryTracker charges
// on that thread is charged to the account too; a charge past the account's
// limit fails with RESOURCE_EXHAUSTED naming the limit. The charge stays
// with the buffer until it is freed, on whatever thread. An account may have
// a parent (the server's budget that every session's account draws on): a
// charge is made to both or to neither. Thread-safe.
class MemoryAccount {
 public:
  // `limit_name` is how the error names the limit (a server flag).
  // `parent` (may be null) is charged with every charge to this account.
  MemoryAccount(std::string name, int64_t limit_bytes, std::string limit_name,
                std::shared_ptr<MemoryAccount> parent = nullptr);

  const std::string& name() const { return name_; }
  int64_t limit_bytes() const { return limit_; }
  int64_t bytes_in_use() const { return in_use_.load(); }
  int64_t peak_bytes_in_use() const { return peak_.load(); }

  // Adds `bytes` unless that passes the limit (RESOURCE_EXHAUSTED naming
  // `what`, the use and the limit).
  absl::Status Charge(int64_t bytes, const std::string& what) {
    return Charge(bytes, [&what] { return what; });
  }
  // `what` names the charge for the error; called only on one.
  absl::Status Charge(int64_t bytes, absl::FunctionRef<std::string()> what);
  void Uncharge(int64_t bytes);

 private:
  const std::string name_;
  const int64_t limit_;
  const std::string limit_name_;
  const std::shared_ptr<MemoryAccount> parent_;
  std::atomic<int64_t> in_use_{0};
  std::atomic<int64_t> peak_{0};
};

// Host memory that is no buffer (a value waiting in a feed queue, a value
// being assembled from a stream, a reply on its way to the client), charged
// to an account for as long as this object lives. Move-only; not
// thread-safe (one owner at a time).
class MemoryCharge {
 public:
  MemoryCharge() = default;
  // Charges nothing yet; `account` null: Grow charges nothing.
  explicit MemoryCharge(std::shared_ptr<MemoryAccount> account) : account_(std::move(account)) {}
  MemoryCharge(MemoryCharge&& other) noexcept { *this = std::move(other); }
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;
  ~MemoryCharge() { Reset(); }

  // Charges `bytes` more for `what`; RESOURCE_EXHAUSTED from the account
  // (nothing more charged) when that passes its limit or its parent's.
  absl::Status Grow(int64_t bytes, const std::string& what);
  // Returns everything charged so far.
  void Reset();
  int64_t bytes() const { return bytes_; }
  const std::shared_ptr<MemoryAccount>& account() const { return account_; }

 private:
  std::shared_ptr<MemoryAccount> account_;
  int64_t bytes_ = 0;
};

// Makes `account` current on the calling thread until the scope ends
// (null: no account); scopes nest.
class AccountScope {
 public:
  explicit AccountScope(std::shared_ptr<MemoryAccount> account);
  ~AccountScope();
  AccountScope(const AccountScope&) = delete;
  AccountScope& operator=(const AccountScope&) = delete;

  // The calling thread's current account, or null.
  static std::shared_ptr<MemoryAccount> Current();

 private:
  std::shared_ptr<MemoryAccount> previous_;
};

// Memory a backend keeps for reuse after its buffers are freed (host blocks
// kept mapped, for one) can be given back to the system: backends register
// a releaser; ReleaseCachedMemory runs them all (the server does when
// sessions end). Thread-safe.
void RegisterMemoryReleaser(std::function<void()> release);
void ReleaseCachedMemory();

// Thread-safe.
class MemoryTracker {
 public:
  // The bytes an array occupies on the device (a backend with padded tiles
  // counts the padding); null: its byte size.
  using Footprint = std::function<int64_t(const ir::Shape&)>;
  explicit MemoryTracker(int64_t capacity_bytes, Footprint footprint = nullptr)
      : capacity_(capacity_bytes), footprint_(std::move(footprint)) {}

  int64_t FootprintOf(const ir::Shape& shape) const {
    return footprint_ ? footprint_(shape) : shape.ByteSize();
  }
  // Charges `bytes` for `owner` (borrowed; must stay alive until Release),
  // and to the thread's current MemoryAccount if any. RESOURCE_EXHAUSTED
  // when it would pass the account's limit or the capacity, naming the
  // request, the use, the capacity and the largest live buffers (of the
  // account only, when there is one: a client never learns of another's
  // buffers).
  absl::Status Reserve(const Buffer* owner, int64_t bytes);
  void Release(const Buffer* owner, int64_t bytes);
  MemoryStats Stats() const;

 private:
  const int64_t capacity_;
  const Footprint footprint_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  struct Charge {
    int64_t bytes = 0;
    std::shared_ptr<MemoryAccount> account;
  };
  absl::flat_hash_map<const Buffer*, Charge> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_MEMORY_H_
