// The service logic in-process (no sockets): sessions, transfers, compile,
// execute and their errors.
#include "server/service.h"

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"

namespace kiln::server {
namespace {

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServiceOptions options;
    options.backends = {{"cpu", 1, {{"memory_bytes", "1M"}}}};
    options.lease = absl::Seconds(2);
    options.sequence_patience = absl::Milliseconds(300);
    service_ = *Service::Create(options);
    session_ = Open();
  }
  // The feeds of `session` on cpu:0.
  static v1::FeedTarget FeedOf(const std::string& session) {
    v1::FeedTarget target;
    target.set_session_id(session);
    target.set_device("cpu:0");
    return target;
  }
  std::string Open() {
    v1::HandshakeRequest req;
    req.set_min_version(1);
    req.set_max_version(1);
    req.set_client_name("test");
    return service_->Handshake(req)->session_id();
  }
  absl::StatusOr<std::string> Upload(const std::string& session, const ir::Literal& lit,
                                     std::vector<std::string> chunks = {}) {
    v1::TransferHeader h;
    h.set_session_id(session);
    h.set_device("cpu:0");
    ir::ShapeToProto(lit.shape(), h.mutable_shape());
    h.set_total_bytes(lit.shape().ByteSize());
    if (chunks.empty()) chunks.push_back(std::string(lit.bytes().begin(), lit.bytes().end()));
    size_t i = 0;
    auto resp = service_->TransferToDevice(h, "", [&](std::string* data) -> absl::StatusOr<bool> {
      if (i == chunks.size()) return false;
      *data = chunks[i++];
      return true;
    });
    if (!resp.ok()) return resp.status();
    return resp->buffer_handle();
  }
  absl::StatusOr<std::string> Download(const std::string& session, const std::string& handle) {
    v1::TransferFromDeviceRequest req;
    req.set_session_id(session);
    req.set_buffer_handle(handle);
    req.set_chunk_bytes(3);
    std::string bytes;
    absl::Status st = service_->TransferFromDevice(req, [&](const v1::TransferFromDeviceChunk& c) {
      bytes += c.data();
      return true;
    });
    if (!st.ok()) return st;
    return bytes;
  }
  absl::StatusOr<v1::CompileResponse> CompileText(const std::string& text) {
    auto m = ir::ParseModule(text);
    EXPECT_TRUE(m.ok()) << m.status();
    v1::CompileRequest req;
    req.set_session_id(session_);
    req.set_device("cpu:0");
    *req.mutable_module() = ir::ModuleToProto(**m);
    return service_->Compile(req);
  }
  int64_t BytesInUse() {
    v1::MemoryInfoRequest req;
    req.set_session_id(session_);
    req.set_device("cpu:0");
    return service_->MemoryInfo(req)->bytes_in_use();
  }

  std::unique_ptr<Service> service_;
  std::string session_;
};

constexpr char kNegate[] = "ENTRY e {\n x = f32[3] parameter(0)\n ROOT n = f32[3] negate(x)\n}";

// A service with the devices `devices` names and one open session, for
// tests that need other devices than ServiceTest's.
struct OpenService {
  explicit OpenService(const std::string& devices) {
    ServiceOptions options;
    options.backends = *runtime::ParseBackendSpecs(devices, "");
    service = *Service::Create(options);
    v1::HandshakeRequest hello;
    hello.set_min_version(1);
    hello.set_max_version(3);
    session = service->Handshake(hello)->session_id();
  }
  // The buffer handle, or "" (with a test failure) when refused.
  std::string Upload(const ir::Literal& x, const std::string& device) {
    v1::TransferHeader h;
    h.set_session_id(session);
    h.set_device(device);
    ir::ShapeToProto(x.shape(), h.mutable_shape());
    h.set_total_bytes(x.shape().ByteSize());
    bool sent = false;
    auto resp = service->TransferToDevice(h, "", [&](std::string* data) -> absl::StatusOr<bool> {
      if (sent) return false;
      *data = std::string(x.bytes().begin(), x.bytes().end());
      sent = true;
      return true;
    });
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->buffer_handle() : "";
  }
  absl::StatusOr<v1::CompileResponse> Compile(const std::string& text, const std::string& device) {
    auto m = ir::ParseModule(text);
    if (!m.ok()) return m.status();
    v1::CompileRequest req;
    req.set_session_id(session);
    req.set_device(device);
    *req.mutable_module() = ir::ModuleToProto(**m);
    return service->Compile(req);
  }

  std::unique_ptr<Service> service;
  std::string session;
};


