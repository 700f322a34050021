// A group of kiln-servers that run one replicated program together: each
// server holds some of the replicas, and every collective round is an
// exchange between the servers through Gloo's TCP transport. The servers
// find each other through a key-value store (GroupStore), which the group's
// first member offers to the others.
#ifndef KILN_RUNTIME_HOST_GROUP_H_
#define KILN_RUNTIME_HOST_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/cancel_check.h"

namespace kiln::runtime {

// The most bytes one member hands in to one exchange.
inline constexpr int64_t kMaxGroupExchangeBytes = int64_t{1} << 34;

// Where the members of a group publish their transport addresses.
// Thread-safe.
class GroupStore {
 public:
  virtual ~GroupStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for `key` to be set. DEADLINE_EXCEEDED when it is
  // not.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
};

// A store in this process: what the group's first member serves to the
// others. Bounded: at most `max_keys` keys of at most `max_value_bytes`.
class LocalGroupStore : public GroupStore {
 public:
  LocalGroupStore(int max_keys, int64_t max_value_bytes)
      : max_keys_(max_keys), max_value_bytes_(max_value_bytes) {}
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;

 private:
  const int max_keys_;
  const int64_t max_value_bytes_;
  absl::Mutex mu_;
  std::vector<std::pair<std::string, std::string>> values_ ABSL_GUARDED_BY(mu_);
};

struct HostGroupSpec {
  std::string id;
  int rank = 0;
  // Each member's name for messages (its kiln-server address), by rank.
  std::vector<std::string> members;
  // The interface this server's transport binds to (a host name or IP).
  std::string bind_host = "127.0.0.1";
  // How long forming the group and each collective round may take.
  absl::Duration timeout = absl::Seconds(30);
};

// Thread-safe; one exchange at a time (callers serialize executions).
// Once an exchange fails the group is broken: every later one fails at
// once, and the members form a new group.
class HostGroup {
 public:
  // Connects to every other member (each calls Create at about the same
  // time). UNIMPLEMENTED when Kiln was built without Gloo. While it waits
  // for the others' addresses it polls `cancelled` (may be null): CANCELLED
  // once that turns true.
  static absl::StatusOr<std::unique_ptr<HostGroup>> Create(const HostGroupSpec& spec,
                                                           std::shared_ptr<GroupStore> store,
                                                           const CancelCheck& cancelled = nullptr);
  virtual ~HostGroup() = default;

  const HostGroupSpec& spec() const { return spec_; }
  int rank() const { return spec_.rank; }
  int size() const { return static_cast<int>(spec_.members.size()); }

  // Every member hands in its bytes and gets everyone's, by rank. The
  // members may hand in different sizes.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) = 0;
  // The same when every member hands in `mine.size()` bytes (one exchange
  // instead of two). Members that do not are an error.
  virtual absl::StatusOr<std::vector<std::string>> AllGatherEqual(const std::string& mine) = 0;

  // out = a (+) b over `count` elements; the same on every member.
  using Combine = std::function<void(void* out, const void* a, const void* b, size_t count)>;
  // Every member hands in `count` elements of `element_size` bytes (1, 2, 4
  // or 8) at `data`, and gets back all members' combined element by element
  // with `combine` in place (Gloo's ring all-reduce: every member gets the
  // same bytes).
  virtual absl::Status AllReduce(void* data, size_t count, size_t element_size,
                                 const Combine& combine) = 0;

  // OK, or why the group broke.
  absl::Status broken() const {
    absl::MutexLock lock(&mu_);
    return broken_;
  }
  // Breaks the group (an execution in it failed, so this member's rounds
  // no longer match the others'). Records the first failure and returns it.
  // The first break also closes this member's connections to the others:
  // any of them waiting on it in an exchange fails at once instead of at
  // the timeout. Not while an exchange of this member runs on another
  // thread (the exchanges break the group themselves when they fail).
  absl::Status Break(absl::Status status) {
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      if (broken_.ok()) {
        broken_ = std::move(status);
        first = true;
      }
    }
    if (first) Disconnect();
    return broken();
  }

 protected:
  explicit HostGroup(HostGroupSpec spec) : spec_(std::move(spec)) {}
  // Closes the connections to the other members.
  virtual void Disconnect() {}

 private:
  const HostGroupSpec spec_;
  mutable absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

// True when this build can form groups (it was built with Gloo).
bool HostGroupsSupported();

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_HOST_GROUP_H_
