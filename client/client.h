// The Kiln client: connects to a device server (or runs one in-process),
// moves data, compiles and executes programs. Buffers and executables are
// handles that release themselves on the server when the last reference
// goes away; releases are batched on a background thread and never block
// the caller.
#ifndef KILN_CLIENT_CLIENT_H_
#define KILN_CLIENT_CLIENT_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/security.h"
#include "client/transport.h"
#include "compiler/ir/instruction.h"
#include "compiler/ir/literal.h"

namespace kiln::client {

// Protocol versions this client speaks.
inline constexpr uint32_t kClientMinVersion = 1;
inline constexpr uint32_t kClientMaxVersion = 6;

struct DeviceDescription {
  std::string name;  // "cpu:0"
  std::string kind;  // "cpu"
  int ordinal = 0;
  int64_t memory_capacity_bytes = 0;
  // Host threads it computes with (0: it computes elsewhere, or the server
  // does not say).
  int compute_threads = 0;
};

struct ConnectOptions {
  std::string client_name = "kiln-client";
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadlines per call kind (zero: none) and keep-alive pings; see
  // GrpcOptions in client/grpc_transport.h for what each covers.
  absl::Duration control_timeout = absl::Seconds(60);
  absl::Duration compile_timeout = absl::Minutes(30);
  absl::Duration execute_timeout = absl::ZeroDuration();
  absl::Duration keepalive_time = absl::Seconds(30);
  // How long a call waits for a broken connection to be made again (once
  // per outage: GrpcOptions::reconnect_timeout).
  absl::Duration reconnect_timeout = absl::Seconds(10);
  int64_t chunk_bytes = int64_t{1} << 20;
  // TLS and bearer token; empty fields come from KILN_* environment
  // variables (client/security.h).
  SecurityOptions security;
  // Test hook: no keep-alives and no session close, like a client that
  // vanished.
  bool keep_alive = true;
  // Several servers (ConnectMesh): how long forming a group of them and
  // each exchange between them may take.
  absl::Duration group_timeout = absl::Seconds(30);
};


class ClientCore;

// A buffer on a device. Thread-safe.
class DeviceBuffer {
 public:
  DeviceBuffer(std::shared_ptr<ClientCore> core, std::string handle, ir::Shape shape,
               std::string device);
  // A buffer held in this process (an in-process transport's DirectPath).
  DeviceBuffer(std::shared_ptr<ClientCore> core, std::shared_ptr<LocalBuffer> local,
               ir::Shape shape, std::string device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Its handle on the server. A buffer held in this process gets one the
  // first time it is asked for (empty if the session refused it, or once
  // it was donated before it had one).
  const std::string& handle() const;
  const ir::Shape& shape() const { return shape_; }
  const std::string& device() const { return device_; }
  // True once donated to an execution: the handle is gone on the server.
  bool donated() const { return donated_.load(); }
  // Also gives up the buffer held in this process, if any.
  void MarkDonated();
  // Held in this process: the buffer itself (null otherwise, and once
  // taken).
  std::shared_ptr<LocalBuffer> local() const;
  // Gives the buffer itself up (a donation): afterwards local() is null.
  std::shared_ptr<LocalBuffer> TakeLocal();
  // Whether it has a handle already (handle() would not make one).
  bool has_handle() const;

 private:
  std::shared_ptr<ClientCore> core_;
  mutable absl::Mutex mu_;
  mutable std::string handle_ ABSL_GUARDED_BY(mu_);
  // Set once handle() asked the server for one: handle_ never changes after.
  mutable bool adopted_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<LocalBuffer> local_ ABSL_GUARDED_BY(mu_);
  ir::Shape shape_;
  std::string device_;
  std::atomic<bool> donated_{false};
};

// A compiled program on a device. Thread-safe.
class Executable {
 public:
  Executable(std::shared_ptr<ClientCore> core, const v1::CompileResponse& response,
             std::string device);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  const std::string& handle() const { return handle_; }
  const std::string& device() const { return device_; }
  const std::string& fingerprint() const { return fingerprint_; }
  bool cache_hit() const { return cache_hit_; }
  // Loaded from the server's persistent compile cache: no compile ran.
  bool persistent_cache_hit() const { return persistent_cache_hit_; }
  int64_t compile_micros() const { return compile_micros_; }
  const std::vector<ir::Shape>& parameter_shapes() const { return parameter_shapes_; }
  const ir::Shape& result_shape() const { return result_shape_; }
  // One execution priced without running it, on a device with a cost model
  // (tpu); FAILED_PRECONDITION saying why the program cannot be priced
  // statically, UNIMPLEMENTED on devices without a cost model.
  absl::StatusOr<v1::ExecutionProfileProto> estimate() const { return estimate_; }

