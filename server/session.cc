#include "server/session.h"

#include <malloc.h>
#include <sys/random.h>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "proto/protocol.h"

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

absl::StatusOr<Session::Running> Session::BeginExecution() {
  if (executions_.fetch_add(1) >= max_executions_) {
    --executions_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "session ", id_, " already runs ", max_executions_,
        " executions, its limit (--session_executions)"));
  }
  return Running(&executions_);
}

std::string Session::AddBuffer(BufferEntry entry) {
  std::string handle = NewHandle("b-");
  absl::MutexLock lock(&mu_);
  buffers_[handle] = std::move(entry);
  return handle;
}

namespace {

// Wakes whoever waits for `pending` with `value`, once.
void Settle(PendingOutput& pending, absl::StatusOr<runtime::BufferPtr> value) {
  {
    absl::MutexLock lock(&pending.mu);
    if (pending.done) return;
    pending.done = true;
    pending.value = std::move(value);
  }
  pending.done_cv.SignalAll();
}

}  // namespace

absl::StatusOr<BufferEntry> Session::GetBuffer(const std::string& handle,
                                               const runtime::CancelCheck& cancelled,
                                               uint64_t before) const {
  if (before > 0) {
    const std::optional<uint64_t> sequence = protocol::SequenceOf(handle);
    if (sequence.has_value() && *sequence >= before) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", handle, " is an output of execution ", *sequence,
          ", which does not come before this one (", before, ")"));
    }
  }
  std::shared_ptr<PendingOutput> pending;
  runtime::Device* device = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(handle);
    if (it == buffers_.end()) {
      const std::optional<uint64_t> sequence = protocol::SequenceOf(handle);
      if (sequence.has_value()) {
        if (auto failed = failed_turns_.find(*sequence); failed != failed_turns_.end()) {
          return absl::NotFoundError(absl::StrCat("buffer handle '", handle, "' names an output of execution ",
                                                  *sequence, ", which failed before it ran: ",
                                                  failed->second.message()));
        }
        if (*sequence >= next_sequence_) {
          return absl::NotFoundError(absl::StrCat("buffer handle '", handle, "' names an output of execution ",
                                                  *sequence, ", which has not started"));
        }
      }
      return absl::NotFoundError(absl::StrCat("unknown buffer handle '", handle, "'"));
    }
    if (it->second.pending == nullptr) return it->second;
    pending = it->second.pending;
    device = it->second.device;
  }
  absl::MutexLock lock(&pending->mu);
  while (!pending->done) {
    if (closed_ || (cancelled && cancelled())) {
      return absl::CancelledError(absl::StrCat("stopped waiting for buffer ", handle,
                                               ", the output of an execution still running"));
    }
    pending->done_cv.WaitWithTimeout(&pending->mu, absl::Milliseconds(20));
  }
  if (!pending->value.ok()) {
    return absl::Status(pending->value.status().code(),
                        absl::StrCat("buffer ", handle, " has no value: ",
                                     pending->value.status().message()));
  }
  return BufferEntry{*pending->value, device, nullptr};
}

void Session::RecordFailedTurn(uint64_t sequence, const absl::Status& why) {
  failed_turns_[sequence] = why;
  while (failed_turns_.size() > kFailedTurnsKept) failed_turns_.erase(failed_turns_.begin());
}

void Session::PassTurnTo(uint64_t sequence) {
  next_sequence_ = sequence;
  turn_taken_ = false;
  // Numbers abandoned before their turn pass it on at once.
  while (!abandoned_.empty() && abandoned_.begin()->first <= next_sequence_) {
    auto first = abandoned_.begin();
    if (first->first == next_sequence_) {
      RecordFailedTurn(first->first, first->second);
      ++next_sequence_;
    }
    abandoned_.erase(first);
  }
  // Early releases of outputs of numbers passed are done with.
  if (!released_early_.empty()) {
    absl::erase_if(released_early_, [&](const std::string& handle) {
      const std::optional<uint64_t> of = protocol::SequenceOf(handle);
      return !of.has_value() || *of < next_sequence_;
    });
  }
  turn_cv_.SignalAll();
}

