#include "client/mesh_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

// A server that answers every call, or, while `down`, none (UNAVAILABLE,
// as a broken connection does). It counts the calls that reach it.
class FakeServer : public Transport {
 public:
  bool down = false;
  // JoinGroup refuses (PERMISSION_DENIED), or waits to be cancelled (for
  // at most 20 s) as a member waiting for another does; else it joins.
  bool refuse_join = false, join_waits = false;
  int releases = 0, keep_alives = 0, closes = 0, joins = 0, executes = 0;

  absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& r) override {
    if (down) return Down();
    v1::HandshakeResponse out;
    out.set_version(r.max_version());
    out.set_session_id("s");
    out.set_lease_seconds(60);
    v1::DeviceInfo* d = out.add_devices();
    d->set_name("cpu:0");
    d->set_kind("cpu");
    return out;
  }
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest&) override {
    ++keep_alives;
    if (down) return Down();
    v1::KeepAliveResponse out;
    out.set_lease_seconds(60);
    return out;
  }
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(const v1::CloseSessionRequest&) override {
    ++closes;
    if (down) return Down();
    return v1::CloseSessionResponse();
  }
  absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(const v1::TransferHeader&,
                                                                absl::string_view,
                                                                int64_t) override {
    if (down) return Down();
    v1::TransferToDeviceResponse out;
    out.set_buffer_handle(absl::StrCat("b", ++buffers_));
    return out;
  }
  absl::Status TransferFromDevice(
      const v1::TransferFromDeviceRequest&,
      const std::function<absl::Status(v1::TransferFromDeviceChunk&)>&) override {
    if (down) return Down();
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& r) override {
    ++releases;
    if (down) return Down();
    v1::ReleaseResponse out;
    out.set_released(r.buffer_handles_size());
    return out;
  }
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest&) override {
    if (down) return Down();
    v1::CompileResponse out;
    out.set_executable_handle("e1");
    return out;
  }
  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest&,
                                              CallCanceller*) override {
    ++executes;
    if (down) return Down();
    return v1::ExecuteResponse();
  }
  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest&) override {
    if (down) return Down();
    return v1::MemoryInfoResponse();
  }
  absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest&) override {
    return Unexpected();
  }
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest&,
                                                  CallCanceller* cancel) override {
    ++joins;
    if (down) return Down();
    if (refuse_join) return absl::PermissionDeniedError("not one of this server's peers");
    if (!join_waits) return v1::JoinGroupResponse();
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while ((cancel == nullptr || !cancel->cancelled()) && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::CancelledError("the join was cancelled");
  }
  absl::StatusOr<v1::LeaveGroupResponse> LeaveGroup(const v1::LeaveGroupRequest&) override {
    if (down) return Down();
    return v1::LeaveGroupResponse();
  }
  absl::StatusOr<v1::CreateFeedTokenResponse> CreateFeedToken(
      const v1::CreateFeedTokenRequest&) override {
    return Unexpected();
  }
  absl::StatusOr<std::unique_ptr<InfeedStream>> OpenInfeed(const v1::FeedTarget&,
                                                           int64_t) override {
    return Unexpected();
  }
  absl::StatusOr<std::unique_ptr<OutfeedStream>> OpenOutfeed(const v1::OutfeedRequest&) override {
    return Unexpected();
  }

 private:
  static absl::Status Down() { return absl::UnavailableError("Connection refused"); }
  static absl::Status Unexpected() {
    ADD_FAILURE() << "a call this test does not make reached the server";
    return absl::UnimplementedError("not in this test");
  }
  int buffers_ = 0;
};

class MeshTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<Transport>> hosts;
    for (int i = 0; i < 2; ++i) {
      auto server = std::make_unique<FakeServer>();
      servers_[i] = server.get();
      hosts.push_back(std::move(server));
    }
    mesh_ = MakeMeshTransport(std::move(hosts), {"10.0.0.1:7000", "10.0.0.2:7000"},
                              absl::Seconds(30));
    v1::HandshakeRequest hello;
    hello.set_max_version(1);
    ASSERT_TRUE(mesh_->Handshake(hello).ok());
  }

  absl::StatusOr<std::string> Send(int host) {
    v1::TransferHeader header;
    header.set_device(absl::StrCat("host", host, "/cpu:0"));
    auto sent = mesh_->TransferToDevice(header, "", 1024);
    if (!sent.ok()) return sent.status();
    return sent->buffer_handle();
  }

  // Runs a program (compiled once) with one replica on each server: a
  // group of both.
  absl::Status RunOnBoth() {
    if (program_.empty()) {
      v1::CompileRequest compile;
      compile.set_device("host0/cpu:0");
      auto compiled = mesh_->Compile(compile);
      if (!compiled.ok()) return compiled.status();
      program_ = compiled->executable_handle();
    }
    v1::ExecuteRequest run;
    run.set_executable_handle(program_);
    run.add_replicas()->set_device("host0/cpu:0");
    run.add_replicas()->set_device("host1/cpu:0");
    return mesh_->Execute(run).status();
  }

  std::string program_;
  FakeServer* servers_[2] = {nullptr, nullptr};
  std::unique_ptr<Transport> mesh_;
};

