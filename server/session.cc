#include "server/session.h"

#include <malloc.h>
#include <sys/random.h>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace kiln::server {

std::string NewHandle(absl::string_view prefix) {
  // 128 bits from the kernel's random source per handle, read 4 KiB at a
  // time: one system call serves 256 handles.
  static absl::Mutex mu(absl::kConstInit);
  static unsigned char pool[4096] ABSL_GUARDED_BY(mu);
  static size_t used ABSL_GUARDED_BY(mu) = sizeof(pool);
  unsigned char bits[16];
  {
    absl::MutexLock lock(&mu);
    if (used == sizeof(pool)) {
      size_t filled = 0;
      while (filled < sizeof(pool)) {
        const ssize_t n = getrandom(pool + filled, sizeof(pool) - filled, 0);
        if (n > 0) {
          filled += static_cast<size_t>(n);
        } else if (n < 0 && errno != EINTR) {
          // No getrandom (an old kernel, a sandbox): the library's source.
          std::random_device device;
          for (; filled < sizeof(pool); ++filled) pool[filled] = static_cast<unsigned char>(device());
        }
      }
      used = 0;
    }
    std::memcpy(bits, pool + used, sizeof(bits));
    std::memset(pool + used, 0, sizeof(bits));  // a handle is handed out once
    used += sizeof(bits);
  }
  return absl::StrCat(
      prefix, absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bits), sizeof(bits))));
}

Session::Session(std::string id, std::string client_name, size_t feed_capacity,
                 const SessionLimits& limits, std::shared_ptr<runtime::MemoryAccount> host_budget)
    : id_(std::move(id)),
      client_name_(std::move(client_name)),
      feed_capacity_(feed_capacity),
      max_executions_(limits.executions),
      account_(std::make_shared<runtime::MemoryAccount>(
          absl::StrCat("session ", id_), limits.memory_bytes, "--session_memory_bytes")),
      host_account_(std::make_shared<runtime::MemoryAccount>(
          absl::StrCat("session ", id_, " (host memory)"), limits.host_memory_bytes,
          "--session_host_memory_bytes", std::move(host_budget))) {}

absl::StatusOr<std::shared_ptr<void>> Session::BeginExecution() {
  if (executions_.fetch_add(1) >= max_executions_) {
    --executions_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "session ", id_, " already runs ", max_executions_,
        " executions, its limit (--session_executions)"));
  }
  return std::shared_ptr<void>(nullptr, [this](void*) { --executions_; });
}

std::string Session::AddBuffer(BufferEntry entry) {
  std::string handle = NewHandle("b-");
  absl::MutexLock lock(&mu_);
  buffers_[handle] = std::move(entry);
  return handle;
}

absl::StatusOr<BufferEntry> Session::GetBuffer(const std::string& handle) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown buffer handle '", handle, "'"));
  }
  return it->second;
}

std::string Session::AddExecutable(ExecutableEntry entry) {
  std::string handle = NewHandle("e-");
  absl::MutexLock lock(&mu_);
  executables_[handle] = std::move(entry);
  return handle;
}

absl::StatusOr<ExecutableEntry> Session::GetExecutable(const std::string& handle) const {
  absl::MutexLock lock(&mu_);
  auto it = executables_.find(handle);
  if (it == executables_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown executable handle '", handle, "'"));
  }
  return it->second;
}

absl::StatusOr<int> Session::Release(const std::vector<std::string>& buffers,
                                     const std::vector<std::string>& executables) {
  // Values are dropped after the lock is released: freeing memory can take
  // a while and must not block other calls on this session.
  std::vector<BufferEntry> dropped_buffers;
  std::vector<ExecutableEntry> dropped_executables;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& h : buffers) {
      if (!buffers_.contains(h)) {
        return absl::NotFoundError(absl::StrCat("unknown buffer handle '", h, "'"));
      }
    }
    for (const std::string& h : executables) {
      if (!executables_.contains(h)) {
        return absl::NotFoundError(absl::StrCat("unknown executable handle '", h, "'"));
      }
    }
    for (const std::string& h : buffers) {
      auto it = buffers_.find(h);
      if (it == buffers_.end()) continue;  // listed twice
      dropped_buffers.push_back(std::move(it->second));
      buffers_.erase(it);
    }
    for (const std::string& h : executables) {
      auto it = executables_.find(h);
      if (it == executables_.end()) continue;
      dropped_executables.push_back(std::move(it->second));
      executables_.erase(it);
    }
  }
  return static_cast<int>(dropped_buffers.size() + dropped_executables.size());
}

absl::StatusOr<std::vector<BufferEntry>> Session::TakeBuffers(
    const std::vector<std::string>& handles) {
  absl::MutexLock lock(&mu_);
  for (const std::string& h : handles) {
    if (!buffers_.contains(h)) {
      return absl::NotFoundError(absl::StrCat("unknown buffer handle '", h, "'"));
    }
  }
  std::vector<BufferEntry> taken;
  for (const std::string& h : handles) {
    auto it = buffers_.find(h);
    if (it == buffers_.end()) continue;
    taken.push_back(std::move(it->second));
    buffers_.erase(it);
  }
  return taken;
}

std::shared_ptr<FeedQueues> Session::Feeds(const std::string& device) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<FeedQueues>& feeds = feeds_[device];
  if (feeds == nullptr) feeds = std::make_shared<FeedQueues>(feed_capacity_, host_account_);
  return feeds;
}

