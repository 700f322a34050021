#include "server/grpc_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/proto_convert.h"
#include "base/status_macros.h"
#include "grpcpp/security/server_credentials.h"
#include "base/chunks.h"
#include "runtime/cancel_check.h"

namespace kiln::server {
namespace {

// Messages may carry module constants; transfers use chunks of ~1 MiB.
constexpr int kMaxMessageBytes = 256 << 20;

template <typename Response>
grpc::Status Reply(absl::StatusOr<Response> result, Response* out) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *out = *std::move(result);
  return grpc::Status::OK;
}

// Whether the client cancelled the call (or its deadline passed). Asking
// gRPC is slow, and executions poll after every step: a handler watches it
// (runtime::CancelWatch) for as long as it runs and hands on the watch's
// check.
runtime::CancelCheck ClientGaveUp(grpc::ServerContext* ctx) {
  return [ctx]() { return ctx->IsCancelled(); };
}

}  // namespace

// Every call is checked before it does anything: its token, and with
// tokens on, that the session it names was opened with a token of the same
// name.
#define RETURN_IF_UNAUTHORIZED(ctx, session_id)                                        \
  do {                                                                                 \
    if (grpc::Status auth_status = Authorize(ctx, session_id); !auth_status.ok()) {     \
      return auth_status;                                                              \
    }                                                                                  \
  } while (false)

grpc::Status GrpcService::Authorize(const grpc::ServerContext* ctx,
                                    const std::string& session_id, std::string* caller_out) {
  std::string caller;
  if (grpc::Status st = auth_->Check(ctx, &caller); !st.ok()) return st;
  // Without tokens, a verified client certificate names the caller.
  if (caller.empty()) {
    std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      caller = "certificate";
      for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
        absl::StrAppend(&caller, ":", absl::string_view(id.data(), id.size()));
      }
    }
  }
  if (caller_out != nullptr) *caller_out = caller;
  if (caller.empty() || session_id.empty()) return grpc::Status::OK;
  {
    absl::MutexLock lock(&owners_mu_);
    auto it = owners_.find(session_id);
    if (it != owners_.end()) {
      if (it->second == caller) return grpc::Status::OK;
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "the session belongs to another client identity");
    }
  }
  // Every session opened by an identified caller is in the map: one that is
  // not, and still open, is not this caller's.
  if (service_->SessionAlive(session_id)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the session belongs to another client identity");
  }
  return grpc::Status::OK;  // unknown: the service says so
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::Status GrpcService::Handshake(grpc::ServerContext* ctx, const v1::HandshakeRequest* req,
                                    v1::HandshakeResponse* resp) {
  std::string caller;
  if (grpc::Status st = Authorize(ctx, "", &caller); !st.ok()) return st;
  grpc::Status status = Reply(service_->Handshake(*req), resp);
  if (!status.ok()) return status;
  if (!security_warning_.empty()) resp->set_security_warning(security_warning_);
  if (!caller.empty()) {
    absl::MutexLock lock(&owners_mu_);
    // Forget the sessions that have ended, now and then.
    if (++handshakes_ % 64 == 0) {
      for (auto it = owners_.begin(); it != owners_.end();) {
        if (!service_->SessionAlive(it->first)) {
          owners_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    owners_[resp->session_id()] = caller;
  }
  return status;
}
grpc::Status GrpcService::KeepAlive(grpc::ServerContext* ctx, const v1::KeepAliveRequest* req,
                                    v1::KeepAliveResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->KeepAlive(*req), resp);
}
grpc::Status GrpcService::CloseSession(grpc::ServerContext* ctx, const v1::CloseSessionRequest* req,
                                       v1::CloseSessionResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->CloseSession(*req), resp);
}

grpc::Status GrpcService::TransferToDevice(grpc::ServerContext* ctx,
                                           grpc::ServerReader<v1::TransferToDeviceChunk>* reader,
                                           v1::TransferToDeviceResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, "");
  v1::TransferToDeviceChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty transfer stream");
  }
  if (!chunk.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first transfer message must carry the header");
  }
  const v1::TransferHeader header = chunk.header();
  RETURN_IF_UNAUTHORIZED(ctx, header.session_id());
  auto next = [&](std::string* data) -> absl::StatusOr<bool> {
    v1::TransferToDeviceChunk c;
    if (!reader->Read(&c)) {
      if (ctx->IsCancelled()) return absl::CancelledError("transfer cancelled by the client");
      return false;
    }
    if (c.has_header()) return absl::InvalidArgumentError("a second transfer header");
    *data = std::move(*c.mutable_data());
    return true;
  };
  return Reply(service_->TransferToDevice(header, chunk.data(), next), resp);
}

