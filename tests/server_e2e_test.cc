// End to end: a real kiln-server on a free loopback port, driven by the real
// client over gRPC.
#include <sched.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/host_identity.h"
#include "client/client.h"
#include "client/grpc_transport.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using client::Client;

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto m = ir::ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

ir::Literal F32(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

std::unique_ptr<Client> ConnectTo(const testing::ServerProcess& server) {
  EXPECT_FALSE(server.address().empty()) << "kiln-server did not start";
  auto c = Client::Connect(server.address());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

int64_t Counter(Client& c, const std::string& name) {
  auto m = c.Metrics();
  for (const auto& counter : m->counters()) {
    if (counter.name() == name) return counter.value();
  }
  return 0;
}

// A successful call after an error shows the server is still serving.
void ExpectServing(Client& c) {
  auto b = c.TransferToDevice(F32({7}), "cpu:0");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(c.TransferFromDevice(**b)->data<float>()[0], 7.0f);
}

constexpr char kScale[] = "ENTRY e {\n x = f32[4] parameter(0)\n c = f32[] constant(3)\n"
                          " b = f32[4] broadcast(c), dimensions={}\n ROOT y = f32[4] multiply(x, b)\n}";

TEST(ServerE2E, HandshakeListsDevicesAndShutsDownCleanly) {
  testing::ServerProcess server({"--devices=cpu:2", "--backend_config=cpu.memory_bytes=1000000"});
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->devices().size(), 2u);
  EXPECT_EQ(c->devices()[1].name, "cpu:1");
  EXPECT_EQ(c->devices()[1].kind, "cpu");
  EXPECT_EQ(c->devices()[1].ordinal, 1);
  EXPECT_EQ(c->devices()[1].memory_capacity_bytes, 1000000);
  c.reset();
  EXPECT_EQ(server.Stop(), 0);  // SIGTERM: graceful exit 0
}

// On a unix socket the server names the socket it listens on, and a client
// there learns it shares the server's machine: the handshake carries the
// kernel's boot id, the server's cores and each device's compute threads.
TEST(ServerE2E, ListensOnAUnixSocketAndNamesItsHostInTheHandshake) {
  // Socket paths hold at most 107 bytes: /tmp, not a long TEST_TMPDIR.
  const std::string path = absl::StrCat("/tmp/kiln-e2e-", getpid(), ".sock");
  std::filesystem::remove(path);
  testing::ServerProcess server({"--listen=unix:" + path, "--threads=1"});
  ASSERT_EQ(server.address(), "unix:" + path);
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->devices()[0].compute_threads, 1);
  ExpectServing(*c);
  // One compute thread leaves a core to this process where there are two.
  const int cores = static_cast<int>(AllowedCpus().size());
  if (cores >= 2) EXPECT_FALSE(c->ComputeFillsSharedCores("cpu:0"));
  c.reset();
  EXPECT_EQ(server.Stop(), 0);
  std::filesystem::remove(path);

  testing::ServerProcess filling({absl::StrCat("--threads=", cores)});
  auto f = ConnectTo(filling);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->devices()[0].compute_threads, cores);
  EXPECT_EQ(f->ComputeFillsSharedCores("cpu:0"), !HostId().empty());
  if (cores < 2 || HostId().empty()) return;

  // A server pinned to one core (it inherits this process's mask while it
  // starts) with one thread fills that core, but this process may run on
  // another: the team does not fill the cores it shares with this client.
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  CPU_SET(AllowedCpus()[0], &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  testing::ServerProcess pinned({"--threads=1"});
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  auto p = ConnectTo(pinned);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->devices()[0].compute_threads, 1);
  EXPECT_FALSE(p->ComputeFillsSharedCores("cpu:0"));
}