absl::Status Session::AwaitTurn(uint64_t sequence, const runtime::CancelCheck& cancelled,
                                absl::Duration patience) {
  if (sequence == 0 || sequence > kMaxSequence) {
    return absl::InvalidArgumentError(
        absl::StrCat("execution number ", sequence, " is outside 1..", kMaxSequence));
  }
  absl::MutexLock lock(&mu_);
  waiting_.insert(sequence);
  absl::Cleanup done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    waiting_.erase(waiting_.find(sequence));
  };
  // The numbers before the smallest waiting one have been missing since
  // `missing_since` (reset whenever a turn passes on).
  uint64_t seen_next = next_sequence_;
  absl::Time missing_since = absl::Now();
  while (true) {
    if (sequence < next_sequence_ || (sequence == next_sequence_ && turn_taken_) ||
        abandoned_.contains(sequence)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "execution number ", sequence, " was sent before or passed over (session ", id_,
          " is at number ", next_sequence_, ")"));
    }
    if (sequence == next_sequence_) {
      turn_taken_ = true;
      return absl::OkStatus();
    }
    if (closed_ || (cancelled && cancelled())) {
      return absl::CancelledError(absl::StrCat("stopped waiting for execution ", next_sequence_,
                                               ", which comes before this one (", sequence, ")"));
    }
    if (next_sequence_ != seen_next) {
      seen_next = next_sequence_;
      missing_since = absl::Now();
    }
    if (!turn_taken_ && *waiting_.begin() == sequence && absl::Now() - missing_since >= patience) {
      // The executions numbered before this one, the smallest waiting,
      // never came (their calls were lost): pass them over, so that the
      // session goes on.
      const absl::Status missing = absl::DeadlineExceededError(absl::StrCat(
          "it did not arrive within ", absl::FormatDuration(patience),
          " of the executions numbered after it"));
      for (uint64_t n = std::max(next_sequence_, sequence - std::min<uint64_t>(sequence, kFailedTurnsKept));
           n < sequence; ++n) {
        RecordFailedTurn(n, missing);
      }
      logging::Warn("session {}: executions {} to {} never arrived; running {}", id_, next_sequence_,
                    sequence - 1, sequence);
      PassTurnTo(sequence);
      turn_taken_ = true;
      return absl::OkStatus();
    }
    turn_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
}

void Session::Abandon(uint64_t sequence, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (sequence == 0 || sequence > kMaxSequence || sequence < next_sequence_) return;
  if (sequence == next_sequence_) {
    if (turn_taken_) return;  // another execution of that number holds it
    RecordFailedTurn(sequence, why);
    PassTurnTo(sequence + 1);
    return;
  }
  if (abandoned_.size() < kFailedTurnsKept) abandoned_.emplace(sequence, why);
}

void Session::Drop(const std::vector<std::string>& handles) {
  // One at a time: a handle that is unknown leaves the others to go.
  for (const std::string& handle : handles) Release({handle}, {}).IgnoreError();
}

std::vector<std::string> Session::StartSequenced(uint64_t sequence, int outputs,
                                                 runtime::Device* device) {
  std::vector<std::string> handles;
  absl::MutexLock lock(&mu_);
  for (int k = 0; k < outputs; ++k) {
    std::string handle = protocol::SequencedHandle(sequence, k);
    // Released before it was made: never made.
    if (!released_early_.erase(handle)) {
      buffers_[handle] = BufferEntry{nullptr, device, std::make_shared<PendingOutput>()};
    }
    handles.push_back(std::move(handle));
  }
  if (sequence == next_sequence_ && turn_taken_) PassTurnTo(sequence + 1);
  return handles;
}

void Session::SkipTurn(uint64_t sequence, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (sequence != next_sequence_ || !turn_taken_) return;
  RecordFailedTurn(sequence, why);
  PassTurnTo(sequence + 1);
}

