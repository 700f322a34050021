// Sessions: every handle belongs to the session that made it. A session
// lives while its client keeps its lease; when the lease runs out, the
// session and everything it holds are dropped.
#ifndef KILN_SERVER_SESSION_H_
#define KILN_SERVER_SESSION_H_

#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/cancel_check.h"
#include "runtime/device.h"
#include "runtime/host_group.h"
#include "runtime/memory.h"

namespace kiln::server {

// A compiled program as a session sees it.
struct ExecutableEntry {
  std::shared_ptr<runtime::Executable> executable;
  runtime::Device* device;  // borrowed from the service
  // Shared, so that an entry is copied without copying it.
  std::shared_ptr<const std::string> fingerprint;
};

struct PendingOutput;

struct BufferEntry {
  runtime::BufferPtr buffer;
  runtime::Device* device;  // borrowed from the service
  // Set while the buffer is an output of a sequenced execution that has not
  // finished (then `buffer` is null): GetBuffer waits for it.
  std::shared_ptr<PendingOutput> pending;
};

// An output of a sequenced execution (ExecuteRequest.sequence) before the
// execution ends: its handle is known from the start, so that the
// executions sent after it may name it as an argument while it runs.
struct PendingOutput {
  absl::Mutex mu;
  absl::CondVar done_cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  // The value, or why there is none (the execution failed, the session
  // ended).
  absl::StatusOr<runtime::BufferPtr> value ABSL_GUARDED_BY(mu) =
      absl::UnavailableError("not computed yet");
};

// The infeed and outfeed of one device as one session sees them: sessions
// sharing a device never see each other's values.
// Values waiting in them are charged to `account` (the session's host
// memory).
// A group of servers this session's client formed (runtime/host_group.h).
struct GroupEntry {
  std::unique_ptr<runtime::HostGroup> group;
  // One execution at a time: every member must run the group's rounds in
  // the same order.
  absl::Mutex run_mu;
  int64_t executions ABSL_GUARDED_BY(run_mu) = 0;
};

struct FeedQueues {
  FeedQueues(size_t capacity, const std::shared_ptr<runtime::MemoryAccount>& account)
      : infeed(capacity, account), outfeed(capacity, account) {}
  runtime::FeedQueue infeed, outfeed;
};

// What one session may hold and do at once (kiln-server flags).
struct SessionLimits {
  // Bytes of device memory its buffers and its executions' temporaries may
  // hold, over all devices (--session_memory_bytes).
  int64_t memory_bytes = int64_t{1} << 62;
  // Bytes of host memory that is no buffer (values waiting in its feed
  // queues or being streamed in, replies on their way out, inline arguments
  // being decoded) it may hold (--session_host_memory_bytes).
  int64_t host_memory_bytes = int64_t{1} << 62;
  // The same for all sessions together (--host_memory_bytes).
  int64_t all_sessions_host_memory_bytes = int64_t{1} << 62;
  // Executions running or waiting at once (--session_executions).
  int executions = 64;
};

// 128 random bits as hex with a prefix: handles cannot be guessed.
std::string NewHandle(absl::string_view prefix);

// Thread-safe.
class Session {
 public:
  // Feed queues hold at most `feed_capacity` values each. `host_budget`
  // (may be null) is the account of all sessions' host memory, charged with
  // this one's.
  Session(std::string id, std::string client_name, size_t feed_capacity = 16,
          const SessionLimits& limits = {},
          std::shared_ptr<runtime::MemoryAccount> host_budget = nullptr);

  const std::string& id() const { return id_; }
  const std::string& client_name() const { return client_name_; }

  std::string AddBuffer(BufferEntry entry);
  // NOT_FOUND naming the handle (also for other sessions' handles). An
  // output of a sequenced execution still running is waited for, until
  // `cancelled` (may be empty) says stop or the session ends; its
  // execution's error if that failed.
  // `before`: the number of the sequenced execution asking (0: none); an
  // output of that execution or a later one is INVALID_ARGUMENT (it could
  // only wait for itself).
  absl::StatusOr<BufferEntry> GetBuffer(const std::string& handle,
                                        const runtime::CancelCheck& cancelled = {},
                                        uint64_t before = 0) const;

