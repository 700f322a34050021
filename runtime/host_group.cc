#include "runtime/host_group.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

#ifdef KILN_WITH_GLOO
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#endif

namespace kiln::runtime {

absl::Status LocalGroupStore::Set(const std::string& key, const std::string& value) {
  if (static_cast<int64_t>(value.size()) > max_value_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("a group store value of ", value.size(),
                                                   " bytes is over the limit of ",
                                                   max_value_bytes_));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [k, v] : values_) {
    if (k == key) {
      v = value;
      return absl::OkStatus();
    }
  }
  if (static_cast<int>(values_.size()) >= max_keys_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the group store holds its limit of ", max_keys_, " keys"));
  }
  values_.emplace_back(key, value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalGroupStore::Get(const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const std::string* found = nullptr;
  auto present = [&]() {
    for (const auto& [k, v] : values_) {
      if (k == key) {
        found = &v;
        return true;
      }
    }
    return false;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("key ", key, " was not set within ", absl::FormatDuration(timeout)));
  }
  return *found;
}

#ifdef KILN_WITH_GLOO
namespace {

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// The member a Gloo rendezvous key belongs to: Gloo writes "rank_<r>" (its
// host name) and "<r>" (its pair addresses).
int RankOfKey(absl::string_view key) {
  absl::ConsumePrefix(&key, "rank_");
  int rank = -1;
  if (!absl::SimpleAtoi(key, &rank)) return -1;
  return rank;
}

// Gloo's view of a GroupStore, under the group's prefix. Gloo reports
// failures by exception; a missing key names the member that should have
// written it.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<GroupStore> store, const HostGroupSpec& spec,
            const CancelCheck& cancelled)
      : store_(std::move(store)), spec_(spec), cancelled_(cancelled) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const absl::Status s = store_->Set(Key(key), std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(absl::StrCat("group store: ", s.message()));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = Wait(key, absl::Now() + spec_.timeout);
    if (!v.ok()) throw gloo::IoException(Missing(key, v.status()));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, Millis(spec_.timeout)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> v = Wait(key, deadline);
      if (!v.ok()) throw gloo::IoException(Missing(key, v.status()));
    }
  }

  bool was_cancelled() const { return cancelled_flag_; }

 private:
  // The key's value, waiting in slices so that a cancelled join stops.
  absl::StatusOr<std::string> Wait(const std::string& key, absl::Time deadline) {
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      const absl::Duration slice =
          std::max(absl::Milliseconds(1), std::min(left, absl::Milliseconds(200)));
      absl::StatusOr<std::string> v = store_->Get(Key(key), slice);
      // Not there yet: not set yet, or (a remote store) member 0 has not
      // formed the group or is not up yet.
      const absl::StatusCode code = v.status().code();
      if (v.ok() || (code != absl::StatusCode::kDeadlineExceeded &&
                     code != absl::StatusCode::kNotFound &&
                     code != absl::StatusCode::kUnavailable)) {
        return v;
      }
      if (cancelled_ && cancelled_()) {
        cancelled_flag_ = true;
        return absl::CancelledError("the join was cancelled");
      }
      if (absl::Now() >= deadline) return v;
    }
  }

  std::string Key(const std::string& key) const { return absl::StrCat(spec_.id, "/", key); }
  std::string Missing(const std::string& key, const absl::Status& status) const {
    const int rank = RankOfKey(key);
    if (rank < 0 || rank >= static_cast<int>(spec_.members.size())) {
      return absl::StrCat("group store key ", key, ": ", status.message());
    }
    return absl::StrCat("member ", rank, " (", spec_.members[rank], ") did not join group ",
                        spec_.id, " within ", absl::FormatDuration(spec_.timeout), ": ",
                        status.message());
  }

  std::shared_ptr<GroupStore> store_;
  const HostGroupSpec spec_;
  const CancelCheck cancelled_;
  bool cancelled_flag_ = false;
};

// Gloo reports a timeout and a lost connection alike as IoException; the
// message tells them apart. A lost member is ABORTED, not UNAVAILABLE: this
// server is up, and its callers must not take it for the one that is gone.
absl::Status FromGloo(const HostGroupSpec& spec, absl::string_view what, const std::exception& e) {
  const std::string message = absl::StrCat("group ", spec.id, ": ", what, ": ", e.what());
  const std::string lower = absl::AsciiStrToLower(e.what());
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout") ||
      absl::StrContains(lower, "did not join")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::AbortedError(message);
}

class GlooHostGroup : public HostGroup {
 public:
  GlooHostGroup(HostGroupSpec spec, std::shared_ptr<gloo::transport::Device> device,
                std::shared_ptr<gloo::rendezvous::Context> context)
      : HostGroup(std::move(spec)), device_(std::move(device)), context_(std::move(context)) {}

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override {
    absl::MutexLock lock(&exchange_mu_);
    RETURN_IF_ERROR(Usable());
    const int n = size();
    try {
      // First the sizes, then the bytes.
      int64_t my_size = static_cast<int64_t>(mine.size());
      std::vector<int64_t> sizes(n);
      gloo::AllgatherOptions count(context_);
      count.setInput(&my_size, 1);
      count.setOutput(sizes.data(), sizes.size());
      count.setTag(next_tag_++);
      gloo::allgather(count);
      std::vector<size_t> elements(n);
      size_t total = 0;
      for (int r = 0; r < n; ++r) {
        if (sizes[r] < 0 || sizes[r] > kMaxGroupExchangeBytes) {
          return Break(absl::InvalidArgumentError(
              absl::StrCat("group ", spec().id, ": member ", r, " (", spec().members[r],
                           ") sends ", sizes[r], " bytes, over the limit of ",
                           kMaxGroupExchangeBytes)));
        }
        elements[r] = static_cast<size_t>(sizes[r]);
        total += elements[r];
      }
      std::string out(total, '\0');
      if (total > 0) {
        gloo::AllgathervOptions bytes(context_);
        // Gloo only reads its input.
        bytes.setInput(const_cast<char*>(mine.data()), mine.size());
        bytes.setOutput(out.data(), elements);
        bytes.setTag(next_tag_++);
        gloo::allgatherv(bytes);
      }
      std::vector<std::string> result(n);
      size_t at = 0;
      for (int r = 0; r < n; ++r) {
        result[r] = out.substr(at, elements[r]);
        at += elements[r];
      }
      return result;
    } catch (const std::exception& e) {
      return Break(FromGloo(spec(), "an exchange between the servers failed", e));
    }
  }

