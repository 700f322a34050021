// The device service: sessions, transfers, compile cache, execution, memory
// info and metrics. A plain class with no gRPC types, so the gRPC layer
// (grpc_service.h) and the client's embedded mode both call it.
#ifndef KILN_SERVER_SERVICE_H_
#define KILN_SERVER_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kiln/v1/service.pb.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "server/compile_cache.h"
#include "server/metrics.h"
#include "server/persistent_cache.h"
#include "server/trace_writer.h"
#include "server/module_limits.h"
#include "server/session.h"

namespace kiln::server {

// Protocol versions this server speaks (docs/protocol.md has the changelog).
inline constexpr uint32_t kMinProtocolVersion = 1;
inline constexpr uint32_t kMaxProtocolVersion = 6;



// Groups of servers: members per group, replicas per member, the longest
// timeout a client may ask for, and the groups whose store one server keeps.
inline constexpr int kMaxGroupMembers = 256;
inline constexpr int kMaxReplicasPerMember = 4096;
inline constexpr absl::Duration kMaxGroupTimeout = absl::Minutes(10);
inline constexpr int kMaxHostedGroups = 64;
// Groups being formed at once on one server (each holds a call and its
// connections while it waits for the other members).
inline constexpr int kMaxJoinsInFlight = 32;

struct ServiceOptions {
  absl::Duration lease = absl::Seconds(60);
  size_t compile_cache_entries = 256;
  // Bytes the cache keeps (canonical modules and their executables'
  // constants).
  int64_t compile_cache_bytes = int64_t{1} << 30;
  // The devices: one backend per spec (runtime/backend.h), in order.
  std::vector<runtime::BackendSpec> backends = {{"cpu", 1, {}}};
  // Default for ExecuteRequest.infeed_timeout_millis <= 0.
  absl::Duration infeed_timeout = absl::Seconds(30);
  // How long a sequenced execution (protocol 6) waits for the executions
  // numbered before it to arrive before it passes them over.
  absl::Duration sequence_patience = absl::Seconds(10);
  int64_t transfer_chunk_bytes = int64_t{1} << 20;
  // Values each session's infeed and outfeed queue hold per device.
  size_t feed_queue_capacity = 16;
  // How long a replica waits for the others at an all-reduce.
  absl::Duration collective_timeout = absl::Seconds(60);
  // What each session may hold and run at once.
  SessionLimits session_limits;
  // What a module may be.
  ModuleLimits module_limits;
  // When set, each module compiled for the first time is written here as
  // HLO text, named by its fingerprint (for reading and for `kiln run`).
  std::string dump_dir;
  // When set, compiled programs are also kept in this directory across
  // restarts (server/persistent_cache.h), bounded by compile_cache_dir_bytes.
  std::string compile_cache_dir;
  int64_t compile_cache_dir_bytes = int64_t{4} << 30;
  // Borrowed, must outlive the service; null: no trace (--trace_file).
  TraceWriter* trace = nullptr;
  // Groups of servers (JoinGroup): the host or IP this server's Gloo
  // transport binds to, which the other members must reach
  // (--group_host).
  std::string group_bind_host = "127.0.0.1";
  // The hosts (names or IPs, as members' addresses give them) that a
  // group's members may be on (--group_peers; "*": any). This server
  // calls and connects to the members a client names: the list keeps it
  // from reaching anything else. Empty: any when `group_peers_required` is
  // false (a server on loopback), no group at all otherwise.
  std::vector<std::string> group_peers;
  bool group_peers_required = false;
  // Reaches the store that a group's member 0 at `address` keeps, retrying
  // for up to `timeout` while it is not there yet; set by the gRPC layer.
  // Null: this server can only be a group's member 0.
  // `authorization` is what the joining call carried (its bearer token),
  // shown to member 0 in turn.
  std::function<std::shared_ptr<runtime::GroupStore>(
      const std::string& address, const std::string& group_id, const std::string& secret,
      absl::Duration timeout, const std::string& authorization)>
      remote_group_store;
  // OK when the server at `address` answers within `timeout`; after an
  // exchange between servers failed, it tells which member is gone. Null:
  // nobody is probed.
  std::function<absl::Status(const std::string& address, absl::Duration timeout)> probe_member;
};

// A simulated chip's profile of one execution, as the protocol says it.
void ProfileToProto(const runtime::ExecutionProfile& profile, v1::ExecutionProfileProto* out);

// Thread-safe: every method may be called from many threads at once.
class Service {
 public:
  static absl::StatusOr<std::unique_ptr<Service>> Create(const ServiceOptions& options);

  absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& request);
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest& request);
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(
      const v1::CloseSessionRequest& request);

  // Reads the next piece of a host-to-device transfer into `data`; returns
  // false once the stream has ended.
  using ChunkReader = std::function<absl::StatusOr<bool>(std::string* data)>;
  // `first_data` are the bytes that came with the header. The declared size
  // is checked against the shape and the device memory before any data is
  // read, and against what actually arrives.
  absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(
      const v1::TransferHeader& header, const std::string& first_data,
      const ChunkReader& next);
  // Sends chunks through `write`; it returns false when the peer is gone.
  using ChunkWriter = std::function<bool(const v1::TransferFromDeviceChunk&)>;
  // An output of a sequenced execution still running is waited for, until
  // `cancelled` (may be null) says stop or the session ends.
  absl::Status TransferFromDevice(const v1::TransferFromDeviceRequest& request,
                                  const ChunkWriter& write,
                                  const runtime::CancelCheck& cancelled = nullptr);

  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& request);
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& request);
  // `cancelled` is polled while the program runs (loop iterations, queue
  // waits): once it returns true, the program stops with CANCELLED and the
  // session's queues on that device are aborted. With `replicas`, runs the
  // program on each replica's device at once; a replica that fails stops
  // the others. On tpu devices the reply carries the simulated profile.
  // Inline results are host memory of the session until the reply is sent:
  // `reply_charge`, when given, takes their charge (the caller keeps it
  // until the reply is gone); a result that would pass the session's host
  // quota is not inlined (its handle still is in the reply). A sequenced
  // execution (request.sequence, protocol 6) starts in its session's order
  // and names its outputs in advance (Session::StartSequenced).
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& request,
                                              const runtime::CancelCheck& cancelled = nullptr,
                                              runtime::MemoryCharge* reply_charge = nullptr);
  // An execution for a caller in this process (embedded/embedded.h): one
  // program on its device, with no messages. Each argument is a buffer
  // given as such (with its device), a handle of the session, or a value
  // to place on the device; the outputs come back as buffers, with no
  // handles (AdoptBuffer makes one where a buffer must cross a message).
  // The same checks as Execute; the donated arguments are given up
  // whatever happens (a donated buffer given as such is moved in).
  struct DirectArgument {
    runtime::BufferPtr buffer;
    runtime::Device* device = nullptr;  // where `buffer` lives
    absl::string_view handle;
    const ir::Literal* value = nullptr;  // borrowed
    // Set when the caller could not give this argument: the execution
    // fails with it (giving the donated arguments up, as any failure does).
    absl::Status refused;
  };
  // An eager op's few arguments and outputs need no allocation.
  using DirectArguments = absl::InlinedVector<DirectArgument, 4>;
  struct DirectExecution {
    absl::string_view session_id;  // borrowed, as the handles are
    absl::string_view executable_handle;
    DirectArguments arguments;
    std::vector<int> donated;
    absl::Duration infeed_timeout = absl::ZeroDuration();  // 0: the default
    runtime::CancelCheck cancelled;
  };
  struct DirectResult {
    runtime::Device* device = nullptr;  // where the outputs live
    absl::InlinedVector<runtime::BufferPtr, 2> outputs;  // the result's arrays, depth-first
    // By argument index: the buffer a value became (null for the others,
    // and for donated values); empty when no value was given.
    std::vector<runtime::BufferPtr> argument_buffers;
    std::optional<runtime::ExecutionProfile> profile;  // devices with a cost model
    int64_t execute_micros = 0;
  };
  absl::StatusOr<DirectResult> ExecuteDirect(DirectExecution execution);
  // The value of a buffer of `device` an in-process caller holds, read as
  // TransferFromDevice reads one (metrics and trace; the session's lease
  // renewed if it is still open: the caller holds the buffer either way).
  absl::StatusOr<ir::Literal> ReadDirect(absl::string_view session_id,
                                         const runtime::Buffer& buffer, runtime::Device& device);
  // Registers a buffer of `device` with the session: its new handle.
  absl::StatusOr<std::string> AdoptBuffer(const std::string& session_id,
                                          runtime::BufferPtr buffer, runtime::Device* device);
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& request);
  v1::MetricsResponse GetMetrics();
  // Groups of servers (protocol version 5). JoinGroup blocks until every
  // member joined or the group's timeout passed.
  // `authorization` (the call's bearer token, if any) goes with this
  // member's calls to member 0's store.
  // `cancelled` (may be null) stops the wait when the call goes away.
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest& request,
                                                  const std::string& authorization = "",
                                                  const runtime::CancelCheck& cancelled = nullptr);
  absl::StatusOr<v1::LeaveGroupResponse> LeaveGroup(const v1::LeaveGroupRequest& request);
  // Called by the other members of a group this server is member 0 of;
  // authorized by the group's secret (and by the joining client's token,
  // which the gRPC layer checks), not by a session.
  absl::StatusOr<v1::GroupStoreResponse> GroupStore(const v1::GroupStoreRequest& request);
  // Whether the session is open (its lease has not run out).
  bool SessionAlive(const std::string& session_id) const;
  // The same figures in Prometheus' text format (server/prometheus.h).
  std::string PrometheusMetrics();

  // Feeds: a token lets another process use this session's queues on one
  // device.
  absl::StatusOr<v1::CreateFeedTokenResponse> CreateFeedToken(
      const v1::CreateFeedTokenRequest& request);
  struct FeedEndpoint {
    std::shared_ptr<Session> session;
    std::shared_ptr<FeedQueues> queues;
    runtime::Device* device = nullptr;
    // The largest value a peer may send (the device's memory).
    int64_t max_value_bytes = 0;
    // The queues' failure counts when the feed opened: a program that fails
    // later ends this feed's waits with its error (FeedQueue::Fail).
    uint64_t infeed_since = 0;
    uint64_t outfeed_since = 0;
  };
  // PERMISSION_DENIED without a session id or with a token this server did
  // not issue (or whose session has ended).
  absl::StatusOr<FeedEndpoint> OpenFeed(const v1::FeedTarget& target);
  // Queues one value, waiting while the queue is full until `cancelled`
  // or the session ends. The value is charged to the session's host memory
  // while it waits (`charge`: what the caller charged for it already, on
  // the session's host account); RESOURCE_EXHAUSTED past the quota.
  absl::Status Infeed(const FeedEndpoint& feed, ir::Literal value,
                      const runtime::CancelCheck& cancelled, runtime::MemoryCharge charge = {});
  // The next outfeed value; waits at most `timeout`. `charge`, when given,
  // takes over the value's charge to the session (held while it is sent).
  absl::StatusOr<ir::Literal> Outfeed(const FeedEndpoint& feed, absl::Duration timeout,
                                      const runtime::CancelCheck& cancelled,
                                      runtime::MemoryCharge* charge = nullptr);

  // Every device of every backend, in the order of the specs; borrowed.
  const std::vector<runtime::Device*>& devices() const { return devices_; }
  const std::vector<std::unique_ptr<runtime::Backend>>& backends() const { return backends_; }
  SessionManager& sessions() { return *sessions_; }
  Metrics& metrics() { return metrics_; }

 private:
  explicit Service(const ServiceOptions& options);
  void DumpModule(const ir::Module& module, const std::string& fingerprint) const;
  absl::StatusOr<runtime::Device*> FindDevice(const std::string& name) const;
  // The backend that owns `device`.
  runtime::Backend& BackendOf(const runtime::Device* device) const;
  void RefreshGauges();
  void RecordProfile(const runtime::ExecutionProfile& profile);
  // Compiles through the persistent cache when there is one: loads a kept
  // program, or compiles and keeps it. Sets `*loaded` on a load.
  absl::StatusOr<std::shared_ptr<runtime::Executable>> CompileOrLoad(
      runtime::Backend& backend, const ir::Module& module, const std::string& fingerprint,
      const runtime::CompileOptions& options, bool* loaded);

  const ServiceOptions options_;
  std::vector<std::unique_ptr<runtime::Backend>> backends_;
  std::vector<runtime::Device*> devices_;
  absl::flat_hash_map<const runtime::Device*, runtime::Backend*> backend_of_;
  std::unique_ptr<SessionManager> sessions_;
  CompileCache cache_;
  std::unique_ptr<PersistentCache> persistent_;  // null without compile_cache_dir
  Metrics metrics_;
  struct FeedGrant {
    std::string session_id;
    std::string device;
  };
  // After an exchange between servers failed: which members do not
  // answer, for the error.
  std::string MissingMembers(const GroupEntry& group, const v1::ExecuteRequest& req) const;
  // The outputs of a sequenced execution, registered once its program is
  // known.
  struct SequencedOutputs {
    uint64_t sequence = 0;
    bool started = false;  // the turn passed on with `handles` registered
    std::vector<std::string> handles;
  };
  // Execute after the session's lookup: counts the execution and, for a
  // sequenced one, takes its turn and passes it on.
  absl::StatusOr<v1::ExecuteResponse> ExecuteCounted(const std::shared_ptr<Session>& session,
                                                     const v1::ExecuteRequest& req,
                                                     const runtime::CancelCheck& cancelled,
                                                     runtime::MemoryCharge* reply_charge);
  // Execute within `session`; `sequenced` (null for an unsequenced one)
  // holds its turn.
  absl::StatusOr<v1::ExecuteResponse> ExecuteIn(const std::shared_ptr<Session>& session,
                                                const v1::ExecuteRequest& req,
                                                const runtime::CancelCheck& cancelled,
                                                runtime::MemoryCharge* reply_charge,
                                                SequencedOutputs* sequenced);
  absl::StatusOr<DirectResult> ExecuteDirectIn(const std::shared_ptr<Session>& session,
                                               DirectExecution& execution, absl::Time start);
  // A transfer of `bytes` from `device` since `start` ended: counted in the
  // metrics and the trace (TransferFromDevice and ReadDirect).
  void TransferredFromDevice(absl::Time start, const runtime::Device& device, int64_t bytes);
  // A program that ran `replicas` replicas since `start` ended: its time,
  // recorded in the metrics and the trace.
  absl::Duration ExecutionDone(absl::Time start, const ExecutableEntry& exe, size_t replicas);
  // A failed program's error, after its feeds learned of it: a cancelled
  // one's queues are aborted; one that used feeds fails their waiters.
  // `feeds` are null for a program without feed ops, which has none.
  absl::Status ExecutionFailed(const absl::Status& error, const ExecutableEntry& exe,
                               const std::shared_ptr<Session>& session,
                               const std::vector<std::shared_ptr<FeedQueues>>& feeds,
                               const runtime::CancelCheck& until_done);
  // The stores of the groups this server is member 0 of.
  struct HostedStore {
    std::string secret;
    std::string session_id;
    std::shared_ptr<runtime::LocalGroupStore> store;
  };
  std::atomic<int> joins_in_flight_{0};
  absl::Mutex group_stores_mu_;
  absl::flat_hash_map<std::string, HostedStore> group_stores_ ABSL_GUARDED_BY(group_stores_mu_);
  absl::Mutex feed_tokens_mu_;
  absl::flat_hash_map<std::string, FeedGrant> feed_tokens_ ABSL_GUARDED_BY(feed_tokens_mu_);
};

}  // namespace kiln::server

#endif  // KILN_SERVER_SERVICE_H_