// The compile cache key, part by part: the module's exact content, the
// backend kind (never the device), and the compile options.
TEST(ServiceCacheKeyTest, EachPartOfTheKeySeparatesEntries) {
  OpenService open("cpu:2,tpu:1");
  Service* service = open.service.get();
  const std::string& session = open.session;
  auto compile = [&](const std::string& text, const std::string& device, uint64_t seed) {
    auto m = ir::ParseModule(text);
    EXPECT_TRUE(m.ok()) << m.status();
    v1::CompileRequest req;
    req.set_session_id(session);
    req.set_device(device);
    req.mutable_options()->set_rng_seed(seed);
    *req.mutable_module() = ir::ModuleToProto(**m);
    auto resp = service->Compile(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() && resp->cache_hit();
  };
  constexpr char kScale[] = "ENTRY e {\n x = f32[3] parameter(0)\n c = f32[] constant(0.1)\n"
                            " b = f32[3] broadcast(c), dimensions={}\n ROOT m = f32[3] multiply(x, b)\n}";
  EXPECT_FALSE(compile(kScale, "cpu:0", 0));
  EXPECT_TRUE(compile(kScale, "cpu:0", 0));
  // Another device of the same backend shares the entry.
  EXPECT_TRUE(compile(kScale, "cpu:1", 0));
  // Another backend kind does not.
  EXPECT_FALSE(compile(kScale, "tpu:0", 0));
  EXPECT_TRUE(compile(kScale, "tpu:0", 0));
  // Nor do other compile options.
  EXPECT_FALSE(compile(kScale, "cpu:0", 7));
  EXPECT_TRUE(compile(kScale, "cpu:1", 7));
  // A constant that differs in its last bit is another program
  // (0.1f is 0x3dcccccd; 0.100000009f is 0x3dccccce).
  constexpr char kNext[] = "ENTRY e {\n x = f32[3] parameter(0)\n c = f32[] constant(0.100000009)\n"
                           " b = f32[3] broadcast(c), dimensions={}\n ROOT m = f32[3] multiply(x, b)\n}";
  EXPECT_FALSE(compile(kNext, "cpu:0", 0));
  // So is a constant of another sign of zero.
  constexpr char kZero[] = "ENTRY e {\n ROOT c = f32[] constant(0)\n}";
  constexpr char kNegZero[] = "ENTRY e {\n ROOT c = f32[] constant(-0)\n}";
  EXPECT_FALSE(compile(kZero, "cpu:0", 0));
  EXPECT_FALSE(compile(kNegZero, "cpu:0", 0));
  // NaNs that differ only in their payload bits print alike but are
  // different programs.
  auto nan_module = [&](uint32_t bits) {
    auto m = ir::ParseModule("ENTRY e {\n ROOT c = f32[] constant(nan)\n}");
    EXPECT_TRUE(m.ok());
    std::memcpy((*m)->entry()->root()->mutable_attrs().literal.mutable_bytes().data(), &bits, 4);
    v1::CompileRequest req;
    req.set_session_id(session);
    req.set_device("cpu:0");
    *req.mutable_module() = ir::ModuleToProto(**m);
    auto resp = service->Compile(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() && resp->cache_hit();
  };
  EXPECT_FALSE(nan_module(0x7fc00000u));
  EXPECT_FALSE(nan_module(0x7fc00001u));
  EXPECT_TRUE(nan_module(0x7fc00001u));
  // Names and metadata are not part of the program.
  constexpr char kRenamed[] = "ENTRY main {\n y = f32[3] parameter(0)\n k = f32[] constant(0.1)\n"
                              " bb = f32[3] broadcast(k), dimensions={}\n ROOT out = f32[3] multiply(y, bb)\n}";
  EXPECT_TRUE(compile(kRenamed, "cpu:1", 0));
}

// The CPU and null backends both have an empty config key: only the kind
// in the key keeps the CPU's executable from being handed to a null device.
TEST(ServiceCacheKeyTest, BackendsWithTheSameConfigKeyKeepSeparateEntries) {
  OpenService open("cpu:1,null:1");
  auto on_cpu = open.Compile(kNegate, "cpu:0");
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_FALSE(on_cpu->cache_hit());
  auto on_null = open.Compile(kNegate, "null:0");
  EXPECT_EQ(on_null.status().code(), absl::StatusCode::kUnimplemented) << on_null.status();
}

TEST_F(ServiceTest, ClientNamesAreEscapedAndBounded) {
  v1::HandshakeRequest req;
  req.set_min_version(1);
  req.set_max_version(1);
  req.set_client_name("trainer\n[2026-01-01] [kiln] [info] forged line\x1b[31m" +
                      std::string(1000, 'x'));
  auto hello = service_->Handshake(req);
  ASSERT_TRUE(hello.ok());
  auto session = service_->sessions().Get(hello->session_id());
  ASSERT_TRUE(session.ok());
  const std::string& name = (*session)->client_name();
  EXPECT_EQ(name.find('\n'), std::string::npos) << name;
  EXPECT_EQ(name.find('\x1b'), std::string::npos) << name;
  EXPECT_EQ(name.rfind("trainer\\n[2026-01-01]", 0), 0u) << name;
  EXPECT_LT(name.size(), 200u);
  EXPECT_EQ(SafeClientName("plain-name_1"), "plain-name_1");
}

TEST_F(ServiceTest, PollingAFeedTokenDoesNotKeepItsSessionAlive) {
  v1::CreateFeedTokenRequest create;
  create.set_session_id(session_);
  create.set_device("cpu:0");
  auto token = service_->CreateFeedToken(create);
  ASSERT_TRUE(token.ok());
  v1::FeedTarget target;
  target.set_feed_token(token->feed_token());
  // The owner goes silent; a producer keeps opening its feed. The lease
  // (2 s) must still run out.
  absl::Status opened;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(20)) {
    opened = service_->OpenFeed(target).status();
    if (!opened.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(opened.code(), absl::StatusCode::kPermissionDenied) << opened;
  EXPECT_NE(opened.message().find("has ended"), std::string::npos) << opened;
}

TEST_F(ServiceTest, VersionMismatchNamesBothRanges) {
  v1::HandshakeRequest req;
  req.set_min_version(7);
  req.set_max_version(8);
  auto r = service_->Handshake(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("client speaks 7..8"), std::string::npos);
  EXPECT_NE(r.status().message().find("server speaks 1..6"), std::string::npos);
}

TEST_F(ServiceTest, TransferRoundTripInChunks) {
  ir::Literal lit = ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3});
  std::string bytes(lit.bytes().begin(), lit.bytes().end());
  auto h = Upload(session_, lit, {bytes.substr(0, 5), bytes.substr(5)});
  ASSERT_TRUE(h.ok()) << h.status();
  auto back = Download(session_, *h);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
}

// A pred transfer may carry any byte; the device keeps 0 or 1 (reading
// another byte as a bool is undefined).
TEST_F(ServiceTest, PredBytesArriveAsZeroOrOne) {
  ir::Literal lit(ir::Shape(ir::ElementType::kPred, {4}));
  auto h = Upload(session_, lit, {std::string("\x00\x07", 2), std::string("\x01\xff", 2)});
  ASSERT_TRUE(h.ok()) << h.status();
  auto back = Download(session_, *h);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, std::string("\x00\x01\x01\x01", 4));
}