grpc::Status GrpcService::TransferFromDevice(
    grpc::ServerContext* ctx, const v1::TransferFromDeviceRequest* req,
    grpc::ServerWriter<v1::TransferFromDeviceChunk>* writer) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  const runtime::CancelWatch cancel(ClientGaveUp(ctx));
  return ToGrpcStatus(service_->TransferFromDevice(
      *req, [&](const v1::TransferFromDeviceChunk& c) { return writer->Write(c); },
      cancel.check()));
}

grpc::Status GrpcService::Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                                  v1::ReleaseResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->Release(*req), resp);
}
grpc::Status GrpcService::Compile(grpc::ServerContext* ctx, const v1::CompileRequest* req,
                                  v1::CompileResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->Compile(*req), resp);
}
grpc::Status GrpcService::Execute(grpc::ServerContext* ctx, const v1::ExecuteRequest* req,
                                  v1::ExecuteResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  // A client that cancels or passes its deadline stops the program.
  // The inline results stay charged to the session until the reply is
  // handed to gRPC.
  runtime::MemoryCharge reply_charge;
  const runtime::CancelWatch cancel(ClientGaveUp(ctx));
  return Reply(service_->Execute(*req, cancel.check(), &reply_charge), resp);
}
grpc::Status GrpcService::MemoryInfo(grpc::ServerContext* ctx, const v1::MemoryInfoRequest* req,
                                     v1::MemoryInfoResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->MemoryInfo(*req), resp);
}
grpc::Status GrpcService::GetMetrics(grpc::ServerContext* ctx, const v1::MetricsRequest*,
                                     v1::MetricsResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, "");
  *resp = service_->GetMetrics();
  return grpc::Status::OK;
}

grpc::Status GrpcService::CreateFeedToken(grpc::ServerContext* ctx,
                                          const v1::CreateFeedTokenRequest* req,
                                          v1::CreateFeedTokenResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->CreateFeedToken(*req), resp);
}

grpc::Status GrpcService::JoinGroup(grpc::ServerContext* ctx, const v1::JoinGroupRequest* req,
                                    v1::JoinGroupResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  // The member calls member 0's store with the client's token, which
  // member 0 checks as it checks any call.
  std::string authorization;
  const auto& metadata = ctx->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization.assign(it->second.data(), it->second.size());
  }
  const runtime::CancelWatch cancel(ClientGaveUp(ctx));
  return Reply(service_->JoinGroup(*req, authorization, cancel.check()), resp);
}
grpc::Status GrpcService::LeaveGroup(grpc::ServerContext* ctx, const v1::LeaveGroupRequest* req,
                                     v1::LeaveGroupResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, req->session_id());
  return Reply(service_->LeaveGroup(*req), resp);
}
grpc::Status GrpcService::GroupStore(grpc::ServerContext* ctx, const v1::GroupStoreRequest* req,
                                     v1::GroupStoreResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, "");
  return Reply(service_->GroupStore(*req), resp);
}

grpc::Status GrpcService::Infeed(grpc::ServerContext* ctx,
                                 grpc::ServerReader<v1::InfeedChunk>* reader,
                                 v1::InfeedResponse* resp) {
  RETURN_IF_UNAUTHORIZED(ctx, "");
  v1::InfeedChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty infeed stream");
  }
  if (!chunk.has_target()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first infeed message must carry the target");
  }
  RETURN_IF_UNAUTHORIZED(ctx, chunk.target().session_id());
  absl::StatusOr<kiln::server::Service::FeedEndpoint> feed = service_->OpenFeed(chunk.target());
  if (!feed.ok()) return ToGrpcStatus(feed.status());
  const runtime::CancelWatch cancel(ClientGaveUp(ctx));
  const runtime::CancelCheck cancelled = cancel.check();
  ir::ChunkedValue value;
  // The bytes of the value being assembled are the session's host memory.
  runtime::MemoryCharge charge(feed->session->host_account());
  int64_t values = 0, bytes = 0;
  while (true) {
    if (chunk.has_shape()) {
      absl::Status st = value.Start(chunk.shape(), chunk.total_bytes(), feed->max_value_bytes);
      if (!st.ok()) return ToGrpcStatus(WithContext(st, absl::StrCat("infeed value ", values)));
    }
    absl::Status st = charge.Grow(static_cast<int64_t>(chunk.data().size()),
                                  absl::StrCat("infeed value ", values));
    if (st.ok()) st = value.Append(chunk.data());
    if (!st.ok()) return ToGrpcStatus(WithContext(st, absl::StrCat("infeed value ", values)));
    if (value.complete()) {
      ir::Literal literal = value.Take();
      bytes += literal.shape().ByteSize();
      st = service_->Infeed(*feed, std::move(literal), cancelled,
                            std::exchange(charge, runtime::MemoryCharge(charge.account())));
      if (!st.ok()) return ToGrpcStatus(st);
      ++values;
    }
    if (!reader->Read(&chunk)) break;
    if (chunk.has_target()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a second infeed target");
    }
  }
  if (ctx->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "infeed cancelled by the producer");
  }
  if (value.started()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("the infeed stream ended inside value ", values,
                                     "; that value was dropped"));
  }
  resp->set_values(values);
  resp->set_bytes(bytes);
  return grpc::Status::OK;
}

