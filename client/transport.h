// How the client reaches a service: over gRPC (grpc_transport.h) or
// in-process (embedded.h). Implementations are thread-safe.
#ifndef KILN_CLIENT_TRANSPORT_H_
#define KILN_CLIENT_TRANSPORT_H_

#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/service.pb.h"

namespace kiln::client {

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
  virtual absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r) = 0;
  virtual absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) = 0;
  virtual absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest& r) = 0;
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_TRANSPORT_H_
