#include "server/grpc_group.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/net_address.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/service.grpc.pb.h"

namespace kiln::server {
namespace {

absl::Mutex g_channel_mu;
GroupChannelOptions g_channel_options ABSL_GUARDED_BY(g_channel_mu);

bool GroupChannelsUseTls() {
  absl::MutexLock lock(&g_channel_mu);
  return !g_channel_options.ca_pem.empty();
}

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  absl::MutexLock lock(&g_channel_mu);
  if (g_channel_options.ca_pem.empty()) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = g_channel_options.ca_pem;
  ssl.pem_cert_chain = g_channel_options.cert_pem;
  ssl.pem_private_key = g_channel_options.key_pem;
  return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// Whether a failed store call may succeed later: member 0 is not up yet,
// or has not formed the group yet.
bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::NOT_FOUND ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

class GrpcGroupStore : public runtime::GroupStore {
 public:
  GrpcGroupStore(const std::string& address, std::string group_id, std::string secret,
                 absl::Duration timeout, std::string authorization)
      : address_(address),
        group_id_(std::move(group_id)),
        secret_(std::move(secret)),
        timeout_(timeout),
        authorization_(std::move(authorization)),
        stub_(v1::KilnService::NewStub(ChannelTo(address))) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    v1::GroupStoreRequest req = Request(key);
    req.set_set(true);
    req.set_value(value);
    return Call(req, timeout_).status();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    v1::GroupStoreRequest req = Request(key);
    return Call(req, timeout);
  }

 private:
  v1::GroupStoreRequest Request(const std::string& key) const {
    v1::GroupStoreRequest req;
    req.set_group_id(group_id_);
    req.set_secret(secret_);
    req.set_key(key);
    return req;
  }

  // Retries until `timeout` passes; a get waits at member 0 for at most
  // what is left.
  absl::StatusOr<std::string> Call(v1::GroupStoreRequest req, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    grpc::Status last;
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      if (!req.set()) req.set_timeout_millis(std::max<int64_t>(1, absl::ToInt64Milliseconds(left)));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + left + absl::Seconds(1)));
      if (!authorization_.empty()) ctx.AddMetadata("authorization", authorization_);
      v1::GroupStoreResponse resp;
      last = stub_->GroupStore(&ctx, req, &resp);
      if (last.ok()) return resp.value();
      if (!Retryable(last.error_code())) break;
      absl::SleepFor(std::min(absl::Milliseconds(50), deadline - absl::Now()));
    }
    return absl::Status(
        last.ok() ? absl::StatusCode::kDeadlineExceeded
                  : static_cast<absl::StatusCode>(last.error_code()),
        absl::StrCat("the store of group ", group_id_, " at member 0 (", address_, "): ",
                     last.ok() ? "no time left" : last.error_message()));
  }

  const std::string address_;
  const std::string group_id_;
  const std::string secret_;
  const absl::Duration timeout_;
  const std::string authorization_;
  std::unique_ptr<v1::KilnService::Stub> stub_;
};

}  // namespace

void SetGroupChannelOptions(const GroupChannelOptions& options) {
  absl::MutexLock lock(&g_channel_mu);
  g_channel_options = options;
}

std::shared_ptr<runtime::GroupStore> RemoteGroupStore(const std::string& address,
                                                      const std::string& group_id,
                                                      const std::string& secret,
                                                      absl::Duration timeout,
                                                      const std::string& authorization) {
  // A bearer token crosses the network only encrypted, as the client's
  // own calls do: without TLS, member 0 gets it only on this machine.
  const bool may_send = GroupChannelsUseTls() || IsLoopbackHost(HostOf(address));
  return std::make_shared<GrpcGroupStore>(address, group_id, secret, timeout,
                                          may_send ? authorization : std::string());
}

absl::Status ProbeServer(const std::string& address, absl::Duration timeout) {
  auto stub = grpc::health::v1::Health::NewStub(ChannelTo(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return FromGrpc(s);
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
