#include "client/grpc_transport.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/service.grpc.pb.h"

namespace kiln::client {
namespace {

constexpr int kMaxMessageBytes = 256 << 20;

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

class GrpcTransport : public Transport {
 public:
  GrpcTransport(std::shared_ptr<grpc::Channel> channel, absl::Duration call_timeout)
      : channel_(std::move(channel)),
        stub_(v1::KilnService::NewStub(channel_)),
        call_timeout_(call_timeout) {}

  template <typename Req, typename Resp, typename Method>
  absl::StatusOr<Resp> Unary(Method method, const Req& req) {
    grpc::ClientContext ctx;
    if (call_timeout_ > absl::ZeroDuration()) {
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + call_timeout_));
    }
    Resp resp;
    grpc::Status s = (stub_.get()->*method)(&ctx, req, &resp);
    if (!s.ok()) return FromGrpc(s);
    return resp;
  }

  absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& r) override {
    return Unary<v1::HandshakeRequest, v1::HandshakeResponse>(
        &v1::KilnService::Stub::Handshake, r);
  }
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest& r) override {
    return Unary<v1::KeepAliveRequest, v1::KeepAliveResponse>(
        &v1::KilnService::Stub::KeepAlive, r);
  }
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(
      const v1::CloseSessionRequest& r) override {
    return Unary<v1::CloseSessionRequest, v1::CloseSessionResponse>(
        &v1::KilnService::Stub::CloseSession, r);
  }
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& r) override {
    return Unary<v1::ReleaseRequest, v1::ReleaseResponse>(&v1::KilnService::Stub::Release, r);
  }
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r) override {
    return Unary<v1::CompileRequest, v1::CompileResponse>(&v1::KilnService::Stub::Compile, r);
  }
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r) override {
    return Unary<v1::ExecuteRequest, v1::ExecuteResponse>(&v1::KilnService::Stub::Execute, r);
  }
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) override {
    return Unary<v1::MemoryInfoRequest, v1::MemoryInfoResponse>(
        &v1::KilnService::Stub::MemoryInfo, r);
  }
  absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest& r) override {
    return Unary<v1::MetricsRequest, v1::MetricsResponse>(&v1::KilnService::Stub::GetMetrics,
                                                          r);
  }

  absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(
      const v1::TransferHeader& header, absl::string_view data, int64_t chunk_bytes) override {
    grpc::ClientContext ctx;
    v1::TransferToDeviceResponse resp;
    auto writer = stub_->TransferToDevice(&ctx, &resp);
    v1::TransferToDeviceChunk first;
    *first.mutable_header() = header;
    bool ok = writer->Write(first);
    for (size_t pos = 0; ok && pos < data.size(); pos += chunk_bytes) {
      v1::TransferToDeviceChunk chunk;
      chunk.set_data(data.data() + pos, std::min<size_t>(chunk_bytes, data.size() - pos));
      ok = writer->Write(chunk);
    }
    // A failed write means the server ended the call (e.g. refused the size):
    // Finish() brings its status.
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (!s.ok()) return FromGrpc(s);
    return resp;
  }

  absl::Status TransferFromDevice(
      const v1::TransferFromDeviceRequest& r,
      const std::function<absl::Status(v1::TransferFromDeviceChunk&)>& on_chunk) override {
    grpc::ClientContext ctx;
    auto reader = stub_->TransferFromDevice(&ctx, r);
    v1::TransferFromDeviceChunk chunk;
    absl::Status local;
    while (reader->Read(&chunk)) {
      local = on_chunk(chunk);
      if (!local.ok()) {
        ctx.TryCancel();
        break;
      }
    }
    grpc::Status s = reader->Finish();
    if (!local.ok()) return local;
    return FromGrpc(s);
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KilnService::Stub> stub_;
  absl::Duration call_timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectGrpc(const std::string& address,
                                                       absl::Duration connect_timeout,
                                                       absl::Duration call_timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  // WaitForConnected retries the connection until the deadline.
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach a Kiln server at ", address,
                                               " within ", absl::FormatDuration(connect_timeout)));
  }
  return std::unique_ptr<Transport>(new GrpcTransport(std::move(channel), call_timeout));
}

}  // namespace kiln::client