  absl::StatusOr<std::vector<std::string>> AllGatherEqual(const std::string& mine) override {
    absl::MutexLock lock(&exchange_mu_);
    RETURN_IF_ERROR(Usable());
    const int n = size();
    if (mine.empty()) return std::vector<std::string>(n);
    try {
      std::string out(mine.size() * n, '\0');
      gloo::AllgatherOptions options(context_);
      options.setInput(const_cast<char*>(mine.data()), mine.size());
      options.setOutput(out.data(), out.size());
      options.setTag(next_tag_++);
      gloo::allgather(options);
      std::vector<std::string> result(n);
      for (int r = 0; r < n; ++r) result[r] = out.substr(r * mine.size(), mine.size());
      return result;
    } catch (const std::exception& e) {
      return Break(FromGloo(spec(), "an exchange between the servers failed", e));
    }
  }

  absl::Status AllReduce(void* data, size_t count, size_t element_size,
                         const Combine& combine) override {
    absl::MutexLock lock(&exchange_mu_);
    RETURN_IF_ERROR(Usable());
    if (count == 0) return absl::OkStatus();
    try {
      gloo::AllreduceOptions options(context_);
      switch (element_size) {
        case 1: options.setOutput(static_cast<uint8_t*>(data), count); break;
        case 2: options.setOutput(static_cast<uint16_t*>(data), count); break;
        case 4: options.setOutput(static_cast<uint32_t*>(data), count); break;
        case 8: options.setOutput(static_cast<uint64_t*>(data), count); break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("an all-reduce between servers of ", element_size, "-byte elements"));
      }
      options.setReduceFunction(combine);
      options.setTag(next_tag_++);
      gloo::allreduce(options);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return Break(FromGloo(spec(), "an all-reduce between the servers failed", e));
    }
  }

 private:
  void Disconnect() override {
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
      // A connection that cannot be closed cleanly is closed by the
      // group's destruction.
    }
  }

  // OK while the group is whole.
  absl::Status Usable() const {
    const absl::Status b = broken();
    if (b.ok()) return b;
    return absl::Status(b.code(), absl::StrCat("group ", spec().id,
                                               " is broken (form a new group): ", b.message()));
  }

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  absl::Mutex exchange_mu_;
  uint32_t next_tag_ ABSL_GUARDED_BY(exchange_mu_) = 1;
};

}  // namespace

bool HostGroupsSupported() { return true; }

absl::StatusOr<std::unique_ptr<HostGroup>> HostGroup::Create(const HostGroupSpec& spec,
                                                             std::shared_ptr<GroupStore> store,
                                                             const CancelCheck& cancelled) {
  const int n = static_cast<int>(spec.members.size());
  if (n < 1 || spec.rank < 0 || spec.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", spec.id, ": rank ", spec.rank, " of ", n, " members"));
  }
  // Gloo writes to its sockets with writev, which raises SIGPIPE when the
  // peer is gone: the default action would end this process when another
  // member dies. The failed write's error is what the group reports.
  static const bool sigpipe_ignored = [] {
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    return sigaction(SIGPIPE, &ignore, nullptr) == 0;
  }();
  (void)sigpipe_ignored;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = spec.bind_host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(spec.rank, n);
    context->setTimeout(Millis(spec.timeout));
    GlooStore gloo_store(std::move(store), spec, cancelled);
    try {
      context->connectFullMesh(gloo_store, device);
    } catch (const std::exception& e) {
      if (gloo_store.was_cancelled()) {
        return absl::CancelledError(absl::StrCat("group ", spec.id, ": joining was cancelled"));
      }
      throw;
    }
    return std::unique_ptr<HostGroup>(
        new GlooHostGroup(spec, std::move(device), std::move(context)));
  } catch (const std::exception& e) {
    return FromGloo(spec, absl::StrCat("forming it as member ", spec.rank, " on ", spec.bind_host),
                    e);
  }
}

#else  // !KILN_WITH_GLOO

bool HostGroupsSupported() { return false; }

absl::StatusOr<std::unique_ptr<HostGroup>> HostGroup::Create(const HostGroupSpec& spec,
                                                             std::shared_ptr<GroupStore>,
                                                             const CancelCheck&) {
  return absl::UnimplementedError(absl::StrCat(
      "group ", spec.id, ": this kiln-server was built without Gloo (libgloo-dev), so it cannot "
      "join a group of servers"));
}

#endif  // KILN_WITH_GLOO

}  // namespace kiln::runtime