TEST_F(ServiceTest, TruncatedOversizedAndTooBigTransfersAreRefused) {
  ir::Literal lit = ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3});
  std::string bytes(lit.bytes().begin(), lit.bytes().end());
  auto truncated = Upload(session_, lit, {bytes.substr(0, 8)});
  EXPECT_NE(truncated.status().message().find("truncated transfer: received 8 of 12"),
            std::string::npos) << truncated.status();
  auto oversized = Upload(session_, lit, {bytes, "xx"});
  EXPECT_NE(oversized.status().message().find("more than the declared 12"), std::string::npos);
  ir::Literal big(ir::Shape(ir::ElementType::kF32, {1 << 20}));  // 4 MiB > 1 MiB
  auto too_big = Upload(session_, big, {"never read"});
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(BytesInUse(), 0);
}

TEST_F(ServiceTest, SessionsAreIsolated) {
  auto h = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {1}, {5}));
  ASSERT_TRUE(h.ok());
  std::string other = Open();
  auto read = Download(other, *h);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  v1::ReleaseRequest rel;
  rel.set_session_id(other);
  rel.add_buffer_handles(*h);
  EXPECT_EQ(service_->Release(rel).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Download(session_, *h).ok());  // still there for its owner
}

TEST_F(ServiceTest, CompileHitExecuteInlineDonateAndRelease) {
  auto first = CompileText(kNegate);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cache_hit());
  auto second = CompileText(kNegate);
  EXPECT_TRUE(second->cache_hit());
  EXPECT_EQ(second->fingerprint(), first->fingerprint());
  auto h = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  v1::ExecuteRequest ex;
  ex.set_session_id(session_);
  ex.set_executable_handle(first->executable_handle());
  ex.add_argument_handles(*h);
  ex.set_inline_result_max_bytes(64);
  ex.add_donated_arguments(0);
  auto r = service_->Execute(ex);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs_size(), 1);
  ASSERT_TRUE(r->outputs(0).has_inline_value());
  auto value = ir::LiteralFromProto(r->outputs(0).inline_value());
  EXPECT_EQ(value->data<float>()[2], -3.0f);
  // The donated argument is gone; the result is the only live buffer.
  EXPECT_EQ(Download(session_, *h).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(BytesInUse(), 12);
  v1::ReleaseRequest rel;
  rel.set_session_id(session_);
  rel.add_buffer_handles(r->outputs(0).buffer_handle());
  rel.add_executable_handles(first->executable_handle());
  EXPECT_EQ(service_->Release(rel)->released(), 2);
  EXPECT_EQ(BytesInUse(), 0);
  // Executing a released executable is NOT_FOUND.
  EXPECT_EQ(service_->Execute(ex).status().code(), absl::StatusCode::kNotFound);
}

// Protocol 4: an argument sent with the call runs like an uploaded one; the
// server keeps it as a buffer of the session (charged, with a handle the
// next call can use) unless it is donated.
TEST_F(ServiceTest, InlineArgumentsAreKeptUnlessDonated) {
  auto exe = CompileText(kNegate);
  ASSERT_TRUE(exe.ok()) << exe.status();
  const ir::Literal x = ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3});
  v1::ExecuteRequest ex;
  ex.set_session_id(session_);
  ex.set_executable_handle(exe->executable_handle());
  ex.add_argument_handles("");
  v1::InlineArgument* a = ex.add_inline_arguments();
  a->set_index(0);
  ir::LiteralToProto(x, a->mutable_value());
  ex.set_inline_result_max_bytes(64);
  auto r = service_->Execute(ex);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ir::LiteralFromProto(r->outputs(0).inline_value())->data<float>()[2], -3.0f);
  ASSERT_EQ(r->inline_argument_handles_size(), 1);
  const std::string kept = r->inline_argument_handles(0);
  ASSERT_FALSE(kept.empty());
  // The argument (12 bytes) and the result (12 bytes) are the session's.
  EXPECT_EQ(BytesInUse(), 24);
  EXPECT_EQ(Download(session_, kept).value(), std::string(x.bytes().begin(), x.bytes().end()));
  // The kept buffer is an argument like any other.
  v1::ExecuteRequest again;
  again.set_session_id(session_);
  again.set_executable_handle(exe->executable_handle());
  again.add_argument_handles(kept);
  ASSERT_TRUE(service_->Execute(again).ok());
  // Donated: run, then gone (nothing kept beyond the results).
  ex.add_donated_arguments(0);
  auto donated = service_->Execute(ex);
  ASSERT_TRUE(donated.ok()) << donated.status();
  ASSERT_EQ(donated->inline_argument_handles_size(), 1);
  EXPECT_TRUE(donated->inline_argument_handles(0).empty());
  EXPECT_EQ(BytesInUse(), 12 * 4);  // kept, and three results
}