 private:
  std::shared_ptr<ClientCore> core_;
  std::string handle_, device_, fingerprint_;
  bool cache_hit_;
  bool persistent_cache_hit_ = false;
  int64_t compile_micros_;
  std::vector<ir::Shape> parameter_shapes_;
  ir::Shape result_shape_;
  absl::StatusOr<v1::ExecutionProfileProto> estimate_;
};

struct ExecuteOptions {
  // Outputs up to this size also come back in the reply (no extra round trip).
  int64_t inline_result_max_bytes = 0;
  // Arguments (by index) whose buffers the caller gives up.
  std::vector<int> donate;
  absl::Duration infeed_timeout = absl::ZeroDuration();  // 0: server default
  // Borrowed; Cancel() from another thread stops the program on the server.
  CallCanceller* cancel = nullptr;
  // Protocol 4: values sent with the call for the arguments whose buffer is
  // null, by index (null entries: the buffer is given). Borrowed.
  std::vector<const ir::Literal*> inline_values;
  // Protocol 5, ExecuteReplicated only: the execution spans the servers of
  // this group (JoinGroup), group_replicas[m] replicas on member m; this
  // server's replicas are numbered after those of the members before it.
  // client/mesh.h sets these.
  std::string group_id;
  std::vector<int> group_replicas;
};

// This server's place in a group of servers (protocol 5).
struct GroupMembership {
  std::string id;      // 1-128 of [A-Za-z0-9._-]
  std::string secret;  // 16-128 bytes, the same for every member
  int rank = 0;
  std::vector<std::string> members;  // every member's address, by rank
  // How long forming the group and each exchange between servers may take.
  absl::Duration timeout = absl::Seconds(30);
};

struct OutfeedOptions {
  int64_t max_values = 0;  // 0: until cancelled
  absl::Duration timeout = absl::InfiniteDuration();  // longest wait for one value
  std::string feed_token;  // empty: this client's own session
};

struct ExecuteResult {
  // The result, tuples flattened depth-first into arrays.
  std::vector<std::shared_ptr<DeviceBuffer>> outputs;
  // Values of the outputs that came back inline.
  std::vector<std::optional<ir::Literal>> inline_values;
  int64_t execute_micros = 0;
  // What the execution would cost on the simulated chip (tpu devices).
  std::optional<v1::ExecutionProfileProto> profile;
  // By argument index: the buffer an inline value became on the server
  // (null for arguments given as buffers, and for donated ones); empty
  // when no argument was sent as a value.
  std::vector<std::shared_ptr<DeviceBuffer>> inline_argument_buffers;
};

// One replica of a replicated execution: its device and arguments.
struct ReplicaArguments {
  std::string device;
  std::vector<std::shared_ptr<DeviceBuffer>> args;
};

struct ReplicatedResult {
  std::vector<ExecuteResult> replicas;  // in replica order
  int64_t execute_micros = 0;
  // The slowest replica's simulated cost (tpu devices).
  std::optional<v1::ExecutionProfileProto> profile;
};

// An execution sent with Client::ExecuteAsync. Thread-safe.
class PendingExecution {
 public:
  // Blocks until the reply is in and returns it; the result is handed out
  // once (later calls: FAILED_PRECONDITION).
  absl::StatusOr<ExecuteResult> Wait();
  bool done() const;
  // Seconds from sending to the reply (0 until done).
  double round_trip_seconds() const;
  // The outputs' buffers (tuples flattened), known at once where the server
  // numbers executions (protocol 6), handed out once (later calls, and
  // older servers: empty). They may be arguments of executions sent after
  // this one with ExecuteAsync before its reply is in (the server waits
  // for them), donated too: nothing else holds them. Other calls naming
  // them (Execute, transfers) belong after Wait(): sent earlier, they may
  // reach the server before this execution and find the handle unknown.
  // Wait() returns the same objects where they are still alive.
  std::vector<std::shared_ptr<DeviceBuffer>> TakeOutputs();

 private:
  friend class Client;
  friend class ClientCore;
  void Finish(absl::StatusOr<ExecuteResult> result, double seconds);

  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool taken_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<ExecuteResult> result_ ABSL_GUARDED_BY(mu_);
  double seconds_ ABSL_GUARDED_BY(mu_) = 0;
  // Stops the call when the client shuts down with it in flight.
  CallCanceller canceller_;
  // Set before it is sent; the outputs until TakeOutputs, and what Wait
  // hands out for them.
  std::vector<std::shared_ptr<DeviceBuffer>> outputs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<DeviceBuffer>> named_ ABSL_GUARDED_BY(mu_);
};

// Thread-safe.
class Client {
 public:
  // Connects to a kiln-server, retrying until `options.connect_timeout`.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         const ConnectOptions& options = {});
  // Connects to several kiln-servers and drives them as one
  // (client/mesh_transport.h): devices "host<i>/<device>", replicated
  // executions across servers as groups of them.
  static absl::StatusOr<std::unique_ptr<Client>> ConnectMesh(
      const std::vector<std::string>& addresses, const ConnectOptions& options = {});
  // (A service in this process, without sockets: embedded/embedded.h.)
  // Builds a client over any transport (tests, embedders).
  static absl::StatusOr<std::unique_ptr<Client>> Create(std::unique_ptr<Transport> transport,
                                                        const ConnectOptions& options);
  ~Client();

