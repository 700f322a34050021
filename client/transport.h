// How the client reaches a service: over gRPC (grpc_transport.h) or
// in-process (embedded.h). Implementations are thread-safe.
#ifndef KILN_CLIENT_TRANSPORT_H_
#define KILN_CLIENT_TRANSPORT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "compiler/ir/literal.h"
#include "kiln/v1/service.pb.h"

namespace kiln::client {

// Cancels a call in flight from another thread. Thread-safe.
class CallCanceller {
 public:
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  // While set, `hook` runs on Cancel() (at once if already cancelled).
  void SetHook(std::function<void()> hook);
  void ClearHook();

 private:
  absl::Mutex mu_;
  std::function<void()> hook_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
};

// A stream of values into a session's infeed on one device. One writer.
class InfeedStream {
 public:
  virtual ~InfeedStream() = default;
  // Sends one array value; blocks while the device queue is full. An error
  // means the stream is over: Finish() then tells why.
  virtual absl::Status Write(const ir::Literal& value) = 0;
  // Ends the stream and returns the server's verdict.
  virtual absl::StatusOr<v1::InfeedResponse> Finish() = 0;
  // Abandons the stream from any thread; a blocked Write returns.
  virtual void Cancel() = 0;
};

// A stream of values out of a session's outfeed on one device. One reader;
// Cancel() may come from any thread.
class OutfeedStream {
 public:
  virtual ~OutfeedStream() = default;
  // The next value in order; nullopt once max_values were read.
  virtual absl::StatusOr<std::optional<ir::Literal>> Next() = 0;
  virtual void Cancel() = 0;
};

// A buffer that an in-process transport hands to the client as it is: the
// client holds it, and it gets a handle only where a message needs one.
class LocalBuffer {
 public:
  // `owner` tells the transport's buffers from others'.
  explicit LocalBuffer(const void* owner) : owner_(owner) {}
  virtual ~LocalBuffer() = default;
  const void* owner() const { return owner_; }

 private:
  const void* const owner_;
};

// One argument of a direct execution: a buffer held as such, a handle of
// the session, or a value (borrowed).
struct DirectArgument {
  std::shared_ptr<LocalBuffer> local;
  std::string handle;
  const ir::Literal* value = nullptr;
};

// An eager op's few arguments and outputs need no allocation.
using DirectArguments = absl::InlinedVector<DirectArgument, 4>;

struct DirectOutputs {
  absl::InlinedVector<std::shared_ptr<LocalBuffer>, 2> outputs;  // the result's arrays, depth-first
  absl::InlinedVector<ir::Shape, 2> shapes;                      // theirs
  // By argument index: the buffer a value became (null for the others and
  // for donated values); empty when no value was given.
  std::vector<std::shared_ptr<LocalBuffer>> argument_buffers;
  int64_t execute_micros = 0;
  std::optional<v1::ExecutionProfileProto> profile;
};

// What an in-process transport offers besides its messages: executions
// whose arguments and results are buffers held by the client, with no
// request, reply or handle in between.
class DirectPath {
 public:
  virtual ~DirectPath() = default;
  // Runs the executable on its device. The donated arguments are given up
  // whatever happens; a donated LocalBuffer nobody else holds may take a
  // result in place.
  virtual absl::StatusOr<DirectOutputs> Execute(const std::string& session_id,
                                                const std::string& executable_handle,
                                                DirectArguments args,
                                                const std::vector<int>& donate,
                                                absl::Duration infeed_timeout,
                                                CallCanceller* cancel) = 0;
  // Registers `buffer` with the session and returns its handle.
  virtual absl::StatusOr<std::string> Adopt(const std::string& session_id,
                                            const LocalBuffer& buffer) = 0;
  // The value of `buffer`, read for the session (whose lease it renews).
  virtual absl::StatusOr<ir::Literal> Read(const std::string& session_id,
                                           const LocalBuffer& buffer) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& r) = 0;
  virtual absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest& r) = 0;
  virtual absl::StatusOr<v1::CloseSessionResponse> CloseSession(
      const v1::CloseSessionRequest& r) = 0;
  // Sends `data` (borrowed) in chunks of `chunk_bytes` after the header.
  virtual absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(
      const v1::TransferHeader& header, absl::string_view data, int64_t chunk_bytes) = 0;
  // Calls `on_chunk` for each chunk in order; its error stops the stream.
  virtual absl::Status TransferFromDevice(
      const v1::TransferFromDeviceRequest& r,
      const std::function<absl::Status(v1::TransferFromDeviceChunk&)>& on_chunk) = 0;
  virtual absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& r) = 0;
  virtual absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r) = 0;
  // `cancel` (may be null) stops the program from another thread.
  virtual absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r,
                                                      CallCanceller* cancel) = 0;
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r) {
    return Execute(r, nullptr);
  }
  virtual absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) = 0;
  virtual absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest& r) = 0;
  // Groups of servers (protocol 5); joining waits for the other members,
  // until `cancel` (may be null) is cancelled.
  virtual absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest& r,
                                                          CallCanceller* cancel) = 0;
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest& r) {
    return JoinGroup(r, nullptr);
  }
  virtual absl::StatusOr<v1::LeaveGroupResponse> LeaveGroup(const v1::LeaveGroupRequest& r) = 0;
  virtual absl::StatusOr<v1::CreateFeedTokenResponse> CreateFeedToken(
      const v1::CreateFeedTokenRequest& r) = 0;
  // Opening checks nothing on the server yet: a refused target shows at the
  // first Write or at Finish.
  virtual absl::StatusOr<std::unique_ptr<InfeedStream>> OpenInfeed(const v1::FeedTarget& target,
                                                                   int64_t chunk_bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<OutfeedStream>> OpenOutfeed(
      const v1::OutfeedRequest& r) = 0;
  // Null unless the service runs in this process (embedded.h).
  virtual DirectPath* direct() { return nullptr; }
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_TRANSPORT_H_