TEST(ServerE2E, StandardHealthServiceAnswersServing) {
  testing::ServerProcess server;
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  // grpc.health.v1.HealthCheckRequest{service: ""} serializes to no bytes.
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status: SERVING (1)} is field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST(ServerE2E, VersionMismatchIsFailedPrecondition) {
  testing::ServerProcess server;
  auto transport = client::ConnectGrpc(server.address());
  ASSERT_TRUE(transport.ok());
  v1::HandshakeRequest req;
  req.set_min_version(7);
  req.set_max_version(9);
  auto r = (*transport)->Handshake(req);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("7..9"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("1..6"), std::string::npos);
}

TEST(ServerE2E, TransfersRoundTripExactly) {
  testing::ServerProcess server;
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{3} << 20}) {
    ir::Literal v(ir::Shape(ir::ElementType::kU8, {n}));
    for (int64_t i = 0; i < n; ++i) v.mutable_bytes()[i] = static_cast<uint8_t>(i * 31 + 7);
    auto b = c->TransferToDevice(v, "cpu:0");
    ASSERT_TRUE(b.ok()) << b.status();
    auto back = c->TransferFromDevice(**b);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, v) << n;
  }
}

TEST(ServerE2E, TransferLargerThanTwoGiB) {
  testing::ServerProcess server({"--backend_config=cpu.memory_bytes=4000000000"});
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  const int64_t n = (int64_t{2} << 30) + 12345;  // past every 2 GiB limit
  ir::Literal v(ir::Shape(ir::ElementType::kU8, {n}));
  uint8_t* p = v.mutable_bytes().data();
  for (int64_t i = 0; i < n; i += 4096) p[i] = static_cast<uint8_t>(i >> 12);
  p[n - 1] = 0xab;
  auto b = c->TransferToDevice(v, "cpu:0");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(c->MemoryInfo("cpu:0")->bytes_in_use(), n);
  auto back = c->TransferFromDevice(**b);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->bytes().size(), static_cast<size_t>(n));
  EXPECT_EQ(std::memcmp(back->bytes().data(), p, n), 0);
}

TEST(ServerE2E, OversizeTransferRefusedBeforeItIsSent) {
  testing::ServerProcess server({"--backend_config=cpu.memory_bytes=16000000"});
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  ir::Literal big(ir::Shape(ir::ElementType::kF32, {16 << 20}));  // 64 MiB
  auto r = c->TransferToDevice(big, "cpu:0");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("out of device memory"), std::string::npos);
  EXPECT_EQ(Counter(*c, "bytes_in"), 0);  // refused on the header alone
  ExpectServing(*c);
}

TEST(ServerE2E, CompileOnceThenCacheHitsAcrossSessions) {
  testing::ServerProcess server;
  auto a = ConnectTo(server);
  auto b = ConnectTo(server);
  ASSERT_NE(a, nullptr);
  auto e1 = a->Compile(*Parse(kScale), "cpu:0");
  ASSERT_TRUE(e1.ok()) << e1.status();
  EXPECT_FALSE((*e1)->cache_hit());
  EXPECT_GT((*e1)->compile_micros(), 0);
  // Same program, other names, other session: a hit.
  std::string renamed = kScale;
  renamed.replace(renamed.find("ROOT y"), 6, "ROOT out");
  auto e2 = b->Compile(*Parse(renamed), "cpu:0");
  ASSERT_TRUE(e2.ok());
  EXPECT_TRUE((*e2)->cache_hit());
  EXPECT_EQ((*e2)->fingerprint(), (*e1)->fingerprint());
  EXPECT_EQ(Counter(*a, "compile_cache_misses"), 1);
  EXPECT_EQ(Counter(*a, "compile_cache_hits"), 1);
  // The executable is shared but the handles are per session.
  EXPECT_NE((*e1)->handle(), (*e2)->handle());
  auto x = *b->TransferToDevice(F32({1, 2, 3, 4}), "cpu:0");
  client::ExecuteOptions inline_small;
  inline_small.inline_result_max_bytes = 16;
  auto r = b->Execute(**e2, {x}, inline_small);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inline_values[0]->data<float>()[3], 12.0f);
}