void Session::AbortFeeds() {
  std::vector<std::shared_ptr<FeedQueues>> feeds;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [device, f] : feeds_) feeds.push_back(f);
  }
  for (auto& f : feeds) {
    f->infeed.Abort();
    f->outfeed.Abort();
  }
}

void Session::Clear() {
  closed_ = true;
  AbortFeeds();
  absl::flat_hash_map<std::string, BufferEntry> buffers;
  absl::flat_hash_map<std::string, ExecutableEntry> executables;
  absl::flat_hash_map<std::string, std::shared_ptr<GroupEntry>> groups;
  {
    absl::MutexLock lock(&mu_);
    buffers.swap(buffers_);
    executables.swap(executables_);
    groups.swap(groups_);
  }
}

absl::Status Session::ReserveGroup(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError("the session is closed");
  if (groups_.contains(id) || reserved_groups_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("group ", id, " is already formed or forming"));
  }
  if (static_cast<int>(groups_.size() + reserved_groups_.size()) >= kMaxGroups) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a session may be in at most ", kMaxGroups, " groups; leave one first"));
  }
  reserved_groups_.insert(id);
  return absl::OkStatus();
}

void Session::Unreserve(const std::string& id) {
  absl::MutexLock lock(&mu_);
  reserved_groups_.erase(id);
}

absl::Status Session::AddGroup(const std::string& id, std::shared_ptr<GroupEntry> group) {
  absl::MutexLock lock(&mu_);
  if (reserved_groups_.erase(id) == 0) {
    return absl::FailedPreconditionError(absl::StrCat("group ", id, " was not being formed"));
  }
  if (closed_) return absl::FailedPreconditionError("the session is closed");
  groups_.emplace(id, std::move(group));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<GroupEntry>> Session::GetGroup(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat("this session formed no group ", id));
  }
  return it->second;
}

absl::Status Session::RemoveGroup(const std::string& id) {
  std::shared_ptr<GroupEntry> gone;
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat("this session formed no group ", id));
  }
  gone = std::move(it->second);
  groups_.erase(it);
  return absl::OkStatus();
}

int64_t Session::buffer_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(buffers_.size());
}

SessionManager::SessionManager(absl::Duration lease, size_t feed_capacity,
                               const SessionLimits& limits)
    : lease_(lease),
      feed_capacity_(feed_capacity),
      limits_(limits),
      host_budget_(std::make_shared<runtime::MemoryAccount>(
          "the server's sessions (host memory)", limits.all_sessions_host_memory_bytes,
          "--host_memory_bytes")) {
  reaper_ = std::thread([this] {
    const absl::Duration period =
        std::min(absl::Seconds(1), std::max(absl::Milliseconds(50), lease_ / 4));
    absl::Time last = absl::Now();
    uint64_t trimmed_at = 0;
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      mu_.AwaitWithTimeout(absl::Condition(&stop_), period);
      if (stop_) break;
      // Woken far later than asked: the process was stopped (SIGSTOP, a
      // suspended machine) and no client could renew meanwhile. The pause
      // does not count against their leases.
      const absl::Time now = absl::Now();
      const absl::Duration late = now - last - period;
      if (late > period) {
        for (auto& [id, entry] : sessions_) entry.deadline += late;
      }
      last = now;
      mu_.Unlock();
      ReapExpired();
      // Sessions ended since the last tick: give the memory kept for reuse
      // back to the system (the backends' cached blocks, and the heap glibc
      // keeps per thread arena), here rather than on a client's call.
      if (const uint64_t ended = ended_.load(); ended != trimmed_at) {
        trimmed_at = ended;
        runtime::ReleaseCachedMemory();  // blocks backends kept for reuse
        malloc_trim(0);
      }
      mu_.Lock();
    }
  });
}

SessionManager::~SessionManager() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  reaper_.join();
}

std::string SafeClientName(absl::string_view name) {
  constexpr size_t kMaxClientName = 128;
  std::string escaped = absl::CHexEscape(name.substr(0, kMaxClientName));
  if (name.size() > kMaxClientName) escaped += "...";
  return escaped;
}

std::shared_ptr<Session> SessionManager::Create(const std::string& client_name) {
  // The name is the client's to choose: logs get it escaped and bounded, so
  // it cannot forge log lines.
  auto session = std::make_shared<Session>(NewHandle("s-"), SafeClientName(client_name),
                                           feed_capacity_, limits_, host_budget_);
  absl::MutexLock lock(&mu_);
  sessions_[session->id()] = Entry{session, absl::Now() + lease_};
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Get(const std::string& id, bool renew) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown or expired session '", id, "'"));
  }
  if (renew) it->second.deadline = absl::Now() + lease_;
  return it->second.session;
}

absl::Status SessionManager::Close(const std::string& id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown or expired session '", id, "'"));
    }
    session = std::move(it->second.session);
    sessions_.erase(it);
  }
  session->Clear();
  ++ended_;
  logging::Info("session {} ({}) closed", id, session->client_name());
  return absl::OkStatus();
}

bool SessionManager::Alive(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  return sessions_.contains(id);
}

size_t SessionManager::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

int SessionManager::ReapExpired() {
  std::vector<std::shared_ptr<Session>> expired;
  {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second.deadline < now) {
        expired.push_back(std::move(it->second.session));
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const auto& s : expired) {
    logging::Info("session {} ({}) lease expired; freeing {} buffers", s->id(),
                  s->client_name(), s->buffer_count());
    s->Clear();
  }
  ended_ += expired.size();
  return static_cast<int>(expired.size());
}

}  // namespace kiln::server