TEST_F(ServiceTest, MalformedInlineArgumentsAreRefusedBeforeAnythingRuns) {
  auto exe = CompileText(kNegate);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto handle = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  ASSERT_TRUE(handle.ok());
  auto request = [&](int index, const ir::Literal& value, const std::string& slot) {
    v1::ExecuteRequest ex;
    ex.set_session_id(session_);
    ex.set_executable_handle(exe->executable_handle());
    ex.add_argument_handles(slot);
    v1::InlineArgument* a = ex.add_inline_arguments();
    a->set_index(index);
    ir::LiteralToProto(value, a->mutable_value());
    return ex;
  };
  const ir::Literal good = ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3});
  const ir::Literal wrong = ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2});
  auto out_of_range = service_->Execute(request(1, good, ""));
  EXPECT_NE(out_of_range.status().message().find("index 1 out of range"), std::string::npos) << out_of_range.status();
  auto shape = service_->Execute(request(0, wrong, ""));
  EXPECT_NE(shape.status().message().find("expects f32[3]"), std::string::npos) << shape.status();
  auto both = service_->Execute(request(0, good, *handle));
  EXPECT_NE(both.status().message().find("both a handle and an inline value"), std::string::npos) << both.status();
  v1::ExecuteRequest twice = request(0, good, "");
  *twice.add_inline_arguments() = twice.inline_arguments(0);
  EXPECT_NE(service_->Execute(twice).status().message().find("sent inline twice"),
            std::string::npos);
  v1::ExecuteRequest bytes = request(0, good, "");
  bytes.mutable_inline_arguments(0)->mutable_value()->mutable_data()->resize(5);
  EXPECT_EQ(service_->Execute(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ExecuteRequest missing = request(0, good, "");
  missing.clear_inline_arguments();
  EXPECT_FALSE(service_->Execute(missing).ok());
  // Only the uploaded buffer is charged: nothing was allocated or kept.
  EXPECT_EQ(BytesInUse(), 12);
}

// The compile cache counts each program's canonical module and its
// constants against --compile_cache_bytes and evicts to stay within it.
TEST(CompileCacheBytesTest, ConstantsCountAgainstTheCacheBudget) {
  ServiceOptions options;
  options.backends = {{"cpu", 1, {{"memory_bytes", "1M"}}}};
  options.compile_cache_bytes = 200 << 10;
  auto service = *Service::Create(options);
  v1::HandshakeRequest hello;
  hello.set_min_version(1);
  hello.set_max_version(4);
  const std::string session = service->Handshake(hello)->session_id();
  auto cache_bytes = [&] {
    const v1::MetricsResponse metrics = service->GetMetrics();
    for (const auto& c : metrics.counters()) {
      if (c.name() == "compile_cache_bytes") return c.value();
    }
    return int64_t{-1};
  };
  auto compile = [&](int k) {
    // A constant of 16,384 floats (64 KiB), different in each program.
    std::string values;
    for (int i = 0; i < 16384; ++i) absl::StrAppend(&values, i == 0 ? "" : ",", i == 0 ? k : 0);
    auto module = ir::ParseModule(absl::StrCat(
        "ENTRY e {\n x = f32[16384] parameter(0)\n c = f32[16384] constant({", values,
        "})\n ROOT a = f32[16384] add(x, c)\n}"));
    EXPECT_TRUE(module.ok()) << module.status();
    v1::CompileRequest req;
    req.set_session_id(session);
    req.set_device("cpu:0");
    *req.mutable_module() = ir::ModuleToProto(**module);
    return service->Compile(req);
  };
  auto first = compile(1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GE(cache_bytes(), 16384 * 4);
  EXPECT_LE(cache_bytes(), 200 << 10);
  // A second such program does not fit beside the first: the first goes.
  ASSERT_TRUE(compile(2).ok());
  EXPECT_LE(cache_bytes(), 200 << 10);
  EXPECT_TRUE(compile(2)->cache_hit());
  EXPECT_FALSE(compile(1)->cache_hit());
}

TEST_F(ServiceTest, BadExecuteArgumentsAndModules) {
  auto exe = CompileText(kNegate);
  ASSERT_TRUE(exe.ok());
  auto wrong = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}));
  v1::ExecuteRequest ex;
  ex.set_session_id(session_);
  ex.set_executable_handle(exe->executable_handle());
  auto none = service_->Execute(ex);
  EXPECT_NE(none.status().message().find("takes 1 arguments, got 0"), std::string::npos);
  ex.add_argument_handles(*wrong);
  auto shape = service_->Execute(ex);
  EXPECT_NE(shape.status().message().find("expects f32[3]"), std::string::npos) << shape.status();
  ex.set_argument_handles(0, "b-0000");
  EXPECT_EQ(service_->Execute(ex).status().code(), absl::StatusCode::kNotFound);
  v1::CompileRequest bad;
  bad.set_session_id(session_);
  bad.set_device("cpu:0");
  bad.mutable_module()->add_computations()->set_name("x");
  auto c = service_->Compile(bad);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  bad.set_device("tpu:9");
  EXPECT_NE(service_->Compile(bad).status().message().find("unknown device 'tpu:9'"),
            std::string::npos);
}

TEST_F(ServiceTest, MemoryInfoKeepsThePeakAfterRelease) {
  auto a = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  auto b = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}));
  ASSERT_TRUE(a.ok() && b.ok());
  v1::ReleaseRequest rel;
  rel.set_session_id(session_);
  rel.add_buffer_handles(*a);
  ASSERT_TRUE(service_->Release(rel).ok());
  // An allocation after the release stays below the peak.
  ASSERT_TRUE(Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {1}, {1})).ok());
  v1::MemoryInfoRequest req;
  req.set_session_id(session_);
  req.set_device("cpu:0");
  auto info = service_->MemoryInfo(req);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->bytes_in_use(), 12);
  EXPECT_EQ(info->peak_bytes_in_use(), 20);
  EXPECT_EQ(info->live_buffers(), 2);
}