  // Sequenced executions (protocol 6): a client numbers the executions it
  // sends without waiting for their replies 1, 2, 3, ... and the session
  // starts them in that order, each once the one before has registered its
  // outputs, under handles known in advance (protocol::SequencedHandle).
  // So an execution may name the outputs of the one before it, still
  // running.
  //
  // Waits until it is execution `sequence`'s turn. INVALID_ARGUMENT past
  // kMaxSequence; FAILED_PRECONDITION if that number was used or passed
  // over; CANCELLED if `cancelled` says stop or the session ends. When the
  // numbers before the smallest one waiting have been missing for
  // `patience`, they are passed over (their outputs will never exist).
  // After OK the caller must pass the turn on: StartSequenced or SkipTurn;
  // after an error, or when the execution fails before it waits, Abandon.
  static constexpr uint64_t kMaxSequence = uint64_t{1} << 62;
  absl::Status AwaitTurn(uint64_t sequence, const runtime::CancelCheck& cancelled,
                         absl::Duration patience);
  // Execution `sequence` failed before its turn with `why`: its turn passes
  // on as soon as it comes (at once if it is now). Numbers used or passed
  // over already are ignored.
  void Abandon(uint64_t sequence, const absl::Status& why);
  // Removes whichever of `handles` exist (the donated arguments of an
  // execution that failed before it took them: the caller gave them up);
  // an output of a sequenced execution not started yet is never kept.
  void Drop(const std::vector<std::string>& handles);
  // Registers `outputs` pending outputs of execution `sequence` on `device`
  // and passes the turn on; returns their handles. A handle released
  // before it was registered is not registered.
  std::vector<std::string> StartSequenced(uint64_t sequence, int outputs, runtime::Device* device);
  // Passes the turn on without registering outputs: the execution failed
  // first, with `why` (which later uses of its outputs' handles report).
  void SkipTurn(uint64_t sequence, const absl::Status& why);
  // Gives a pending output its value; a handle released meanwhile drops it.
  void Resolve(const std::string& handle, runtime::BufferPtr buffer);
  // Gives the outputs still pending among `handles` their execution's
  // error, which their later uses report.
  void FailPending(const std::vector<std::string>& handles, const absl::Status& error);
  std::string AddExecutable(ExecutableEntry entry);
  absl::StatusOr<ExecutableEntry> GetExecutable(absl::string_view handle) const;
  // Releases all the given handles, or none if any is unknown (NOT_FOUND).
  absl::StatusOr<int> Release(const std::vector<std::string>& buffers,
                              const std::vector<std::string>& executables);
  // Removes and returns buffers (donation); all or none. A buffer still
  // pending is FAILED_PRECONDITION (GetBuffer it first).
  absl::StatusOr<std::vector<BufferEntry>> TakeBuffers(
      const std::vector<std::string>& handles);
  // This session's queues on `device` (made on first use).
  std::shared_ptr<FeedQueues> Feeds(const std::string& device);
  // Aborts every queue of the session: waiters wake with CANCELLED and
  // queued values are dropped.
  void AbortFeeds();
  // Ends the session: marks it closed (running programs stop), aborts its
  // queues and drops its handles.
  void Clear();
  // Groups of servers (JoinGroup). ReserveGroup holds a place for a group
  // being formed: ALREADY_EXISTS for a known or reserved id,
  // RESOURCE_EXHAUSTED past kMaxGroups (formed and reserved together).
  // AddGroup fills the place; Unreserve gives it up.
  static constexpr int kMaxGroups = 16;
  absl::Status ReserveGroup(const std::string& id);
  void Unreserve(const std::string& id);
  absl::Status AddGroup(const std::string& id, std::shared_ptr<GroupEntry> group);
  // NOT_FOUND naming the id.
  absl::StatusOr<std::shared_ptr<GroupEntry>> GetGroup(const std::string& id) const;
  absl::Status RemoveGroup(const std::string& id);
  bool closed() const { return closed_.load(); }
  int64_t buffer_count() const;

  // Charged for every buffer allocated on the session's behalf (current
  // on the threads that serve its calls, see runtime::AccountScope).
  const std::shared_ptr<runtime::MemoryAccount>& memory_account() const { return account_; }
  // Charged for the host memory held on the session's behalf that is no
  // buffer (runtime::MemoryCharge): feed values, replies, decoded inline
  // arguments.
  const std::shared_ptr<runtime::MemoryAccount>& host_account() const { return host_account_; }
  // Counts an execution as running until the returned token is destroyed;
  // RESOURCE_EXHAUSTED naming --session_executions when that many run.
  class Running {
   public:
    Running() = default;
    Running(Running&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
    Running& operator=(Running&& other) noexcept {
      if (this != &other) {
        End();
        count_ = std::exchange(other.count_, nullptr);
      }
      return *this;
    }
    ~Running() { End(); }

   private:
    friend class Session;
    explicit Running(std::atomic<int>* count) : count_(count) {}
    void End() {
      if (count_ != nullptr) --*count_;
      count_ = nullptr;
    }
    std::atomic<int>* count_ = nullptr;
  };
  absl::StatusOr<Running> BeginExecution();