TEST(ServerE2E, TwoConcurrentClientsRunDifferentPrograms) {
  testing::ServerProcess server;
  std::atomic<int> failures{0};
  auto worker = [&](const std::string& op, float expect_first) {
    auto c = Client::Connect(server.address());
    if (!c.ok()) {
      ++failures;
      return;
    }
    auto exe = (*c)->Compile(
        *Parse(absl::StrCat("ENTRY e {\n x = f32[2] parameter(0)\n ROOT y = f32[2] ", op,
                            "(x, x)\n}")),
        "cpu:0");
    if (!exe.ok()) {
      ++failures;
      return;
    }
    client::ExecuteOptions opts;
    opts.inline_result_max_bytes = 8;
    for (int i = 0; i < 50; ++i) {
      auto x = (*c)->TransferToDevice(F32({3, float(i)}), "cpu:0");
      auto r = x.ok() ? (*c)->Execute(**exe, {*x}, opts) : x.status();
      if (!r.ok() || r->inline_values[0]->data<float>()[0] != expect_first) ++failures;
    }
  };
  std::thread t1(worker, "add", 6.0f);
  std::thread t2(worker, "multiply", 9.0f);
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ServerE2E, SessionsCannotTouchEachOthersHandles) {
  testing::ServerProcess server;
  auto owner = ConnectTo(server);
  ASSERT_NE(owner, nullptr);
  auto buf = *owner->TransferToDevice(F32({1, 2}), "cpu:0");
  auto transport = *client::ConnectGrpc(server.address());
  v1::HandshakeRequest hs;
  hs.set_min_version(1);
  hs.set_max_version(1);
  const std::string intruder = transport->Handshake(hs)->session_id();
  v1::TransferFromDeviceRequest read;
  read.set_session_id(intruder);
  read.set_buffer_handle(buf->handle());
  absl::Status st = transport->TransferFromDevice(read, [](v1::TransferFromDeviceChunk&) {
    return absl::OkStatus();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  // The message is the same as for a handle that never existed.
  EXPECT_NE(st.message().find("unknown buffer handle"), std::string::npos);
  v1::ReleaseRequest rel;
  rel.set_session_id(intruder);
  rel.add_buffer_handles(buf->handle());
  EXPECT_EQ(transport->Release(rel).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(owner->TransferFromDevice(*buf)->data<float>()[1], 2.0f);
}

TEST(ServerE2E, ReleaseFreesMemory) {
  testing::ServerProcess server;
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  auto before = c->MemoryInfo("cpu:0")->bytes_in_use();
  {
    auto b = *c->TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {1000})), "cpu:0");
    EXPECT_EQ(c->MemoryInfo("cpu:0")->bytes_in_use(), before + 4000);
    EXPECT_EQ(c->MemoryInfo("cpu:0")->live_buffers(), 1);
  }
  ASSERT_TRUE(c->FlushReleases().ok());
  EXPECT_EQ(c->MemoryInfo("cpu:0")->bytes_in_use(), before);
}