// A feed queue holds at most feed_queue_capacity values: the next push
// waits (here until its caller gives up) and adds nothing.
TEST(ServiceFeedTest, InfeedHoldsAtMostTheQueueCapacity) {
  ServiceOptions options;
  options.backends = {{"cpu", 1, {}}};
  options.feed_queue_capacity = 2;
  auto service = *Service::Create(options);
  v1::HandshakeRequest hello;
  hello.set_min_version(1);
  hello.set_max_version(3);
  v1::FeedTarget target;
  target.set_session_id(service->Handshake(hello)->session_id());
  target.set_device("cpu:0");
  auto feed = service->OpenFeed(target);
  ASSERT_TRUE(feed.ok()) << feed.status();
  auto value = [] { return ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}); };
  ASSERT_TRUE(service->Infeed(*feed, value(), nullptr).ok());
  ASSERT_TRUE(service->Infeed(*feed, value(), nullptr).ok());
  const absl::Time give_up = absl::Now() + absl::Milliseconds(200);
  EXPECT_FALSE(service->Infeed(*feed, value(), [&] { return absl::Now() > give_up; }).ok());
  EXPECT_EQ(feed->queues->infeed.size(), 2u);
}

// The service checks arguments before it takes donated buffers: a refused
// execution leaves the caller's buffers alone.
TEST_F(ServiceTest, RefusedExecutionKeepsDonatedArguments) {
  auto exe = CompileText(kNegate);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto wrong = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  v1::ExecuteRequest ex;
  ex.set_session_id(session_);
  ex.set_executable_handle(exe->executable_handle());
  ex.add_argument_handles(*wrong);
  ex.add_donated_arguments(0);
  auto shape = service_->Execute(ex);
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("expects f32[3]"), std::string::npos) << shape.status();
  EXPECT_TRUE(Download(session_, *wrong).ok());
  // Too few arguments with a donation, and a donated index past the end.
  ex.clear_argument_handles();
  auto none = service_->Execute(ex);
  EXPECT_NE(none.status().message().find("takes 1 arguments, got 0"), std::string::npos)
      << none.status();
  auto right = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  ASSERT_TRUE(right.ok()) << right.status();
  ex.add_argument_handles(*right);
  ex.set_donated_arguments(0, 1);
  auto past = service_->Execute(ex);
  EXPECT_NE(past.status().message().find("donated argument 1 out of range"), std::string::npos)
      << past.status();
  EXPECT_TRUE(Download(session_, *right).ok());
}

// A buffer stays on the device it was sent to: running a program on another
// device of the same kind needs an explicit copy.
TEST(ServiceDeviceTest, ArgumentsOnAnotherDeviceAreRefused) {
  OpenService open("cpu:2");
  const ir::Literal x = ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3});
  const std::string on_cpu1 = open.Upload(x, "cpu:1");
  auto exe = open.Compile(kNegate, "cpu:0");
  ASSERT_TRUE(exe.ok()) << exe.status();
  v1::ExecuteRequest ex;
  ex.set_session_id(open.session);
  ex.set_executable_handle(exe->executable_handle());
  ex.add_argument_handles(on_cpu1);
  auto run = open.service->Execute(ex);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("lives on cpu:1 but the program runs on cpu:0"),
            std::string::npos)
      << run.status();
}

// A replica on a device of another kind is refused before any donated
// buffer is taken.
TEST(ServiceDeviceTest, ReplicaOfAnotherKindIsRefusedKeepingDonations) {
  OpenService open("cpu:1,tpu:1");
  const ir::Literal x = ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3});
  const std::string on_cpu = open.Upload(x, "cpu:0");
  const std::string on_tpu = open.Upload(x, "tpu:0");
  auto exe = open.Compile(kNegate, "cpu:0");
  ASSERT_TRUE(exe.ok()) << exe.status();
  v1::ExecuteRequest ex;
  ex.set_session_id(open.session);
  ex.set_executable_handle(exe->executable_handle());
  auto* first = ex.add_replicas();
  first->set_device("cpu:0");
  first->add_argument_handles(on_cpu);
  auto* second = ex.add_replicas();
  second->set_device("tpu:0");
  second->add_argument_handles(on_tpu);
  ex.add_donated_arguments(0);
  auto run = open.service->Execute(ex);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find(
                "replica 1 is on tpu:0 but the program was compiled for cpu devices"),
            std::string::npos)
      << run.status();
  v1::ReleaseRequest rel;
  rel.set_session_id(open.session);
  rel.add_buffer_handles(on_cpu);
  rel.add_buffer_handles(on_tpu);
  auto released = open.service->Release(rel);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->released(), 2);
}

TEST_F(ServiceTest, ExpiredLeaseFreesMemory) {
  auto h = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {100}, {}));
  ASSERT_TRUE(h.ok());
  const std::string keeper = Open();
  v1::MemoryInfoRequest mi;
  mi.set_session_id(keeper);
  mi.set_device("cpu:0");
  EXPECT_EQ(service_->MemoryInfo(mi)->bytes_in_use(), 400);
  // Keep `keeper` alive while `session_` goes silent past its lease.
  for (int i = 0; i < 120 && service_->MemoryInfo(mi)->bytes_in_use() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(service_->MemoryInfo(mi)->bytes_in_use(), 0);
  EXPECT_EQ(Download(session_, *h).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

// An infeed loop that never gets data: closing its session stops it, and
// feeds of sessions sharing the device stay apart.
constexpr char kStarvedLoop[] = R"(
cond {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(1000000)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  tok = token[] after-all()
  in = (f32[2], token[]) infeed(tok)
  v = f32[2] get-tuple-element(in), index=0
  ROOT t = (s32[], f32[2]) tuple(j, v)
}
ENTRY e {
  z = s32[] constant(0)
  x = f32[2] parameter(0)
  init = (s32[], f32[2]) tuple(z, x)
  ROOT w = (s32[], f32[2]) while(init), condition=cond, body=body
}
)";

TEST_F(ServiceTest, ClosingTheSessionStopsItsRunningLoop) {
  auto exe = CompileText(kStarvedLoop);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto x = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}));
  ASSERT_TRUE(x.ok());
  v1::ExecuteRequest req;
  req.set_session_id(session_);
  req.set_executable_handle(exe->executable_handle());
  req.add_argument_handles(*x);
  req.set_infeed_timeout_millis(60000);
  absl::Status result;
  std::thread runner([&]() { result = service_->Execute(req).status(); });
  // Another session's value does not reach this session's program.
  const std::string other = Open();
  auto feed = service_->OpenFeed(FeedOf(other));
  ASSERT_TRUE(feed.ok());
  ASSERT_TRUE(service_->Infeed(*feed, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {5, 5}), nullptr).ok());
  // Close only once the program waits on its (empty) infeed.
  auto session = service_->sessions().Get(session_);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Feeds("cpu:0")->infeed.AwaitWaitingPops(1, absl::Seconds(60)))
      << "the loop never reached its infeed";
  v1::CloseSessionRequest close;
  close.set_session_id(session_);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(service_->CloseSession(close).ok());
  runner.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(feed->queues->infeed.size(), 1u);
}

