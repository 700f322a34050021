// Per-session limits: memory a session may hold (its buffers and its
// executions' temporaries) and executions it may run at once. One session at
// its limit does not starve the others.
#include <thread>

#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "gtest/gtest.h"
#include "server/service.h"

namespace kiln::server {
namespace {

class SessionLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServiceOptions options;
    options.backends = {{"cpu", 1, {{"memory_bytes", "1M"}}}};
    options.session_limits.memory_bytes = 4096;
    options.session_limits.executions = 1;
    options.session_limits.host_memory_bytes = 64;
    options.session_limits.all_sessions_host_memory_bytes = 100;
    service_ = *Service::Create(options);
  }
  std::string Open() {
    v1::HandshakeRequest req;
    req.set_min_version(1);
    req.set_max_version(1);
    req.set_client_name("test");
    return service_->Handshake(req)->session_id();
  }
  absl::StatusOr<std::string> Upload(const std::string& session, int64_t floats) {
    const ir::Shape shape(ir::ElementType::kF32, {floats});
    v1::TransferHeader h;
    h.set_session_id(session);
    h.set_device("cpu:0");
    ir::ShapeToProto(shape, h.mutable_shape());
    h.set_total_bytes(shape.ByteSize());
    bool sent = false;
    auto resp = service_->TransferToDevice(h, "", [&](std::string* data) -> absl::StatusOr<bool> {
      if (sent) return false;
      *data = std::string(shape.ByteSize(), '\0');
      sent = true;
      return true;
    });
    if (!resp.ok()) return resp.status();
    return resp->buffer_handle();
  }
  absl::StatusOr<v1::CompileResponse> Compile(const std::string& session,
                                              const std::string& text) {
    auto m = ir::ParseModule(text);
    if (!m.ok()) return m.status();
    v1::CompileRequest req;
    req.set_session_id(session);
    req.set_device("cpu:0");
    *req.mutable_module() = ir::ModuleToProto(**m);
    return service_->Compile(req);
  }
  int64_t Held(const std::string& session) {
    return (*service_->sessions().Get(session))->memory_account()->bytes_in_use();
  }
  int64_t HostHeld(const std::string& session) {
    return (*service_->sessions().Get(session))->host_account()->bytes_in_use();
  }
  Service::FeedEndpoint Feed(const std::string& session) {
    v1::FeedTarget target;
    target.set_session_id(session);
    target.set_device("cpu:0");
    return *service_->OpenFeed(target);
  }
  static ir::Literal Floats(int64_t n) {
    return ir::Literal::FromVector<float>(ir::ElementType::kF32, {n}, std::vector<float>(n, 1));
  }
  absl::StatusOr<v1::ExecuteResponse> Run(const std::string& session, const std::string& text,
                                          int64_t inline_max = 0,
                                          runtime::MemoryCharge* reply_charge = nullptr) {
    auto exe = Compile(session, text);
    if (!exe.ok()) return exe.status();
    v1::ExecuteRequest req;
    req.set_session_id(session);
    req.set_executable_handle(exe->executable_handle());
    req.set_inline_result_max_bytes(inline_max);
    return service_->Execute(req, nullptr, reply_charge);
  }

  std::unique_ptr<Service> service_;
};

TEST_F(SessionLimitsTest, TransfersPastTheQuotaAreRefusedAndOthersStillAllocate) {
  const std::string a = Open(), b = Open();
  ASSERT_TRUE(Upload(a, 768).ok());  // 3072 of 4096 bytes
  EXPECT_EQ(Held(a), 3072);
  absl::StatusOr<std::string> over = Upload(a, 512);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_NE(over.status().message().find("--session_memory_bytes"), std::string::npos)
      << over.status();
  EXPECT_EQ(Held(a), 3072);  // the refused transfer holds nothing
  // The device has room: another session is not starved by the first.
  EXPECT_TRUE(Upload(b, 768).ok());
  EXPECT_EQ(Held(b), 3072);
}