TEST(ServerE2E, KilledClientsMemoryIsFreedAfterItsLease) {
  testing::ServerProcess server({"--lease_seconds=2"});
  auto watcher = ConnectTo(server);
  ASSERT_NE(watcher, nullptr);
  int out_fd = -1;
  pid_t child = testing::SpawnWithStdout(
      {std::string(KILN_BIN_DIR) + "/lease_client", server.address(), "5000000"}, &out_fd);
  ASSERT_GT(child, 0);
  std::string line;
  ASSERT_TRUE(testing::ReadLine(out_fd, &line, 30000)) << "lease_client did not report";
  ASSERT_EQ(line.rfind("ready ", 0), 0u) << line;
  EXPECT_EQ(watcher->MemoryInfo("cpu:0")->bytes_in_use(), 5000000);
  // Alive and keeping its lease for longer than one lease: memory stays.
  // The client reports each call that renewed its lease.
  const absl::Time ready = absl::Now();
  int alive = 0;
  while (absl::Now() - ready < absl::Seconds(3)) {
    ASSERT_TRUE(testing::ReadLine(out_fd, &line, 30000)) << "lease_client stopped reporting";
    ASSERT_EQ(line.rfind("alive ", 0), 0u) << line;
    ++alive;
  }
  EXPECT_GE(alive, 2);
  EXPECT_EQ(watcher->MemoryInfo("cpu:0")->bytes_in_use(), 5000000);
  testing::StopProcess(child, SIGKILL, 1000);
  close(out_fd);
  int64_t in_use = -1;
  for (int i = 0; i < 100; ++i) {
    in_use = watcher->MemoryInfo("cpu:0")->bytes_in_use();
    if (in_use == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(in_use, 0);
}

TEST(ServerE2E, BadInputsGetPreciseStatusesAndTheServerKeepsServing) {
  testing::ServerProcess server;
  auto c = ConnectTo(server);
  ASSERT_NE(c, nullptr);
  auto transport = *client::ConnectGrpc(server.address());
  const std::string session = c->session_id();

  // Unknown handle.
  v1::ExecuteRequest ex;
  ex.set_session_id(session);
  ex.set_executable_handle("e-not-a-handle");
  auto unknown = transport->Execute(ex);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("unknown executable handle 'e-not-a-handle'"),
            std::string::npos);
  ExpectServing(*c);

  // Malformed and invalid modules.
  v1::CompileRequest compile;
  compile.set_session_id(session);
  compile.set_device("cpu:0");
  auto* comp = compile.mutable_module()->add_computations();
  comp->set_name("e");
  auto* instr = comp->add_instructions();
  instr->set_name("x");
  instr->set_opcode("negate");
  instr->mutable_shape()->set_element_type(v1::F32);
  instr->add_operand_ids(42);
  auto malformed = transport->Compile(compile);
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(malformed.status().message().find("malformed module"), std::string::npos);
  *compile.mutable_module() = ir::ModuleToProto(
      *Parse("ENTRY e {\n x = f32[2] parameter(0)\n ROOT y = f32[2] negate(x)\n}"));
  compile.mutable_module()->mutable_computations(0)->mutable_instructions(1)->mutable_shape()->add_dims(9);
  auto invalid = transport->Compile(compile);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("invalid module"), std::string::npos) << invalid.status();
  ExpectServing(*c);

  // Wrong argument count, shape and type.
  auto exe = *c->Compile(*Parse(kScale), "cpu:0");
  EXPECT_NE(c->Execute(*exe, {}).status().message().find("takes 1 arguments, got 0"),
            std::string::npos);
  auto short_arg = *c->TransferToDevice(F32({1, 2}), "cpu:0");
  EXPECT_NE(c->Execute(*exe, {short_arg}).status().message().find("expects f32[4]"),
            std::string::npos);
  auto int_arg = *c->TransferToDevice(
      ir::Literal::FromVector<int>(ir::ElementType::kS32, {4}, {1, 2, 3, 4}), "cpu:0");
  EXPECT_NE(c->Execute(*exe, {int_arg}).status().message().find("has shape s32[4]"),
            std::string::npos);
  ExpectServing(*c);

  // Truncated and oversized transfers.
  v1::TransferHeader h;
  h.set_session_id(session);
  h.set_device("cpu:0");
  ir::ShapeToProto(ir::Shape(ir::ElementType::kF32, {3}), h.mutable_shape());
  h.set_total_bytes(12);
  auto truncated = transport->TransferToDevice(h, std::string(8, 'x'), 4);
  EXPECT_NE(truncated.status().message().find("truncated transfer: received 8 of 12"),
            std::string::npos) << truncated.status();
  auto oversized = transport->TransferToDevice(h, std::string(16, 'x'), 4);
  EXPECT_NE(oversized.status().message().find("more than the declared 12"), std::string::npos);
  h.set_total_bytes(13);
  auto mismatch = transport->TransferToDevice(h, std::string(13, 'x'), 4);
  EXPECT_NE(mismatch.status().message().find("declares 13 bytes but f32[3] has 12"),
            std::string::npos);
  ExpectServing(*c);

  // Execute on a released executable.
  v1::ReleaseRequest rel;
  rel.set_session_id(session);
  rel.add_executable_handles(exe->handle());
  ASSERT_TRUE(transport->Release(rel).ok());
  auto x = *c->TransferToDevice(F32({1, 2, 3, 4}), "cpu:0");
  auto released = c->Execute(*exe, {x});
  EXPECT_EQ(released.status().code(), absl::StatusCode::kNotFound);
  ExpectServing(*c);
}


