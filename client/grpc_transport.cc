#include "client/grpc_transport.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "compiler/ir/proto_convert.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/service.grpc.pb.h"
#include "base/chunks.h"
#include "base/file_io.h"
#include "base/net_address.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

constexpr int kMaxMessageBytes = 256 << 20;

// Every call carries the bearer token, if there is one.
void Authorize(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

class GrpcTransport : public Transport {
 public:
  using Transport::Execute;
  using Transport::JoinGroup;
  GrpcTransport(std::shared_ptr<grpc::Channel> channel, const GrpcOptions& options)
      : channel_(std::move(channel)),
        stub_(v1::KilnService::NewStub(channel_)),
        options_(options) {}

  // `timeout` (zero: none) is the call's deadline; `cancel` (may be null)
  // lets another thread cancel the call.
  template <typename Req, typename Resp, typename Method>
  absl::StatusOr<Resp> Unary(Method method, const Req& req, absl::Duration timeout,
                             CallCanceller* cancel = nullptr) {
    AwaitConnection();
    return UnaryOnce<Req, Resp>(method, req, timeout, cancel);
  }
  // For calls that change nothing on the server: one that failed because
  // the connection broke under it goes out once more on the new one.
  template <typename Req, typename Resp, typename Method>
  absl::StatusOr<Resp> ReadOnly(Method method, const Req& req, absl::Duration timeout) {
    for (int attempt = 0;; ++attempt) {
      AwaitConnection();
      absl::StatusOr<Resp> r = UnaryOnce<Req, Resp>(method, req, timeout, nullptr);
      if (r.ok() || r.status().code() != absl::StatusCode::kUnavailable ||
          !Backoff(attempt)) {
        return r;
      }
    }
  }
  // After a call failed on a broken connection: waits a little longer each
  // time (the channel may not have noticed the break yet); false once the
  // retries are used up.
  bool Backoff(int attempt) {
    constexpr int kAttempts = 5;
    if (attempt + 1 >= kAttempts) return false;
    absl::SleepFor(absl::Milliseconds(25 << attempt));
    return true;
  }
  template <typename Req, typename Resp, typename Method>
  absl::StatusOr<Resp> UnaryOnce(Method method, const Req& req, absl::Duration timeout,
                                 CallCanceller* cancel) {
    grpc::ClientContext ctx;
    Authorize(&ctx, options_.security.token);
    if (timeout > absl::ZeroDuration() && timeout < absl::InfiniteDuration()) {
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    }
    if (cancel != nullptr) cancel->SetHook([&ctx]() { ctx.TryCancel(); });
    Resp resp;
    grpc::Status s = (stub_.get()->*method)(&ctx, req, &resp);
    if (cancel != nullptr) cancel->ClearHook();
    if (!s.ok()) return FromGrpc(s);
    return resp;
  }

  absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& r) override {
    return Unary<v1::HandshakeRequest, v1::HandshakeResponse>(
        &v1::KilnService::Stub::Handshake, r, options_.control_timeout);
  }
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest& r) override {
    return ReadOnly<v1::KeepAliveRequest, v1::KeepAliveResponse>(
        &v1::KilnService::Stub::KeepAlive, r, options_.control_timeout);
  }
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(
      const v1::CloseSessionRequest& r) override {
    return Unary<v1::CloseSessionRequest, v1::CloseSessionResponse>(
        &v1::KilnService::Stub::CloseSession, r, options_.control_timeout);
  }
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& r) override {
    return Unary<v1::ReleaseRequest, v1::ReleaseResponse>(&v1::KilnService::Stub::Release, r, options_.control_timeout);
  }
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r) override {
    return Unary<v1::CompileRequest, v1::CompileResponse>(&v1::KilnService::Stub::Compile, r, options_.compile_timeout);
  }
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r,
                                              CallCanceller* cancel) override {
    return Unary<v1::ExecuteRequest, v1::ExecuteResponse>(&v1::KilnService::Stub::Execute, r, options_.execute_timeout,
                                                          cancel);
  }
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest& r,
                                                  CallCanceller* cancel) override {
    // Waits for the other members, up to the group's timeout (at most 10
    // minutes), as long as a compile may take.
    return Unary<v1::JoinGroupRequest, v1::JoinGroupResponse>(&v1::KilnService::Stub::JoinGroup, r,
                                                              options_.compile_timeout, cancel);
  }
  absl::StatusOr<v1::LeaveGroupResponse> LeaveGroup(const v1::LeaveGroupRequest& r) override {
    return Unary<v1::LeaveGroupRequest, v1::LeaveGroupResponse>(
        &v1::KilnService::Stub::LeaveGroup, r, options_.control_timeout);
  }
  absl::StatusOr<v1::CreateFeedTokenResponse> CreateFeedToken(
      const v1::CreateFeedTokenRequest& r) override {
    return Unary<v1::CreateFeedTokenRequest, v1::CreateFeedTokenResponse>(
        &v1::KilnService::Stub::CreateFeedToken, r, options_.control_timeout);
  }
  absl::StatusOr<std::unique_ptr<InfeedStream>> OpenInfeed(const v1::FeedTarget& target,
                                                           int64_t chunk_bytes) override;
  absl::StatusOr<std::unique_ptr<OutfeedStream>> OpenOutfeed(
      const v1::OutfeedRequest& r) override;
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) override {
    return ReadOnly<v1::MemoryInfoRequest, v1::MemoryInfoResponse>(
        &v1::KilnService::Stub::MemoryInfo, r, options_.control_timeout);
  }
  absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest& r) override {
    return ReadOnly<v1::MetricsRequest, v1::MetricsResponse>(
        &v1::KilnService::Stub::GetMetrics, r, options_.control_timeout);
  }

  absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(
      const v1::TransferHeader& header, absl::string_view data, int64_t chunk_bytes) override {
    AwaitConnection();
    grpc::ClientContext ctx;
    Authorize(&ctx, options_.security.token);
    v1::TransferToDeviceResponse resp;
    auto writer = stub_->TransferToDevice(&ctx, &resp);
    v1::TransferToDeviceChunk first;
    *first.mutable_header() = header;
    bool ok = writer->Write(first);
    // One message for every chunk: its data keeps its capacity.
    v1::TransferToDeviceChunk chunk;
    for (size_t pos = 0; ok && pos < data.size(); pos += chunk_bytes) {
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
    // A read changes nothing: when the connection broke before any of it
    // arrived, it is asked once more on the new connection.
    for (int attempt = 0;; ++attempt) {
      AwaitConnection();
      grpc::ClientContext ctx;
      Authorize(&ctx, options_.security.token);
      auto reader = stub_->TransferFromDevice(&ctx, r);
      v1::TransferFromDeviceChunk chunk;
      absl::Status local;
      bool received = false;
      while (reader->Read(&chunk)) {
        received = true;
        local = on_chunk(chunk);
        if (!local.ok()) {
          ctx.TryCancel();
          break;
        }
      }
      grpc::Status s = reader->Finish();
      if (!local.ok()) return local;
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !received && Backoff(attempt)) {
        continue;
      }
      return FromGrpc(s);
    }
  }

 private:
  // A connection that broke (a restarted proxy, a network blip) is made
  // again by the channel: a call waits up to reconnect_timeout for it
  // instead of failing at once, and then goes out on the new connection
  // with the same session. A call already sent when the connection broke
  // fails with UNAVAILABLE (it may or may not have run); only the calls
  // that change nothing (ReadOnly, TransferFromDevice) are sent again, up
  // to five times.
  //
  // The calls of one outage share its wait: the first call that finds the
  // connection down starts it, and once reconnect_timeout has passed
  // without a connection every call (and every retry) fails at once,
  // until one finds the connection made again. A server that is gone for
  // good thus costs one wait, not one per call still to make.
  void AwaitConnection() {
    if (options_.reconnect_timeout <= absl::ZeroDuration()) return;
    if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
      EndOutage();
      return;
    }
    absl::Time until;
    {
      absl::MutexLock lock(&outage_mu_);
      if (outage_until_ == absl::InfinitePast()) {
        outage_until_ = absl::Now() + options_.reconnect_timeout;
      }
      until = outage_until_;
    }
    if (channel_->WaitForConnected(absl::ToChronoTime(until))) EndOutage();
  }
  void EndOutage() {
    absl::MutexLock lock(&outage_mu_);
    outage_until_ = absl::InfinitePast();
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KilnService::Stub> stub_;
  const GrpcOptions options_;
  absl::Mutex outage_mu_;
  // When the current outage's wait ends; InfinitePast: no outage.
  absl::Time outage_until_ ABSL_GUARDED_BY(outage_mu_) = absl::InfinitePast();

 public:
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const GrpcOptions& options() const { return options_; }
};