// An infeed of f32[2] per iteration, echoed to the outfeed.
std::string EchoLoop(int iterations) {
  return absl::StrCat(R"(
cond {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant()", iterations, R"()
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  tok = token[] after-all()
  in = (f32[2], token[]) infeed(tok)
  v = f32[2] get-tuple-element(in), index=0
  t = token[] get-tuple-element(in), index=1
  out = token[] outfeed(v, t)
  ROOT next = (s32[]) tuple(j)
}
ENTRY e {
  z = s32[] constant(0)
  init = (s32[]) tuple(z)
  ROOT w = (s32[]) while(init), condition=cond, body=body
}
)");
}

// A program that fails tells its producers and outfeed readers why, instead
// of leaving them waiting; feeds opened afterwards work as before.
TEST_F(ServiceTest, AFailedProgramFailsItsFeedsWithItsError) {
  auto exe = CompileText(EchoLoop(3));
  ASSERT_TRUE(exe.ok()) << exe.status();
  const v1::FeedTarget target = FeedOf(session_);
  auto feed = service_->OpenFeed(target);
  ASSERT_TRUE(feed.ok());
  auto f32 = [](std::vector<float> v) {
    return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
  };
  ASSERT_TRUE(service_->Infeed(*feed, f32({1, 2}), nullptr).ok());
  ASSERT_TRUE(service_->Infeed(*feed, f32({1, 2, 3}), nullptr).ok());  // wrong shape
  v1::ExecuteRequest req;
  req.set_session_id(session_);
  req.set_executable_handle(exe->executable_handle());
  auto failed = service_->Execute(req);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << failed.status();
  // The reader gets what the program wrote, then the program's error at
  // once (it would otherwise wait for ever).
  auto first = service_->Outfeed(*feed, absl::InfiniteDuration(), nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->data<float>()[1], 2.0f);
  auto after = service_->Outfeed(*feed, absl::InfiniteDuration(), nullptr);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(after.status().message().find("the program on cpu:0 failed"), std::string::npos)
      << after.status();
  // The producer's next value is refused with the same reason.
  absl::Status refused = service_->Infeed(*feed, f32({5, 6}), nullptr);
  EXPECT_NE(refused.message().find("the program on cpu:0 failed"), std::string::npos) << refused;

  // Feeds opened afterwards serve the next program as usual.
  auto fresh = service_->OpenFeed(target);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(service_->Infeed(*fresh, f32({7, 8}), nullptr).ok());
  auto one = CompileText(EchoLoop(1));
  ASSERT_TRUE(one.ok());
  req.set_executable_handle(one->executable_handle());
  auto ran = service_->Execute(req);
  ASSERT_TRUE(ran.ok()) << ran.status();
  auto echoed = service_->Outfeed(*fresh, absl::Seconds(30), nullptr);
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_EQ(echoed->data<float>()[0], 7.0f);
}

// A cancelled program without feed ops has nothing to do with the
// session's queues: a value waiting there stays for the next program that
// reads it (another program of the session may be reading them).
TEST_F(ServiceTest, ACancelledProgramWithoutFeedOpsLeavesTheQueuesAlone) {
  auto feed = service_->OpenFeed(FeedOf(session_));
  ASSERT_TRUE(feed.ok());
  ASSERT_TRUE(service_
                  ->Infeed(*feed, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {7, 8}),
                           nullptr)
                  .ok());
  auto plain = CompileText(
      "HloModule m\nENTRY e {\n  c = f32[2] constant({1, 2})\n  ROOT n = f32[2] negate(c)\n}\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  v1::ExecuteRequest req;
  req.set_session_id(session_);
  req.set_executable_handle(plain->executable_handle());
  auto cancelled = service_->Execute(req, [] { return true; });
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled) << cancelled.status();

  auto echo = CompileText(EchoLoop(1));
  ASSERT_TRUE(echo.ok()) << echo.status();
  req.set_executable_handle(echo->executable_handle());
  auto ran = service_->Execute(req);
  ASSERT_TRUE(ran.ok()) << ran.status();
  auto echoed = service_->Outfeed(*feed, absl::Seconds(30), nullptr);
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_EQ(echoed->data<float>()[0], 7.0f);
}