// The TCP ports a process listens on, read from /proc: its socket inodes
// matched against the kernel's tables of listening sockets.
std::vector<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  for (const auto& entry : std::filesystem::directory_iterator(fd_dir)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::vector<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || !inodes.contains(inode)) continue;  // 0A: LISTEN
      ports.push_back(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

TEST(ServerE2E, ListensOnExactlyTheAnnouncedPort) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  const int port = std::stoi(server.address().substr(server.address().rfind(':') + 1));
  EXPECT_EQ(ListeningPorts(server.pid()), std::vector<int>{port});
}

TEST(ServerE2E, ASecondServerOnAPortInUseFailsToStart) {
  testing::ServerProcess first;
  ASSERT_FALSE(first.address().empty());
  auto second = testing::RunCommand(
      absl::StrCat(KILN_BIN_DIR, "/kiln-server --log_level=off --listen=", first.address()), 30);
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("cannot listen on " + first.address()), std::string::npos)
      << second.output;
  // The first keeps its clients.
  auto c = ConnectTo(first);
  ASSERT_NE(c, nullptr);
  ExpectServing(*c);
}

// Whether every thread of `pid` has stopped (a stop signal reaches the
// threads one by one); waits up to 10 s.
bool AllThreadsStopped(pid_t pid) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    bool all = true;
    for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      // The state follows the command name, which is in parentheses.
      const size_t close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') {
        all = false;
      }
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A server stopped for longer than a lease keeps its sessions: on resume its
// clients can renew before anything is reaped. Meanwhile a client's control
// calls fail at their deadline instead of waiting for ever.
TEST(ServerE2E, APausedServerKeepsItsSessionsAndStuckCallsTimeOut) {
  testing::ServerProcess server({"--lease_seconds=2"});
  ASSERT_FALSE(server.address().empty());
  // The owner sends nothing on its own (no keep-alives), so only the call
  // it makes after the pause can renew its session.
  client::ConnectOptions quiet;
  quiet.keep_alive = false;
  auto owner = Client::Connect(server.address(), quiet);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto held = (*owner)->TransferToDevice(F32({1, 2, 3}), "cpu:0");
  ASSERT_TRUE(held.ok());
  client::ConnectOptions impatient;
  impatient.control_timeout = absl::Seconds(1);
  auto probe = Client::Connect(server.address(), impatient);
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_EQ(kill(server.pid(), SIGSTOP), 0);
  ASSERT_TRUE(AllThreadsStopped(server.pid())) << "kiln-server did not stop";
  // Three control calls, each ending at its 1 s deadline: the server stays
  // stopped for longer than its 2 s lease.
  for (int i = 0; i < 3; ++i) {
    auto stuck = (*probe)->MemoryInfo("cpu:0");
    EXPECT_EQ(stuck.status().code(), absl::StatusCode::kDeadlineExceeded) << stuck.status();
  }
  ASSERT_EQ(kill(server.pid(), SIGCONT), 0);
  auto info = (*owner)->MemoryInfo("cpu:0");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->bytes_in_use(), 12);
}

}  // namespace
}  // namespace kiln