grpc::Status GrpcService::Outfeed(grpc::ServerContext* ctx, const v1::OutfeedRequest* req,
                                  grpc::ServerWriter<v1::OutfeedChunk>* writer) {
  RETURN_IF_UNAUTHORIZED(ctx, req->target().session_id());
  absl::StatusOr<kiln::server::Service::FeedEndpoint> feed = service_->OpenFeed(req->target());
  if (!feed.ok()) return ToGrpcStatus(feed.status());
  const absl::Duration timeout = req->timeout_millis() > 0
                                     ? absl::Milliseconds(req->timeout_millis())
                                     : absl::InfiniteDuration();
  const int64_t chunk = std::clamp<int64_t>(req->chunk_bytes() > 0 ? req->chunk_bytes() : 1 << 20,
                                            1024, int64_t{16} << 20);
  const runtime::CancelWatch cancel(ClientGaveUp(ctx));
  for (int64_t n = 0; req->max_values() <= 0 || n < req->max_values(); ++n) {
    runtime::MemoryCharge charge;  // the value's, until it is sent
    absl::StatusOr<ir::Literal> value =
        service_->Outfeed(*feed, timeout, cancel.check(), &charge);
    if (!value.ok()) return ToGrpcStatus(value.status());
    std::vector<uint8_t> storage;
    const std::vector<uint8_t>& bytes = ir::FeedValueBytes(*value, &storage);
    const int64_t total = static_cast<int64_t>(bytes.size());
    const bool sent = ForEachChunk(total, chunk, [&](int64_t offset, int64_t len) {
      v1::OutfeedChunk msg;
      if (offset == 0) {
        ir::ShapeToProto(value->shape(), msg.mutable_shape());
        msg.set_total_bytes(total);
      }
      msg.set_data(reinterpret_cast<const char*>(bytes.data()) + offset, len);
      return writer->Write(msg);
    });
    if (!sent) return grpc::Status(grpc::StatusCode::CANCELLED, "the outfeed reader went away");
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(kiln::server::Service* service,
                                                             const std::string& address) {
  GrpcServerOptions options;
  options.address = address;
  return Start(service, options);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(kiln::server::Service* service,
                                                             const GrpcServerOptions& options) {
  const std::string& address = options.address;
  auto server = std::unique_ptr<GrpcServer>(new GrpcServer());
  server->auth_ = std::make_unique<CallAuth>(options.tokens, &service->metrics());
  server->handler_ =
      std::make_unique<GrpcService>(service, server->auth_.get(), options.security_warning);
  server->health_ = std::make_unique<HealthService>(server->auth_.get());
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (options.tls.enabled()) {
    ASSIGN_OR_RETURN(credentials, ServerTlsCredentials(options.tls));
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  grpc::ServerBuilder builder;
  int port = 0;
  // Without SO_REUSEPORT: a second server on a port in use must fail, not
  // share the port's sessions; and port 0 gives exactly one socket (with
  // reuse, gRPC opens more than one listener, each on its own port).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients ping every 30 s, also between calls (client/grpc_transport.h):
  // allow that instead of answering it with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddListeningPort(address, credentials, &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  // A call holds its thread until it ends, and gRPC starts a thread when the
  // last idle one takes a call. With its default of at most two idle
  // threads, the one that finished a call then exits: a pipelined training
  // loop (two executions in flight and a release) started and ended a thread
  // almost every step. Eight idle threads are kept instead.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 8);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(server->handler_.get());
  builder.RegisterService(server->health_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, " (is the port in use, or the address not local?)"));
  }
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    server->address_ = address;  // a socket path: no port to fill in
  } else {
    std::string host = address.substr(0, address.rfind(':'));
    server->address_ = absl::StrCat(host, ":", port);
  }
  return server;
}

void GrpcServer::Shutdown(absl::Duration grace) {
  health_->SetServing(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void GrpcServer::Wait() { server_->Wait(); }

}  // namespace kiln::server