class GrpcInfeedStream : public InfeedStream {
 public:
  GrpcInfeedStream(v1::KilnService::Stub* stub, const v1::FeedTarget& target, int64_t chunk_bytes,
                   const std::string& token)
      : chunk_bytes_(std::max<int64_t>(chunk_bytes, 1024)) {
    Authorize(&ctx_, token);
    writer_ = stub->Infeed(&ctx_, &resp_);
    v1::InfeedChunk first;
    *first.mutable_target() = target;
    open_ = writer_->Write(first);
  }
  ~GrpcInfeedStream() override {
    if (!finished_) {
      ctx_.TryCancel();
      Finish().IgnoreError();
    }
  }

  absl::Status Write(const ir::Literal& value) override {
    if (!open_) return absl::UnavailableError("the infeed stream is closed; Finish() tells why");
    RETURN_IF_ERROR(ir::CheckFeedValue(value.shape(), std::numeric_limits<int64_t>::max()));
    std::vector<uint8_t> storage;
    const std::vector<uint8_t>& bytes = ir::FeedValueBytes(value, &storage);
    const int64_t total = static_cast<int64_t>(bytes.size());
    open_ = ForEachChunk(total, chunk_bytes_, [&](int64_t offset, int64_t n) {
      // One message for every chunk: its data keeps its capacity, so a
      // stream of values allocates (and faults in) the chunk's bytes once.
      chunk_.clear_shape();
      chunk_.clear_total_bytes();
      if (offset == 0) {
        ir::ShapeToProto(value.shape(), chunk_.mutable_shape());
        chunk_.set_total_bytes(total);
      }
      chunk_.set_data(reinterpret_cast<const char*>(bytes.data()) + offset, n);
      return writer_->Write(chunk_);
    });
    if (!open_) {
      return absl::UnavailableError("the server ended the infeed stream; Finish() tells why");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::InfeedResponse> Finish() override {
    if (finished_) return absl::FailedPreconditionError("the infeed stream was finished already");
    finished_ = true;
    writer_->WritesDone();
    grpc::Status s = writer_->Finish();
    if (!s.ok()) return FromGrpc(s);
    return resp_;
  }

  void Cancel() override { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  v1::InfeedResponse resp_;
  std::unique_ptr<grpc::ClientWriter<v1::InfeedChunk>> writer_;
  v1::InfeedChunk chunk_;  // reused by every Write
  const int64_t chunk_bytes_;
  bool open_ = false, finished_ = false;
};

class GrpcOutfeedStream : public OutfeedStream {
 public:
  GrpcOutfeedStream(v1::KilnService::Stub* stub, const v1::OutfeedRequest& r,
                    const std::string& token)
      : max_values_(r.max_values()) {
    Authorize(&ctx_, token);
    reader_ = stub->Outfeed(&ctx_, r);
  }
  ~GrpcOutfeedStream() override {
    if (!finished_) {
      ctx_.TryCancel();
      reader_->Finish();
    }
  }

  absl::StatusOr<std::optional<ir::Literal>> Next() override {
    if (finished_) {
      if (!final_.ok()) return final_;
      return std::optional<ir::Literal>();
    }
    ir::ChunkedValue value;
    v1::OutfeedChunk chunk;
    while (reader_->Read(&chunk)) {
      if (chunk.has_shape()) {
        absl::Status st = value.Start(chunk.shape(), chunk.total_bytes(),
                                      std::numeric_limits<int64_t>::max());
        if (!st.ok()) return Fail(st);
      }
      absl::Status st = value.Append(chunk.data());
      if (!st.ok()) return Fail(st);
      if (value.complete()) {
        ++read_;
        return std::optional<ir::Literal>(value.Take());
      }
    }
    finished_ = true;
    final_ = FromGrpc(reader_->Finish());
    if (final_.ok() && value.started()) final_ = absl::DataLossError("outfeed value cut short");
    if (final_.ok() && max_values_ > 0 && read_ < max_values_) {
      final_ = absl::UnavailableError("the outfeed stream ended early");
    }
    if (!final_.ok()) return final_;
    return std::optional<ir::Literal>();
  }

  void Cancel() override { ctx_.TryCancel(); }

 private:
  absl::Status Fail(absl::Status st) {
    ctx_.TryCancel();
    reader_->Finish();
    finished_ = true;
    final_ = st;
    return st;
  }

  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::OutfeedChunk>> reader_;
  const int64_t max_values_;
  int64_t read_ = 0;
  bool finished_ = false;
  absl::Status final_;
};

absl::StatusOr<std::unique_ptr<InfeedStream>> GrpcTransport::OpenInfeed(
    const v1::FeedTarget& target, int64_t chunk_bytes) {
  AwaitConnection();
  return std::unique_ptr<InfeedStream>(new GrpcInfeedStream(stub_.get(), target, chunk_bytes, options_.security.token));
}

absl::StatusOr<std::unique_ptr<OutfeedStream>> GrpcTransport::OpenOutfeed(
    const v1::OutfeedRequest& r) {
  AwaitConnection();
  return std::unique_ptr<OutfeedStream>(new GrpcOutfeedStream(stub_.get(), r, options_.security.token));
}

}  // namespace

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::optional<std::string> text = ReadFileToString(path);
  if (!text) return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " ", path));
  return *std::move(text);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const SecurityOptions& security) {
  if (!security.uses_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!security.tls_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(security.tls_ca_file, "TLS CA file"));
  }
  if (!security.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                     ReadFile(security.tls_cert_file, "TLS client certificate"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile(security.tls_key_file, "TLS client key"));
  }
  return grpc::SslCredentials(ssl);
}