// The temporaries of an execution count too: x (1 KiB) is within the quota,
// but the program's 16 KiB intermediate is not.
TEST_F(SessionLimitsTest, AnExecutionsTemporariesAreChargedToItsSession) {
  const std::string a = Open();
  auto exe = Compile(a, R"(add { p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q) }
ENTRY e {
  x = f32[256] parameter(0)
  z = f32[] constant(0)
  b = f32[16,256] broadcast(x), dimensions={1}
  ROOT r = f32[256] reduce(b, z), dimensions={0}, to_apply=add
})");
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto x = Upload(a, 256);
  ASSERT_TRUE(x.ok()) << x.status();
  v1::ExecuteRequest req;
  req.set_session_id(a);
  req.set_executable_handle(exe->executable_handle());
  req.add_argument_handles(*x);
  absl::StatusOr<v1::ExecuteResponse> run = service_->Execute(req);
  ASSERT_EQ(run.status().code(), absl::StatusCode::kResourceExhausted) << run.status();
  EXPECT_NE(run.status().message().find("--session_memory_bytes"), std::string::npos)
      << run.status();
  EXPECT_EQ(Held(a), 1024);  // only x: the failed execution's memory is back
}

TEST_F(SessionLimitsTest, ResultsAreChargedAndReleasingThemUnchargesTheSession) {
  const std::string a = Open();
  auto exe = Compile(a, "ENTRY e {\n x = f32[256] parameter(0)\n ROOT n = f32[256] negate(x)\n}");
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto x = Upload(a, 256);
  ASSERT_TRUE(x.ok());
  v1::ExecuteRequest req;
  req.set_session_id(a);
  req.set_executable_handle(exe->executable_handle());
  req.add_argument_handles(*x);
  auto run = service_->Execute(req);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(Held(a), 2048);
  v1::ReleaseRequest release;
  release.set_session_id(a);
  release.add_buffer_handles(run->outputs(0).buffer_handle());
  release.add_buffer_handles(*x);
  ASSERT_TRUE(service_->Release(release).ok());
  EXPECT_EQ(Held(a), 0);
}

// An infeed loop that waits for data holds the session's one execution; a
// second is refused at once, naming the limit, while another session runs.
TEST_F(SessionLimitsTest, ExecutionsPastTheLimitAreRefused) {
  const std::string a = Open(), b = Open();
  constexpr char kWaitsForData[] = R"(ENTRY e {
  tok = token[] after-all()
  in = (f32[2], token[]) infeed(tok)
  ROOT v = f32[2] get-tuple-element(in), index=0
})";
  auto waits = Compile(a, kWaitsForData);
  ASSERT_TRUE(waits.ok()) << waits.status();
  v1::ExecuteRequest req;
  req.set_session_id(a);
  req.set_executable_handle(waits->executable_handle());
  req.set_infeed_timeout_millis(60000);
  absl::Status first;
  std::thread runner([&] { first = service_->Execute(req).status(); });
  auto session = service_->sessions().Get(a);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Feeds("cpu:0")->infeed.AwaitWaitingPops(1, absl::Seconds(60)));
  absl::Status second = service_->Execute(req).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted) << second;
  EXPECT_NE(second.message().find("--session_executions"), std::string::npos) << second;
  // Another session runs meanwhile.
  auto other = Compile(b, kWaitsForData);
  ASSERT_TRUE(other.ok());
  v1::FeedTarget target;
  target.set_session_id(b);
  target.set_device("cpu:0");
  auto feed = service_->OpenFeed(target);
  ASSERT_TRUE(feed.ok());
  ASSERT_TRUE(service_->Infeed(*feed, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}), nullptr).ok());
  v1::ExecuteRequest other_req = req;
  other_req.set_session_id(b);
  other_req.set_executable_handle(other->executable_handle());
  EXPECT_TRUE(service_->Execute(other_req).ok());
  // Closing the first session ends its waiting execution.
  v1::CloseSessionRequest close;
  close.set_session_id(a);
  ASSERT_TRUE(service_->CloseSession(close).ok());
  runner.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kCancelled) << first;
}