 private:
  const std::string id_;
  const std::string client_name_;
  const size_t feed_capacity_;
  const int max_executions_;
  const std::shared_ptr<runtime::MemoryAccount> account_;
  const std::shared_ptr<runtime::MemoryAccount> host_account_;
  std::atomic<int> executions_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, BufferEntry> buffers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ExecutableEntry> executables_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<FeedQueues>> feeds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<GroupEntry>> groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> reserved_groups_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> closed_{false};
  // Sequenced executions: the number whose turn it is, what woke waiters,
  // handles released before their execution registered them (at most
  // kMaxEarlyReleases), and the errors of recent executions that passed
  // their turn on without outputs (at most kFailedTurnsKept, by number).
  static constexpr size_t kMaxEarlyReleases = 4096;
  static constexpr size_t kFailedTurnsKept = 64;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // An execution holds its turn (between AwaitTurn and passing it on).
  bool turn_taken_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::CondVar turn_cv_;
  absl::flat_hash_set<std::string> released_early_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Status> failed_turns_ ABSL_GUARDED_BY(mu_);
  // Numbers waiting in AwaitTurn, and numbers abandoned before their turn
  // (at most kFailedTurnsKept) with their errors.
  std::multiset<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Status> abandoned_ ABSL_GUARDED_BY(mu_);
  // Makes `sequence` the next number (a turn passed on): records `why` for
  // the one it ends, passes abandoned numbers on, forgets early releases of
  // numbers passed, and wakes the waiters' condition.
  void PassTurnTo(uint64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordFailedTurn(uint64_t sequence, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// A client's self-chosen name as sessions keep and log it: C-escaped (no
// newlines or control characters) and at most 128 bytes of the original.
std::string SafeClientName(absl::string_view name);

// Owns the sessions and their leases; a background thread drops sessions
// whose lease ran out. Thread-safe.
class SessionManager {
 public:
  explicit SessionManager(absl::Duration lease, size_t feed_capacity = 16,
                          const SessionLimits& limits = {});
  ~SessionManager();

  std::shared_ptr<Session> Create(const std::string& client_name);
  // Looks up a session and renews its lease (unless `renew` is false: a
  // feed token's holder is not the session's client and must not keep it
  // alive). NOT_FOUND for unknown or expired sessions.
  absl::StatusOr<std::shared_ptr<Session>> Get(absl::string_view id, bool renew = true);
  // The same, the lease renewed from `now` (a time the caller read anyway).
  absl::StatusOr<std::shared_ptr<Session>> GetAt(absl::string_view id, absl::Time now);
  absl::Status Close(const std::string& id);
  // Whether the session exists (does not renew its lease).
  bool Alive(const std::string& id) const;
  absl::Duration lease() const { return lease_; }
  size_t size() const;
  // Host memory held by all sessions (see Session::host_account).
  const runtime::MemoryAccount& host_memory() const { return *host_budget_; }
  // Drops expired sessions now; returns how many (the reaper calls this).
  int ReapExpired();

 private:
  // Get and GetAt: the lease renewed from `renewed_at` unless it is null.
  absl::StatusOr<std::shared_ptr<Session>> Find(absl::string_view id,
                                                const absl::Time* renewed_at);
  struct Entry {
    std::shared_ptr<Session> session;
    absl::Time deadline;
  };
  const absl::Duration lease_;
  const size_t feed_capacity_;
  const SessionLimits limits_;
  const std::shared_ptr<runtime::MemoryAccount> host_budget_;
  // Sessions closed or expired so far (the reaper trims the heap after).
  std::atomic<uint64_t> ended_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

// Polled by a session's long waits: true once the session has ended or
// the caller gave up (`cancelled`, may be empty).
runtime::CancelCheck UntilSessionEnds(const std::shared_ptr<Session>& session,
                                      const runtime::CancelCheck& cancelled);

}  // namespace kiln::server

#endif  // KILN_SERVER_SESSION_H_