void Session::Resolve(const std::string& handle, runtime::BufferPtr buffer) {
  std::shared_ptr<PendingOutput> pending;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(handle);
    if (it == buffers_.end() || it->second.pending == nullptr) return;  // released
    pending = std::move(it->second.pending);
    it->second.buffer = buffer;
  }
  Settle(*pending, std::move(buffer));
}

void Session::FailPending(const std::vector<std::string>& handles, const absl::Status& error) {
  std::vector<std::shared_ptr<PendingOutput>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& handle : handles) {
      auto it = buffers_.find(handle);
      // The entry stays, valueless, until released: its uses report why.
      if (it != buffers_.end() && it->second.pending != nullptr) failed.push_back(it->second.pending);
    }
  }
  for (const auto& pending : failed) Settle(*pending, error);
}

std::string Session::AddExecutable(ExecutableEntry entry) {
  std::string handle = NewHandle("e-");
  absl::MutexLock lock(&mu_);
  executables_[handle] = std::move(entry);
  return handle;
}

absl::StatusOr<ExecutableEntry> Session::GetExecutable(absl::string_view handle) const {
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
    std::vector<const std::string*> early;  // outputs of executions not started yet
    for (const std::string& h : buffers) {
      if (buffers_.contains(h)) continue;
      // An output of a sequenced execution that is gone is no error: its
      // execution failed before it started, or was passed over, or the
      // handle was released before. One not started yet is remembered.
      const std::optional<uint64_t> sequence = protocol::SequenceOf(h);
      if (sequence.has_value() && *sequence < next_sequence_) continue;
      if (sequence.has_value() && released_early_.size() + early.size() < kMaxEarlyReleases) {
        early.push_back(&h);
        continue;
      }
      return absl::NotFoundError(absl::StrCat("unknown buffer handle '", h, "'"));
    }
    for (const std::string& h : executables) {
      if (!executables_.contains(h)) {
        return absl::NotFoundError(absl::StrCat("unknown executable handle '", h, "'"));
      }
    }
    for (const std::string* h : early) released_early_.insert(*h);
    for (const std::string& h : buffers) {
      auto it = buffers_.find(h);
      if (it == buffers_.end()) continue;  // listed twice, or released early
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
  // Whoever waits for a pending one learns that it is gone.
  for (const BufferEntry& entry : dropped_buffers) {
    if (entry.pending != nullptr) {
      Settle(*entry.pending, absl::NotFoundError("it was released before its execution ended"));
    }
  }
  return static_cast<int>(dropped_buffers.size() + dropped_executables.size());
}

absl::StatusOr<std::vector<BufferEntry>> Session::TakeBuffers(
    const std::vector<std::string>& handles) {
  absl::MutexLock lock(&mu_);
  for (const std::string& h : handles) {
    auto it = buffers_.find(h);
    if (it == buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown buffer handle '", h, "'"));
    }
    if (it->second.pending != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("buffer ", h, " is the output of an execution that has not ended well"));
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
  for (const auto& [handle, entry] : buffers) {
    if (entry.pending != nullptr) Settle(*entry.pending, absl::CancelledError("the session ended"));
  }
  turn_cv_.SignalAll();
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

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Get(absl::string_view id, bool renew) {
  if (!renew) return Find(id, nullptr);
  const absl::Time now = absl::Now();
  return Find(id, &now);
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::GetAt(absl::string_view id,
                                                               absl::Time now) {
  return Find(id, &now);
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Find(absl::string_view id,
                                                              const absl::Time* renewed_at) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown or expired session '", id, "'"));
  }
  if (renewed_at != nullptr) it->second.deadline = *renewed_at + lease_;
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

runtime::CancelCheck UntilSessionEnds(const std::shared_ptr<Session>& session,
                                      const runtime::CancelCheck& cancelled) {
  return [session, cancelled]() { return session->closed() || (cancelled && cancelled()); };
}

}  // namespace kiln::server