// Any call that finds a server unreachable marks it gone, not only an
// execution: the calls that only tidy up skip it from then on instead of
// waiting on it, and a call it answers again marks it back.
TEST_F(MeshTransportTest, AServerAnyCallFindsUnreachableIsSkippedWhenTidyingUp) {
  auto kept = Send(0);
  auto lost = Send(1);
  ASSERT_TRUE(kept.ok() && lost.ok());
  servers_[1]->down = true;
  auto failed = Send(1);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("host1 (10.0.0.2:7000)"), std::string::npos)
      << failed.status();

  v1::ReleaseRequest release;
  release.add_buffer_handles(*kept);
  release.add_buffer_handles(*lost);
  auto released = mesh_->Release(release);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->released(), 1);
  EXPECT_TRUE(mesh_->KeepAlive(v1::KeepAliveRequest()).ok());
  EXPECT_EQ(servers_[0]->releases, 1);
  EXPECT_EQ(servers_[0]->keep_alives, 1);
  EXPECT_EQ(servers_[1]->releases, 0);
  EXPECT_EQ(servers_[1]->keep_alives, 0);

  // Back: the next call it answers brings it into the tidying up again.
  servers_[1]->down = false;
  auto again = Send(1);
  ASSERT_TRUE(again.ok()) << again.status();
  v1::ReleaseRequest second;
  second.add_buffer_handles(*again);
  ASSERT_TRUE(mesh_->Release(second).ok());
  EXPECT_EQ(servers_[1]->releases, 1);

  // Lost in a read this time: closing the session skips it.
  servers_[1]->down = true;
  v1::MemoryInfoRequest info;
  info.set_device("host1/cpu:0");
  EXPECT_EQ(mesh_->MemoryInfo(info).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(mesh_->CloseSession(v1::CloseSessionRequest()).ok());
  EXPECT_EQ(servers_[0]->closes, 1);
  EXPECT_EQ(servers_[1]->closes, 0);
}

// A group is not formed with a member found gone: the execution fails at
// once, naming it, without any member waiting for it.
TEST_F(MeshTransportTest, AGroupIsNotFormedWithAMemberFoundGone) {
  ASSERT_TRUE(RunOnBoth().ok());
  servers_[1]->down = true;
  EXPECT_EQ(RunOnBoth().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(servers_[0]->executes, 2);
  EXPECT_EQ(servers_[1]->executes, 2);
  servers_[1]->down = false;  // back, but nothing has reached it yet
  absl::Status run = RunOnBoth();
  EXPECT_EQ(run.code(), absl::StatusCode::kUnavailable) << run;
  EXPECT_NE(run.message().find("host1 (10.0.0.2:7000) was found unreachable"), std::string::npos)
      << run;
  EXPECT_EQ(servers_[0]->joins, 1);
  EXPECT_EQ(servers_[1]->joins, 1);
  // A call that reaches it marks it back, and the next run forms a group.
  ASSERT_TRUE(Send(1).ok());
  EXPECT_TRUE(RunOnBoth().ok());
  EXPECT_EQ(servers_[1]->joins, 2);
}

// Once one member's join fails, the others' are cancelled rather than left
// waiting for it until the group's timeout (here the fake's 20 s).
TEST_F(MeshTransportTest, AFailedJoinCancelsTheOtherMembersJoins) {
  servers_[0]->join_waits = true;
  servers_[1]->refuse_join = true;
  const absl::Time start = absl::Now();
  absl::Status run = RunOnBoth();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(run.code(), absl::StatusCode::kPermissionDenied) << run;
  EXPECT_NE(run.message().find("host1 (10.0.0.2:7000): not one of this server's peers"),
            std::string::npos)
      << run;
  EXPECT_NE(run.message().find("host0 (10.0.0.1:7000): its join was cancelled"),
            std::string::npos)
      << run;
  EXPECT_EQ(servers_[0]->joins, 1);
}

}  // namespace
}  // namespace kiln::client