TEST_F(ServiceTest, FeedsNeedASessionOrAToken) {
  v1::FeedTarget target;
  target.set_device("cpu:0");
  EXPECT_EQ(service_->OpenFeed(target).status().code(), absl::StatusCode::kPermissionDenied);
  target.set_feed_token("f-1234");
  EXPECT_EQ(service_->OpenFeed(target).status().code(), absl::StatusCode::kPermissionDenied);
  v1::CreateFeedTokenRequest req;
  req.set_session_id(session_);
  req.set_device("cpu:0");
  auto token = service_->CreateFeedToken(req);
  ASSERT_TRUE(token.ok());
  target.set_feed_token(token->feed_token());
  EXPECT_TRUE(service_->OpenFeed(target).ok());
  target.set_device("cpu:1");
  EXPECT_EQ(service_->OpenFeed(target).status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

// Sequenced executions (protocol 6): numbered by the client, started in
// that order, their outputs named before they end.

// Adds one infeed value to the argument: runs until a value is fed.
constexpr char kAddInfeed[] = R"(
ENTRY e {
  x = f32[2] parameter(0)
  tok = token[] after-all()
  in = (f32[2], token[]) infeed(tok)
  v = f32[2] get-tuple-element(in), index=0
  ROOT s = f32[2] add(x, v)
})";
constexpr char kNegate2[] = "ENTRY e {\n x = f32[2] parameter(0)\n ROOT n = f32[2] negate(x)\n}";

v1::ExecuteRequest Sequenced(const std::string& session, const std::string& exe,
                             const std::string& arg, uint64_t sequence) {
  v1::ExecuteRequest req;
  req.set_session_id(session);
  req.set_executable_handle(exe);
  req.add_argument_handles(arg);
  req.set_sequence(sequence);
  req.set_inline_result_max_bytes(1024);
  return req;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// A session with negate(f32[2]) compiled: Negate(arg, n) is its sequenced
// execution number n; Input() uploads {1, 2}.
class SequencedTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    CompileNegate();
  }
  void CompileNegate() {
    auto negate = CompileText(kNegate2);
    ASSERT_TRUE(negate.ok()) << negate.status();
    negate_ = negate->executable_handle();
  }
  v1::ExecuteRequest Negate(const std::string& arg, uint64_t sequence) const {
    return Sequenced(session_, negate_, arg, sequence);
  }
  std::string Input() {
    auto x = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}));
    EXPECT_TRUE(x.ok()) << x.status();
    return x.value_or("");
  }
  std::string negate_;
};

TEST_F(SequencedTest, ALaterExecutionTakesAnEarlierOnesOutputWhileThatRuns) {
  auto add = CompileText(kAddInfeed);
  ASSERT_TRUE(add.ok()) << add.status();
  const std::string x = Input();
  // Number 2 arrives first: it waits for number 1, then for its output,
  // which it takes (donated).
  v1::ExecuteRequest second = Negate(protocol::SequencedHandle(1, 0), 2);
  second.add_donated_arguments(0);
  absl::StatusOr<v1::ExecuteResponse> second_done;
  std::atomic<bool> second_returned{false};
  std::thread second_runner([&] {
    second_done = service_->Execute(second, nullptr);
    second_returned = true;
  });
  absl::StatusOr<v1::ExecuteResponse> first_done;
  std::thread first_runner([&] {
    first_done = service_->Execute(Sequenced(session_, add->executable_handle(), x, 1), nullptr);
  });
  auto session = service_->sessions().Get(session_);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Feeds("cpu:0")->infeed.AwaitWaitingPops(1, absl::Seconds(60)))
      << "number 1 never reached its infeed";
  // Number 1 runs, so number 2 cannot have ended.
  EXPECT_FALSE(second_returned.load());
  // A transfer of number 1's output waits for it, until its call goes.
  v1::TransferFromDeviceRequest gone;
  gone.set_session_id(session_);
  gone.set_buffer_handle(protocol::SequencedHandle(1, 0));
  const absl::Status given_up = service_->TransferFromDevice(
      gone, [](const v1::TransferFromDeviceChunk&) { return true; }, [] { return true; });
  EXPECT_EQ(given_up.code(), absl::StatusCode::kCancelled) << given_up;
  // A read of number 1's output waits for it as well.
  absl::StatusOr<std::string> read;
  std::thread reader([&] { read = Download(session_, protocol::SequencedHandle(1, 0)); });
  v1::FeedTarget target;
  target.set_session_id(session_);
  target.set_device("cpu:0");
  auto feed = service_->OpenFeed(target);
  ASSERT_TRUE(feed.ok()) << feed.status();
  ASSERT_TRUE(service_
                  ->Infeed(*feed, ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {10, 20}),
                           nullptr)
                  .ok());
  first_runner.join();
  second_runner.join();
  reader.join();
  ASSERT_TRUE(first_done.ok()) << first_done.status();
  ASSERT_TRUE(second_done.ok()) << second_done.status();
  EXPECT_EQ(first_done->outputs(0).buffer_handle(), "r-1.0");
  EXPECT_EQ(second_done->outputs(0).buffer_handle(), "r-2.0");
  EXPECT_EQ(Floats(second_done->outputs(0).inline_value().data()), (std::vector<float>{-11, -22}));
  // The read either saw the value or, if it came after number 2 took the
  // buffer, that it was gone; never anything else.
  if (read.ok()) {
    EXPECT_EQ(Floats(*read), (std::vector<float>{11, 22}));
  } else {
    EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  }
  // Number 1's output was donated to number 2.
  EXPECT_EQ(Download(session_, "r-1.0").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SequencedTest, TheOutputsOfAFailedSequencedExecutionReportItsError) {
  // Number 1 fails after it started (its argument is unknown): its output's
  // handle reports why.
  auto first = service_->Execute(Negate("b-missing", 1));
  ASSERT_FALSE(first.ok());
  auto second = service_->Execute(Negate(protocol::SequencedHandle(1, 0), 2));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("b-missing"), std::string::npos) << second.status();
  // Number 3 fails before it starts (no such program): using its output
  // says so.
  auto third = service_->Execute(Sequenced(session_, "e-missing", "b-missing", 3));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kNotFound);
  auto fourth = service_->Execute(Negate(protocol::SequencedHandle(3, 0), 4));
  ASSERT_FALSE(fourth.ok());
  EXPECT_NE(fourth.status().message().find("failed before it ran"), std::string::npos)
      << fourth.status();
  // Every number is used once.
  auto again = service_->Execute(Negate("b-missing", 4));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
  // The failed outputs still hold handles until released; releasing them,
  // and those never made, is no error.
  v1::ReleaseRequest release;
  release.set_session_id(session_);
  for (uint64_t n = 1; n <= 4; ++n) release.add_buffer_handles(protocol::SequencedHandle(n, 0));
  EXPECT_TRUE(service_->Release(release).ok());
  EXPECT_EQ((*service_->sessions().Get(session_))->buffer_count(), 0);
}