// Values waiting in a session's infeed are its host memory: charged while
// queued, refused past the session's quota and past the quota of all
// sessions together, each naming its flag, and given back when the session
// ends.
TEST_F(SessionLimitsTest, QueuedInfeedValuesAreChargedToTheSessionsHostMemory) {
  const std::string a = Open(), b = Open();
  const Service::FeedEndpoint fa = Feed(a), fb = Feed(b);
  ASSERT_TRUE(service_->Infeed(fa, Floats(8), nullptr).ok());
  ASSERT_TRUE(service_->Infeed(fa, Floats(8), nullptr).ok());
  EXPECT_EQ(HostHeld(a), 64);
  absl::Status over = service_->Infeed(fa, Floats(1), nullptr);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_NE(over.message().find("--session_host_memory_bytes"), std::string::npos) << over;
  EXPECT_EQ(fa.queues->infeed.size(), 2u);  // what was queued stays
  ASSERT_TRUE(service_->Infeed(fb, Floats(8), nullptr).ok());
  absl::Status all = service_->Infeed(fb, Floats(4), nullptr);
  EXPECT_EQ(all.code(), absl::StatusCode::kResourceExhausted) << all;
  EXPECT_NE(all.message().find("--host_memory_bytes"), std::string::npos) << all;
  EXPECT_EQ(HostHeld(b), 32);
  EXPECT_EQ(service_->sessions().host_memory().bytes_in_use(), 96);
  // A program that takes a value gives its charge back.
  ASSERT_TRUE(Run(a, R"(ENTRY e {
  tok = token[] after-all()
  in = (f32[8], token[]) infeed(tok)
  ROOT v = f32[8] get-tuple-element(in), index=0
})").ok());
  EXPECT_EQ(HostHeld(a), 32);
  v1::CloseSessionRequest close;
  close.set_session_id(a);
  ASSERT_TRUE(service_->CloseSession(close).ok());
  EXPECT_EQ(service_->sessions().host_memory().bytes_in_use(), 32);
}

// What a program writes to its outfeed waits there as the session's host
// memory; past the quota the program fails naming it.
TEST_F(SessionLimitsTest, OutfeedValuesAreChargedUntilRead) {
  const std::string a = Open();
  constexpr char kWrites[] = R"(ENTRY e {
  x = f32[] constant(1)
  v = f32[SIZE] broadcast(x), dimensions={}
  t = token[] after-all()
  ROOT o = token[] outfeed(v, t)
})";
  auto program = [&](int n) {
    std::string text = kWrites;
    text.replace(text.find("SIZE"), 4, std::to_string(n));
    return text;
  };
  ASSERT_TRUE(Run(a, program(8)).ok());
  EXPECT_EQ(HostHeld(a), 32);
  absl::Status over = Run(a, program(16)).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_NE(over.message().find("--session_host_memory_bytes"), std::string::npos) << over;
  // The reader takes the charge over while it sends the value.
  runtime::MemoryCharge sending;
  auto value = service_->Outfeed(Feed(a), absl::Seconds(10), nullptr, &sending);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->shape().ByteSize(), 32);
  EXPECT_EQ(HostHeld(a), 32);
  sending.Reset();
  EXPECT_EQ(HostHeld(a), 0);
}

// An inline result is a copy in the reply, charged until the reply is sent;
// one that would pass the quota stays on the device, reachable by handle.
TEST_F(SessionLimitsTest, InlineResultsPastTheHostQuotaStayOnTheDevice) {
  const std::string a = Open();
  constexpr char kTwo[] = R"(ENTRY e {
  x = f32[] constant(2)
  s = f32[8] broadcast(x), dimensions={}
  l = f32[32] broadcast(x), dimensions={}
  ROOT t = (f32[8], f32[32]) tuple(s, l)
})";
  runtime::MemoryCharge reply;
  auto run = Run(a, kTwo, /*inline_max=*/1024, &reply);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->outputs_size(), 2);
  EXPECT_TRUE(run->outputs(0).has_inline_value());
  EXPECT_FALSE(run->outputs(1).has_inline_value());
  EXPECT_FALSE(run->outputs(1).buffer_handle().empty());
  EXPECT_EQ(HostHeld(a), 32);
  reply.Reset();
  EXPECT_EQ(HostHeld(a), 0);
}

}  // namespace
}  // namespace kiln::server