  const std::string& session_id() const;
  const std::vector<DeviceDescription>& devices() const { return devices_; }
  // The protocol version agreed with the server.
  uint32_t protocol_version() const { return protocol_version_; }
  // Non-empty when the server runs exposed without TLS or authentication
  // (kiln-server --insecure): show it to the user.
  const std::string& security_warning() const { return security_warning_; }
  // True when the server runs on this process's machine (the same kernel),
  // computes on `device` with a thread for each core it may use, and every
  // core this process may use is one of those: whatever this process
  // computes while a program runs there takes a core from that team. False
  // from an older server and over a mesh of servers (Client::ConnectMesh),
  // whose handshake names no host.
  bool ComputeFillsSharedCores(const std::string& device) const;
  // The first accelerator, else the first CPU.
  const DeviceDescription& default_device() const;
  // The service runs in this process (embedded.h): executions take the
  // direct path, and reading a buffer is a copy from the device.
  bool in_process() const;

  absl::StatusOr<std::shared_ptr<DeviceBuffer>> TransferToDevice(const ir::Literal& value,
                                                                 const std::string& device);
  absl::StatusOr<ir::Literal> TransferFromDevice(const DeviceBuffer& buffer);
  absl::StatusOr<std::shared_ptr<Executable>> Compile(const ir::Module& module,
                                                      const std::string& device,
                                                      uint64_t rng_seed = 0);
  // What one execution of `module` over `replicas` replicas would cost on
  // `device`, priced by its cost model without running it (a dry run: the
  // server compiles, nothing executes, no arguments are needed).
  absl::StatusOr<v1::ExecutionProfileProto> Estimate(const ir::Module& module,
                                                     const std::string& device,
                                                     int replicas = 1);
  absl::StatusOr<ExecuteResult> Execute(
      const Executable& executable, const std::vector<std::shared_ptr<DeviceBuffer>>& args,
      const ExecuteOptions& options = {});
  // Sends the execution and returns at once; the call runs on one of the
  // client's dispatch threads. Where the server numbers executions
  // (protocol 6), the server starts them in the order sent, several may be
  // on their way at once, and the outputs are known at once
  // (PendingExecution::outputs): the next execution may take them as
  // arguments before this one's reply is in. With an older server they run
  // one after another in the order sent (a later execution may read what
  // an earlier one returned once it has waited for it). The request is
  // built before this returns: inline values may
  // be released then; the executable and the arguments are held until the
  // call ends, and donated arguments are marked once it is sent.
  // `options.cancel` is not used (PendingExecution cancels on shutdown).
  // Destroying the client cancels executions still in flight; one never
  // sent keeps its arguments (none is donated).
  absl::StatusOr<std::shared_ptr<PendingExecution>> ExecuteAsync(
      std::shared_ptr<const Executable> executable,
      const std::vector<std::shared_ptr<DeviceBuffer>>& args, const ExecuteOptions& options = {});
  // Runs `executable` on every replica's device at once (protocol version
  // 3); replica i has replica-id i and all-reduce sums across them. The
  // devices must be of the kind the program was compiled for; `donate`
  // applies to every replica's arguments.
  absl::StatusOr<ReplicatedResult> ExecuteReplicated(const Executable& executable,
                                                     const std::vector<ReplicaArguments>& replicas,
                                                     const ExecuteOptions& options = {});
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const std::string& device);
  // Joins a group of servers; returns once every member joined (each is
  // asked at about the same time: client/mesh.h does it), or once `cancel`
  // (may be null) is cancelled.
  absl::Status JoinGroup(const GroupMembership& membership, CallCanceller* cancel = nullptr);
  absl::Status LeaveGroup(const std::string& group_id);

  // Feeds. Each session has an infeed and an outfeed queue per device. A
  // token lets a producer or consumer in another process (its own client)
  // reach this session's queues on `device`.
  absl::StatusOr<std::string> CreateFeedToken(const std::string& device);
  // Into this session's infeed on `device`, or with `feed_token` into the
  // infeed of the session that issued it.
  absl::StatusOr<std::unique_ptr<InfeedStream>> OpenInfeed(const std::string& device,
                                                           const std::string& feed_token = "");
  absl::StatusOr<std::unique_ptr<OutfeedStream>> OpenOutfeed(const std::string& device,
                                                             const OutfeedOptions& options = {});
  absl::StatusOr<v1::MetricsResponse> Metrics();
  // Returns once every release queued so far has reached the server.
  absl::Status FlushReleases();

 private:
  explicit Client(std::shared_ptr<ClientCore> core) : core_(std::move(core)) {}
  std::shared_ptr<ClientCore> core_;
  std::vector<DeviceDescription> devices_;
  uint32_t protocol_version_ = 0;
  std::string security_warning_;
  std::string host_id_;          // the server's kernel (HostId)
  std::vector<int> host_cpus_;   // the cores the server may run on
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_CLIENT_H_