// A handshake that fails (wrong CA, no client certificate, plaintext
// against TLS) will not succeed by retrying: such errors end the wait at
// once. A call that fails fast tells why the channel is failing.
std::string ConnectionError(grpc::Channel* channel) {
  v1::KilnService::Stub stub(std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(false);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::KeepAliveRequest req;
  v1::KeepAliveResponse resp;
  grpc::Status s = stub.KeepAlive(&ctx, req, &resp);
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ? s.error_message() : std::string();
}

bool IsHandshakeFailure(const std::string& error) {
  for (const char* marker : {"andshake", "SSL", "TLS", "ertificate", "Socket closed"}) {
    if (error.find(marker) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectGrpc(const std::string& address,
                                                       const GrpcOptions& given) {
  GrpcOptions options = given;
  ASSIGN_OR_RETURN(options.security, ResolveSecurity(given.security));
  // A bearer token on a plaintext channel is readable by anyone on the
  // path: only to this machine.
  absl::string_view target = address;
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:"}) absl::ConsumePrefix(&target, scheme);
  if (!options.security.token.empty() && !options.security.uses_tls() &&
      !IsLoopbackHost(HostOf(target))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a bearer token would travel in clear to ", address,
        ": connect with TLS (KILN_TLS_CA or KILN_TLS=1)"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.security));
  const absl::Duration connect_timeout = options.connect_timeout;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Once an outage's wait has passed, calls fail at once until the channel
  // connects again: it tries at least every 5 s (gRPC's own bound is two
  // minutes), so a server that comes back is found soon.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  if (!options.security.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.security.tls_server_name);
  }
  if (options.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  const absl::Time deadline = absl::Now() + connect_timeout;
  std::string last_error;
  // WaitForConnected retries the connection until the deadline; a failing
  // channel is asked why every half second.
  while (!channel->WaitForConnected(
      absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Milliseconds(500))))) {
    if (channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      last_error = ConnectionError(channel.get());
      if (IsHandshakeFailure(last_error)) {
        return absl::UnavailableError(absl::StrCat(
            "cannot connect to the Kiln server at ", address, " (",
            options.security.uses_tls() ? "TLS" : "plaintext", "): ", last_error,
            options.security.uses_tls()
                ? "; check the CA (KILN_TLS_CA), the server name and, where the server "
                  "requires one, the client certificate (KILN_TLS_CERT, KILN_TLS_KEY)"
                : "; a server with TLS needs a CA (KILN_TLS_CA) or KILN_TLS=1"));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "cannot reach a Kiln server at ", address, " within ",
          absl::FormatDuration(connect_timeout), last_error.empty() ? "" : ": ", last_error));
    }
  }
  return std::unique_ptr<Transport>(new GrpcTransport(std::move(channel), options));
}

absl::StatusOr<std::string> CheckHealth(const std::string& address, const GrpcOptions& given) {
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, ConnectGrpc(address, given));
  auto* grpc_transport = static_cast<GrpcTransport*>(transport.get());
  // The client library carries no grpc.health.v1 stubs: the request
  // (service "") is the empty message, and the reply is one varint field.
  grpc::GenericStub stub(grpc_transport->channel());
  grpc::ClientContext ctx;
  Authorize(&ctx, grpc_transport->options().security.token);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + grpc_transport->options().control_timeout));
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok) || !ok) return absl::UnavailableError("the health check did not finish");
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return FromGrpc(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable health reply");
  std::string bytes;
  for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  int value = 0;  // absent field: UNKNOWN
  if (bytes.size() == 2 && bytes[0] == 0x08) value = static_cast<unsigned char>(bytes[1]);
  else if (!bytes.empty()) return absl::InternalError("unexpected health reply");
  switch (value) {
    case 1: return std::string("SERVING");
    case 2: return std::string("NOT_SERVING");
    default: return std::string("UNKNOWN");
  }
}

}  // namespace kiln::client