TEST_F(SequencedTest, ANumberThatNeverComesIsPassedOver) {
  const std::string x = Input();
  // Number 1 is lost: number 2 runs after the patience (300 ms here).
  auto second = service_->Execute(Negate(x, 2));
  ASSERT_TRUE(second.ok()) << second.status();
  // Number 1 arriving late is refused; its outputs never exist.
  auto late = service_->Execute(Negate(x, 1));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
  auto use = service_->Execute(Negate(protocol::SequencedHandle(1, 0), 3));
  EXPECT_EQ(use.status().code(), absl::StatusCode::kNotFound) << use.status();
  EXPECT_NE(use.status().message().find("did not arrive"), std::string::npos) << use.status();
}

TEST_F(SequencedTest, AnOutputReleasedBeforeItsExecutionStartsIsNeverKept) {
  const std::string x = Input();
  v1::ReleaseRequest release;
  release.set_session_id(session_);
  release.add_buffer_handles(protocol::SequencedHandle(1, 0));
  ASSERT_TRUE(service_->Release(release).ok());
  auto first = service_->Execute(Negate(x, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  // Only the argument is held.
  EXPECT_EQ((*service_->sessions().Get(session_))->buffer_count(), 1);
}

TEST_F(SequencedTest, AWaitForAnEarlierNumberEndsWithItsCall) {
  const std::string x = Input();
  // A later number's wait (numbers 1 to 999 missing): a cancelled call
  // stops it rather than passing them over.
  const absl::Status waited =
      service_
          ->Execute(Negate(x, 1000), [] { return true; })
          .status();
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
  // A replicated or grouped execution cannot be sequenced.
  v1::ExecuteRequest replicated = Negate("", 1);
  replicated.clear_argument_handles();
  replicated.add_replicas()->set_device("cpu:0");
  EXPECT_EQ(service_->Execute(replicated).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SequencedTest, ASequencedExecutionCannotWaitForItselfOrALaterOne) {
  for (uint64_t n : {1, 2}) {
    // Its own output, then the next one's.
    auto self = service_->Execute(Negate(protocol::SequencedHandle(n == 1 ? 1 : 3, 0), n));
    EXPECT_EQ(self.status().code(), absl::StatusCode::kInvalidArgument) << self.status();
  }
}

TEST_F(SequencedTest, ANumberThatFailsBeforeItsTurnPassesItOn) {
  // No patience to speak of: number 2 must not wait for a number 1 that
  // failed. A service of its own, then, with its session and program.
  ServiceOptions options;
  options.backends = {{"cpu", 1, {{"memory_bytes", "1M"}}}};
  options.sequence_patience = absl::Hours(1);
  service_ = *Service::Create(options);
  session_ = Open();
  CompileNegate();
  const std::string x = Input();
  // Number 2 waits; number 1 arrives malformed (a replicated sequenced
  // execution) and fails before its turn.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  absl::StatusOr<v1::ExecuteResponse> second;
  std::thread runner([&] {
    second = service_->Execute(Negate(x, 2), [&] { return absl::Now() > give_up; });
  });
  v1::ExecuteRequest first = Negate("", 1);
  first.clear_argument_handles();
  first.add_replicas()->set_device("cpu:0");
  EXPECT_EQ(service_->Execute(first).status().code(), absl::StatusCode::kInvalidArgument);
  runner.join();
  EXPECT_TRUE(second.ok()) << second.status();
}

TEST_F(SequencedTest, OnlyTheSmallestWaitingNumberPassesOverMissingOnes) {
  const std::string x = Input();
  // 1, 2 and 4 never come; 5, then 3, wait. Only 3, the smallest waiting,
  // passes over 1 and 2 (after the patience, 300 ms here), however long 5
  // has waited; then 5 passes over 4.
  absl::StatusOr<v1::ExecuteResponse> fifth, third;
  std::thread five([&] { fifth = service_->Execute(Negate(x, 5)); });
  std::thread three([&] { third = service_->Execute(Negate(x, 3)); });
  three.join();
  five.join();
  EXPECT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(fifth.ok()) << fifth.status();
}

TEST_F(SequencedTest, DonatedArgumentsOfAFailedSequencedExecutionAreGone) {
  // The wrong shape: the execution fails before it takes its argument,
  // which the caller gave up all the same (unlike an unsequenced one:
  // RefusedExecutionKeepsDonatedArguments).
  auto wrong = Upload(session_, ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  ASSERT_TRUE(wrong.ok());
  v1::ExecuteRequest req = Negate(*wrong, 1);
  req.add_donated_arguments(0);
  EXPECT_EQ(service_->Execute(req).status().code(), absl::StatusCode::kInvalidArgument);
  // Its own output, which never got a value, is the only handle left.
  EXPECT_EQ((*service_->sessions().Get(session_))->buffer_count(), 1);
  EXPECT_EQ(Download(session_, *wrong).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::server
