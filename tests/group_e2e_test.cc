// Three kiln-servers on loopback run one replicated program as a group
// (client/mesh.h): collectives span the servers; a server killed in the
// middle of a collective makes the others fail within the group's timeout,
// naming it; the survivors form a new group that works.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/data_parallel.h"
#include "client/lazy.h"
#include "client/mesh.h"
#include "compiler/ir/hlo_parser.h"
#include "examples/fashion_mnist/trainer.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kiln/v1/service.grpc.pb.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

ir::Literal F32(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

// `n` kiln-servers on loopback, started with `flags`; each stops when
// `processes` goes. `addresses` holds those that started.
struct Servers {
  std::vector<std::unique_ptr<testing::ServerProcess>> processes;
  std::vector<std::string> addresses;
};
Servers StartServers(int n, const std::vector<std::string>& flags) {
  Servers servers;
  for (int i = 0; i < n; ++i) {
    servers.processes.push_back(std::make_unique<testing::ServerProcess>(flags));
    if (!servers.processes.back()->address().empty()) {
      servers.addresses.push_back(servers.processes.back()->address());
    }
  }
  return servers;
}

constexpr int kServers = 3;
constexpr int kDevicesPerServer = 2;

class GroupE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    servers_ = StartServers(kServers, {absl::StrCat("--devices=cpu:", kDevicesPerServer)});
    ASSERT_EQ(servers_.addresses.size(), size_t{kServers}) << "a kiln-server did not start";
    addresses_ = servers_.addresses;
    // A killed server's client gives up soon.
    client::ConnectOptions options;
    options.control_timeout = absl::Seconds(5);
    options.reconnect_timeout = absl::Seconds(1);
    auto mesh = client::Mesh::Connect(addresses_, options);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    mesh_ = *std::move(mesh);
  }

  // One replica per device of the mesh's servers `hosts`, in order; replica
  // r's argument is made by `arg(r)`.
  std::vector<client::MeshReplica> Replicas(const std::vector<int>& hosts,
                                            const std::function<ir::Literal(int)>& arg) {
    std::vector<client::MeshReplica> replicas;
    for (int h : hosts) {
      for (int d = 0; d < kDevicesPerServer; ++d) {
        const int r = static_cast<int>(replicas.size());
        const std::string device = absl::StrCat("cpu:", d);
        auto x = mesh_->host(h).TransferToDevice(arg(r), device);
        EXPECT_TRUE(x.ok()) << x.status();
        if (!x.ok()) return {};
        replicas.push_back({absl::StrCat("host", h, "/", device), {*x}});
      }
    }
    return replicas;
  }

  Servers servers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<client::Mesh> mesh_;
};

constexpr char kAllReduce[] = R"(HloModule sum
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  id = u32[] replica-id()
  idf = f32[] convert(id)
  ids = f32[3] broadcast(idf), dimensions={}
  both = f32[3] add(x, ids)
  sum = f32[3] all-reduce(both), replica_groups={}, to_apply=add
  pair = f32[3] all-reduce(both), replica_groups={{0,5},{1,2,3,4}}, to_apply=add
  idv = f32[1] reshape(idf)
  gathered = f32[6] all-gather(idv), dimensions={0}, replica_groups={}
  ROOT t = (f32[3], f32[3], f32[6]) tuple(sum, pair, gathered)
})";

TEST_F(GroupE2ETest, CollectivesSpanEveryReplicaOfEveryServer) {
  auto module = ir::ParseModule(kAllReduce);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(mesh_->devices().size(), size_t{kServers * kDevicesPerServer});
  auto group = mesh_->FormGroup({}, absl::Seconds(20));
  ASSERT_TRUE(group.ok()) << group.status();
  auto program = (*group)->Compile(**module, "cpu");
  ASSERT_TRUE(program.ok()) << program.status();
  // Replica r hands in (r+1)*[1, 10, 100] plus its id r.
  auto make = [](int r) { return F32({1.0f * (r + 1), 10.0f * (r + 1), 100.0f * (r + 1)}); };
  std::vector<client::MeshReplica> replicas = Replicas({0, 1, 2}, make);
  ASSERT_EQ(replicas.size(), 6u);
  client::ExecuteOptions options;
  options.inline_result_max_bytes = 1 << 10;
  for (int round = 0; round < 2; ++round) {  // the group is reused
    auto results = (*group)->Run(*program, replicas, options);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), 6u);
    for (int r = 0; r < 6; ++r) {
      const client::ExecuteResult& out = (*results)[r];
      ASSERT_EQ(out.inline_values.size(), 3u);
      // Sum over r of (r+1)*k + r = 21k + 15.
      EXPECT_EQ(out.inline_values[0]->GetAsDouble(0), 21 + 15) << "replica " << r;
      EXPECT_EQ(out.inline_values[0]->GetAsDouble(1), 210 + 15) << "replica " << r;
      EXPECT_EQ(out.inline_values[0]->GetAsDouble(2), 2100 + 15) << "replica " << r;
      // Groups {0,5} and {1,2,3,4}: (1+6)k + 5 and (2+3+4+5)k + 10.
      const bool outer = r == 0 || r == 5;
      EXPECT_EQ(out.inline_values[1]->GetAsDouble(1), outer ? 70 + 5 : 140 + 10) << "replica " << r;
      for (int i = 0; i < 6; ++i) EXPECT_EQ(out.inline_values[2]->GetAsDouble(i), i);
    }
  }
  EXPECT_TRUE((*group)->Leave().ok());
}

TEST_F(GroupE2ETest, MismatchedReplicaListsAreRefusedBeforeAnythingRuns) {
  auto module = ir::ParseModule(kAllReduce);
  ASSERT_TRUE(module.ok());
  auto group = mesh_->FormGroup({0, 1}, absl::Seconds(20));
  ASSERT_TRUE(group.ok()) << group.status();
  auto program = (*group)->Compile(**module, "cpu");
  ASSERT_TRUE(program.ok()) << program.status();
  // Server 2 is not in the group.
  auto replicas = Replicas({0, 2}, [](int) { return F32({1, 2, 3}); });
  auto outside = (*group)->Run(*program, replicas);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  // Out of member order.
  replicas = Replicas({1, 0}, [](int) { return F32({1, 2, 3}); });
  auto disordered = (*group)->Run(*program, replicas);
  EXPECT_THAT(std::string(disordered.status().message()), HasSubstr("member order"));
}

// Many all-reduces in a loop: long enough to kill a server in the middle.
constexpr char kLoop[] = R"(HloModule spin
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(100000000)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x = f32[3] get-tuple-element(p), index=1
  y = f32[3] all-reduce(x), replica_groups={}, to_apply=add
  ROOT t = (s32[], f32[3]) tuple(j, y)
}
ENTRY main {
  x = f32[3] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[3]) tuple(zero, x)
  w = (s32[], f32[3]) while(t), condition=cond, body=body
  ROOT r = f32[3] get-tuple-element(w), index=1
})";

// Runs kLoop over all three servers, sends `sig` to server 2 in the
// middle, and checks that the others fail within the group's timeout (and
// the client's grace for a member that does not return), naming server 2
// and its replicas. Returns the group, broken.
std::unique_ptr<client::MeshGroup> FailMidLoop(GroupE2ETest* test, client::Mesh& mesh,
                                               testing::ServerProcess& victim,
                                               const std::vector<std::string>& addresses,
                                               int sig, absl::Duration timeout,
                                               std::vector<client::MeshReplica>* replicas,
                                               client::MeshProgram* program) {
  auto loop = ir::ParseModule(kLoop);
  EXPECT_TRUE(loop.ok()) << loop.status();
  auto group = mesh.FormGroup({}, timeout);
  EXPECT_TRUE(group.ok()) << group.status();
  if (!loop.ok() || !group.ok()) return nullptr;
  auto compiled = (*group)->Compile(**loop, "cpu");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  *program = *compiled;

  absl::StatusOr<std::vector<client::ExecuteResult>> spun = absl::UnknownError("not run");
  std::atomic<bool> done{false};
  std::thread run([&] {
    spun = (*group)->Run(*program, *replicas);
    done = true;
  });
  absl::SleepFor(absl::Seconds(1));
  EXPECT_FALSE(done.load()) << "the loop ended before the signal: " << spun.status();
  // A second execution of the group while the first runs is refused at
  // once: the members would pair rounds of different executions.
  client::ExecuteOptions second;
  second.group_id = (*group)->id();
  second.group_replicas = {2, 2, 2};
  std::vector<client::ReplicaArguments> host0 = {{"cpu:0", (*replicas)[0].args},
                                                 {"cpu:1", (*replicas)[1].args}};
  auto refused = mesh.host(0).ExecuteReplicated(*program->members[0], host0, second);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted) << refused.status();
  const absl::Time signalled = absl::Now();
  kill(victim.pid(), sig);
  run.join();
  const absl::Duration took = absl::Now() - signalled;
  // The group's timeout, the probe of the members, the client's grace for
  // a member that does not return, and the replies: far less than a hang.
  EXPECT_LT(took, 2 * timeout + absl::Seconds(30));
  EXPECT_FALSE(spun.ok());
  const std::string message(spun.status().message());
  // Both survivors name the server and its replicas.
  const std::string named =
      absl::StrCat("member 2 (", addresses[2], ", replicas 4 to 5) does not answer");
  EXPECT_THAT(message, HasSubstr(absl::StrCat("member 0 (host0, ", addresses[0])));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("member 1 (host1, ", addresses[1])));
  size_t count = 0;
  for (size_t at = message.find(named); at != std::string::npos; at = message.find(named, at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 2u) << message;
  return *std::move(group);
}

TEST_F(GroupE2ETest, AStalledServerFailsTheOthersWithinTheTimeout) {
  const absl::Duration timeout = absl::Seconds(3);
  auto replicas = Replicas({0, 1, 2}, [](int) { return F32({0, 0, 0}); });
  ASSERT_EQ(replicas.size(), 6u);
  client::MeshProgram program;
  auto group = FailMidLoop(this, *mesh_, *servers_.processes[2], addresses_, SIGSTOP, timeout, &replicas,
                           &program);
  kill(servers_.processes[2]->pid(), SIGCONT);
  ASSERT_NE(group, nullptr);
  // The stalled server's call was cancelled, and said so.
  EXPECT_THAT(std::string(group->broken().message()), HasSubstr("its call was cancelled"));
}

TEST_F(GroupE2ETest, AKilledServerFailsTheOthersWithinTheTimeoutAndTheSurvivorsRegroup) {
  const absl::Duration timeout = absl::Seconds(3);
  auto replicas = Replicas({0, 1, 2}, [](int) { return F32({0, 0, 0}); });
  ASSERT_EQ(replicas.size(), 6u);
  client::MeshProgram program;
  auto group = FailMidLoop(this, *mesh_, *servers_.processes[2], addresses_, SIGKILL, timeout, &replicas,
                           &program);
  ASSERT_NE(group, nullptr);

  // The old group is broken for good, on the client and on the servers.
  auto again = group->Run(program, replicas);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  client::ExecuteOptions direct;
  direct.group_id = group->id();
  direct.group_replicas = {2, 2, 2};
  std::vector<client::ReplicaArguments> host0 = {{"cpu:0", replicas[0].args},
                                                 {"cpu:1", replicas[1].args}};
  auto broken = mesh_->host(0).ExecuteReplicated(*program.members[0], host0, direct);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kFailedPrecondition) << broken.status();
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("broke in an earlier execution"));

  // The survivors form a new group without restarting.
  auto sum = ir::ParseModule(R"(HloModule sum4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  ROOT r = f32[3] all-reduce(x), replica_groups={}, to_apply=add
})");
  ASSERT_TRUE(sum.ok());
  auto survivors = mesh_->FormGroup({0, 1}, timeout);
  ASSERT_TRUE(survivors.ok()) << survivors.status();
  auto summed = (*survivors)->Compile(**sum, "cpu");
  ASSERT_TRUE(summed.ok()) << summed.status();
  auto four = Replicas({0, 1}, [](int r) { return F32({1.0f * r, 2.0f, 3.0f}); });
  client::ExecuteOptions options;
  options.inline_result_max_bytes = 64;
  auto results = (*survivors)->Run(*summed, four, options);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 4u);
  for (const client::ExecuteResult& out : *results) {
    EXPECT_EQ(out.inline_values[0]->GetAsDouble(0), 0 + 1 + 2 + 3);
    EXPECT_EQ(out.inline_values[0]->GetAsDouble(2), 12);
  }
}

TEST_F(GroupE2ETest, AGroupStoreRefusesAWrongSecretAndAnUnknownGroup) {
  auto group = mesh_->FormGroup({0, 1}, absl::Seconds(20));
  ASSERT_TRUE(group.ok()) << group.status();
  // A member that does not come: the others name it within the timeout.
  client::GroupMembership lonely;
  lonely.id = "lonely";
  lonely.secret = std::string(16, 's');
  lonely.rank = 0;
  lonely.members = {addresses_[0], addresses_[1]};
  lonely.timeout = absl::Milliseconds(500);
  absl::Status alone = mesh_->host(0).JoinGroup(lonely);
  EXPECT_FALSE(alone.ok());
  EXPECT_THAT(std::string(alone.message()), HasSubstr(absl::StrCat("member 1 (", addresses_[1])));
  // A short secret and a bad id are refused.
  lonely.secret = "short";
  EXPECT_EQ(mesh_->host(0).JoinGroup(lonely).code(), absl::StatusCode::kInvalidArgument);
  lonely.secret = std::string(16, 's');
  lonely.id = "a b";
  EXPECT_EQ(mesh_->host(0).JoinGroup(lonely).code(), absl::StatusCode::kInvalidArgument);
  // Member 1 of a group whose member 0 never forms it gives up in time.
  lonely.id = "nobody-leads";
  lonely.rank = 1;
  absl::Status follower = mesh_->host(1).JoinGroup(lonely);
  EXPECT_FALSE(follower.ok());

  // Member 0 keeps the formed group's store: a caller without its secret
  // reads nothing, nor from a group that is not there.
  auto stub = v1::KilnService::NewStub(
      grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  v1::GroupStoreRequest req;
  req.set_group_id((*group)->id());
  req.set_secret(std::string(48, '0'));
  req.set_key("0");
  req.set_timeout_millis(10);
  {
    grpc::ClientContext ctx;
    v1::GroupStoreResponse resp;
    EXPECT_EQ(stub->GroupStore(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  req.set_group_id("no-such-group");
  {
    grpc::ClientContext ctx;
    v1::GroupStoreResponse resp;
    EXPECT_EQ(stub->GroupStore(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Once the group is left, its store is gone.
  const std::string id = (*group)->id();
  ASSERT_TRUE((*group)->Leave().ok());
  req.set_group_id(id);
  {
    grpc::ClientContext ctx;
    v1::GroupStoreResponse resp;
    EXPECT_EQ(stub->GroupStore(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

// Replicas whose n-th collectives differ (a loop whose trip count depends
// on the replica) are stopped, on one server and across servers, instead
// of reading each other's operands as their own.
constexpr char kDiverging[] = R"(HloModule diverge
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  p = (u32[], f32[2]) parameter(0)
  i = u32[] get-tuple-element(p), index=0
  id = u32[] replica-id()
  ROOT le = pred[] compare(i, id), direction=LE
}
body {
  p = (u32[], f32[2]) parameter(0)
  i = u32[] get-tuple-element(p), index=0
  one = u32[] constant(1)
  j = u32[] add(i, one)
  x = f32[2] get-tuple-element(p), index=1
  y = f32[2] all-reduce(x), replica_groups={}, to_apply=add
  ROOT t = (u32[], f32[2]) tuple(j, y)
}
ENTRY main {
  x = f32[2] parameter(0)
  big = f32[1000] broadcast(f32[] constant(1)), dimensions={}
  zero = u32[] constant(0)
  t = (u32[], f32[2]) tuple(zero, x)
  w = (u32[], f32[2]) while(t), condition=cond, body=body
  after = f32[1000] all-reduce(big), replica_groups={}, to_apply=add
  r = f32[2] get-tuple-element(w), index=1
  ROOT out = (f32[2], f32[1000]) tuple(r, after)
})";

TEST_F(GroupE2ETest, ReplicasAtDifferentCollectivesAreStoppedNotMixedUp) {
  auto module = ir::ParseModule(kDiverging);
  ASSERT_TRUE(module.ok()) << module.status();
  // On one server.
  auto exe = mesh_->host(0).Compile(**module, "cpu:0");
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<client::ReplicaArguments> local;
  for (int d = 0; d < kDevicesPerServer; ++d) {
    const std::string device = absl::StrCat("cpu:", d);
    auto x = mesh_->host(0).TransferToDevice(F32({1, 2}), device);
    ASSERT_TRUE(x.ok()) << x.status();
    local.push_back({device, {*x}});
  }
  auto alone = mesh_->host(0).ExecuteReplicated(**exe, local);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition) << alone.status();
  EXPECT_THAT(std::string(alone.status().message()), HasSubstr("reached different collectives"));
  // The same shapes at different all-reduces (a max and a sum) are told
  // apart too.
  auto kinds = ir::ParseModule(R"(HloModule kinds
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
sum_branch {
  p = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(p), replica_groups={}, to_apply=add
}
max_branch {
  p = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(p), replica_groups={}, to_apply=max
}
ENTRY main {
  x = f32[2] parameter(0)
  id = u32[] replica-id()
  zero = u32[] constant(0)
  first = pred[] compare(id, zero), direction=EQ
  ROOT c = f32[2] conditional(first, x, x), true_computation=max_branch, false_computation=sum_branch
})");
  ASSERT_TRUE(kinds.ok()) << kinds.status();
  auto kinds_exe = mesh_->host(0).Compile(**kinds, "cpu:0");
  ASSERT_TRUE(kinds_exe.ok()) << kinds_exe.status();
  auto mixed = mesh_->host(0).ExecuteReplicated(**kinds_exe, local);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kFailedPrecondition) << mixed.status();
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("reached different collectives"));
  // Across servers.
  auto group = mesh_->FormGroup({}, absl::Seconds(5));
  ASSERT_TRUE(group.ok()) << group.status();
  auto program = (*group)->Compile(**module, "cpu");
  ASSERT_TRUE(program.ok()) << program.status();
  auto replicas = Replicas({0, 1, 2}, [](int) { return F32({1, 2}); });
  auto across = (*group)->Run(*program, replicas);
  EXPECT_FALSE(across.ok());
  EXPECT_THAT(std::string(across.status().message()), HasSubstr("reached different collectives"));
  // Every server still serves.
  for (int h = 0; h < kServers; ++h) {
    EXPECT_TRUE(mesh_->host(h).TransferToDevice(F32({1}), "cpu:0").ok()) << "host " << h;
  }
}

// Data-parallel training through one client over two servers (the mesh
// transport): the same steps as one device with the whole batch.
TEST(GroupTrainingE2ETest, DataParallelOverTwoServersMatchesOneDevice) {
  const Servers servers = StartServers(2, {"--devices=cpu:2"});
  ASSERT_EQ(servers.addresses.size(), 2u) << "a kiln-server did not start";
  const std::vector<std::string>& addresses = servers.addresses;
  std::vector<float> images(64 * 784);
  std::vector<int32_t> labels(64);
  for (size_t i = 0; i < images.size(); ++i) images[i] = float((i * 37) % 255) / 255.0f;
  for (int i = 0; i < 64; ++i) labels[i] = (i * 7) % 10;

  // Trains the MLP for three steps on `devices` (one: no data
  // parallelism); returns the losses and the final parameters.
  auto train = [&](client::Client& c, const std::vector<std::string>& devices,
                   std::vector<double>* losses) {
    auto ctx = client::LazyContext::Create(&c);
    auto model = examples::MakeModel("mlp", ctx.get(), devices[0], 1);
    EXPECT_TRUE(model.ok()) << model.status();
    examples::TrainerOptions options;
    options.learning_rate = 0.05;
    if (devices.size() > 1) options.replica_devices = devices;
    examples::Trainer trainer(ctx.get(), model->get(), devices[0], options);
    for (int step = 0; step < 3; ++step) {
      auto r = trainer.TrainStep(images.data(), labels.data(), 64);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return std::vector<ir::Literal>();
      losses->push_back(r->loss);
    }
    std::vector<ir::Literal> params;
    client::DataParallel dp(ctx.get(), devices);
    for (const client::Tensor& p : (*model)->params()) {
      absl::StatusOr<ir::Literal> value = devices.size() > 1 ? dp.CheckInStep(p) : p.ToHost();
      EXPECT_TRUE(value.ok()) << value.status();
      if (value.ok()) params.push_back(*std::move(value));
    }
    return params;
  };

  auto mesh = client::Client::ConnectMesh(addresses);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  auto devices = examples::ReplicaDevices(**mesh, "cpu", 4);
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(*devices, (std::vector<std::string>{"host0/cpu:0", "host0/cpu:1", "host1/cpu:0",
                                                "host1/cpu:1"}));
  std::vector<double> parallel_losses, single_losses;
  std::vector<ir::Literal> parallel = train(**mesh, *devices, &parallel_losses);
  // Each step ran as one execution on each server, in a group of both.
  auto metrics = (*mesh)->Metrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int64_t group_executes = 0;
  for (const auto& c : metrics->counters()) {
    if (c.name() == "group_executes") group_executes = c.value();
  }
  EXPECT_GE(group_executes, 2 * 3);

  auto single_client = client::Client::Connect(addresses[0]);
  ASSERT_TRUE(single_client.ok()) << single_client.status();
  std::vector<ir::Literal> single = train(**single_client, {"cpu:0"}, &single_losses);

  ASSERT_EQ(parallel_losses.size(), 3u);
  ASSERT_EQ(single_losses.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(parallel_losses[s], single_losses[s], 1e-4 * std::max(1.0, single_losses[s]))
        << "step " << s;
  }
  EXPECT_LT(single_losses.back(), single_losses.front()) << "the model trains";
  ASSERT_EQ(parallel.size(), single.size());
  for (size_t p = 0; p < single.size(); ++p) {
    ASSERT_EQ(parallel[p].element_count(), single[p].element_count());
    double worst = 0;
    for (int64_t i = 0; i < single[p].element_count(); ++i) {
      worst = std::max(worst, std::abs(parallel[p].GetAsDouble(i) - single[p].GetAsDouble(i)));
    }
    EXPECT_LT(worst, 1e-4) << "parameter " << p;
  }
}

// On simulated TPU cores, an all-reduce across servers is priced with the
// network between them on top of each server's chips.
TEST(GroupTpuE2ETest, TheProfileOfAGroupPricesTheNetworkBetweenServers) {
  const Servers servers = StartServers(2, {"--devices=cpu:1,tpu:2"});
  ASSERT_EQ(servers.addresses.size(), 2u) << "a kiln-server did not start";
  const std::vector<std::string>& addresses = servers.addresses;
  auto client = client::Client::ConnectMesh(addresses);
  ASSERT_TRUE(client.ok()) << client.status();
  auto module = ir::ParseModule(R"(HloModule sum
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[65536] parameter(0)
  ROOT r = f32[65536] all-reduce(x), replica_groups={}, to_apply=add
})");
  ASSERT_TRUE(module.ok());
  auto exe = (*client)->Compile(**module, "host0/tpu:0");
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto run = [&](const std::vector<std::string>& devices) {
    std::vector<client::ReplicaArguments> replicas;
    for (const std::string& d : devices) {
      auto x = (*client)->TransferToDevice(
          ir::Literal(ir::Shape(ir::ElementType::kF32, {65536})), d);
      EXPECT_TRUE(x.ok()) << x.status();
      replicas.push_back({d, {*x}});
    }
    return (*client)->ExecuteReplicated(**exe, replicas);
  };
  auto alone = run({"host0/tpu:0", "host0/tpu:1"});
  ASSERT_TRUE(alone.ok()) << alone.status();
  auto both = run({"host0/tpu:0", "host0/tpu:1", "host1/tpu:0", "host1/tpu:1"});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_TRUE(alone->profile.has_value() && both->profile.has_value());
  // Each server reduces its two cores as before, then the ring between the
  // two servers: 2 (2-1)/2 x 256 KiB / 12.5 GB/s + 2 x 10 us.
  EXPECT_NEAR(both->profile->interconnect_seconds() - alone->profile->interconnect_seconds(),
              (1 << 18) / 12.5e9 + 2 * 10e-6, 1e-9);
  EXPECT_EQ(both->replicas.size(), 4u);
  EXPECT_EQ(both->replicas[3].outputs[0]->device(), "host1/tpu:1");
}

// What an exchange between servers holds on the host counts against the
// session's memory quota.
TEST(GroupQuotaE2ETest, AnExchangeOverTheSessionsQuotaIsRefused) {
  const Servers servers = StartServers(3, {"--devices=cpu:2", "--session_memory_bytes=2M"});
  ASSERT_EQ(servers.addresses.size(), 3u) << "a kiln-server did not start";
  const std::vector<std::string>& addresses = servers.addresses;
  auto mesh = client::Mesh::Connect(addresses);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  auto group = (*mesh)->FormGroup({}, absl::Seconds(10));
  ASSERT_TRUE(group.ok()) << group.status();
  // Groups of three: every replica's 400 KB crosses servers.
  auto module = ir::ParseModule(R"(HloModule halves
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[100000] parameter(0)
  ROOT r = f32[100000] all-reduce(x), replica_groups={{0,1,2},{3,4,5}}, to_apply=add
})");
  ASSERT_TRUE(module.ok());
  auto program = (*group)->Compile(**module, "cpu");
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<client::MeshReplica> replicas;
  for (int h = 0; h < 3; ++h) {
    for (int d = 0; d < 2; ++d) {
      auto x = (*mesh)->host(h).TransferToDevice(
          ir::Literal(ir::Shape(ir::ElementType::kF32, {100000})), absl::StrCat("cpu:", d));
      ASSERT_TRUE(x.ok()) << x.status();
      replicas.push_back({absl::StrCat("host", h, "/cpu:", d), {*x}});
    }
  }
  auto run = (*group)->Run(*program, replicas);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kResourceExhausted) << run.status();
  EXPECT_THAT(std::string(run.status().message()), HasSubstr("between the servers"));
}

// --group_peers: a server joins only groups whose members are on the hosts
// it lists.
TEST(GroupPeersE2ETest, AServerJoinsOnlyGroupsOfItsPeers) {
  testing::ServerProcess listed({"--devices=cpu:1", "--group_peers=127.0.0.1"});
  testing::ServerProcess strict({"--devices=cpu:1", "--group_peers=10.0.0.1,10.0.0.2"});
  ASSERT_FALSE(listed.address().empty());
  ASSERT_FALSE(strict.address().empty());
  auto client = client::Client::Connect(strict.address());
  ASSERT_TRUE(client.ok()) << client.status();
  client::GroupMembership m;
  m.id = "outside";
  m.secret = std::string(16, 's');
  m.members = {strict.address(), "192.168.1.1:22"};
  absl::Status refused = (*client)->JoinGroup(m);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--group_peers"));
  // Loopback members are listed on the other server: a group of one forms.
  auto ok_client = client::Client::Connect(listed.address());
  ASSERT_TRUE(ok_client.ok());
  m.id = "inside";
  m.members = {listed.address()};
  EXPECT_TRUE((*ok_client)->JoinGroup(m).ok());
  // A server that listens beyond loopback joins no group until it lists
  // its peers.
  testing::ServerProcess exposed({"--devices=cpu:1", "--listen=0.0.0.0:0", "--insecure"});
  ASSERT_FALSE(exposed.address().empty());
  const std::string port = exposed.address().substr(exposed.address().rfind(':'));
  auto exposed_client = client::Client::Connect("127.0.0.1" + port);
  ASSERT_TRUE(exposed_client.ok()) << exposed_client.status();
  m.id = "exposed";
  m.members = {"127.0.0.1" + port};
  absl::Status unlisted = (*exposed_client)->JoinGroup(m);
  EXPECT_EQ(unlisted.code(), absl::StatusCode::kFailedPrecondition) << unlisted;
  EXPECT_THAT(std::string(unlisted.message()), HasSubstr("--group_peers"));
}

// With bearer tokens on, a member reaches member 0's store with the token
// of the client that formed the group.
TEST(GroupTokensE2ETest, MembersShowTheClientsTokenToMemberZero) {
  char dir_template[] = "/tmp/kiln-group-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string tokens = std::string(dir_template) + "/tokens";
  {
    std::ofstream(tokens) << "trainer aaaaaaaaaaaaaaaaaaaa\n";
  }
  chmod(tokens.c_str(), 0600);
  const Servers servers = StartServers(2, {"--devices=cpu:1", "--auth_tokens_file=" + tokens});
  ASSERT_EQ(servers.addresses.size(), 2u) << "a kiln-server did not start";
  const std::vector<std::string>& addresses = servers.addresses;
  client::ConnectOptions options;
  options.security.token = "aaaaaaaaaaaaaaaaaaaa";
  auto mesh = client::Mesh::Connect(addresses, options);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  auto group = (*mesh)->FormGroup({}, absl::Seconds(20));
  ASSERT_TRUE(group.ok()) << group.status();
  auto module = ir::ParseModule(R"(HloModule sum2
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
ENTRY main {
  x = s32[2] parameter(0)
  ROOT r = s32[2] all-reduce(x), replica_groups={}, to_apply=add
})");
  ASSERT_TRUE(module.ok());
  auto program = (*group)->Compile(**module, "cpu");
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<client::MeshReplica> replicas;
  for (int h = 0; h < 2; ++h) {
    auto x = (*mesh)->host(h).TransferToDevice(
        ir::Literal::FromVector<int32_t>(ir::ElementType::kS32, {2}, {h + 1, 100 * (h + 1)}),
        "cpu:0");
    ASSERT_TRUE(x.ok()) << x.status();
    replicas.push_back({absl::StrCat("host", h, "/cpu:0"), {*x}});
  }
  client::ExecuteOptions run;
  run.inline_result_max_bytes = 64;
  auto results = (*group)->Run(*program, replicas, run);
  ASSERT_TRUE(results.ok()) << results.status();
  for (const client::ExecuteResult& out : *results) {
    EXPECT_EQ(out.inline_values[0]->GetAsDouble(0), 3);
    EXPECT_EQ(out.inline_values[0]->GetAsDouble(1), 300);
  }
  group->reset();
  mesh->reset();
  std::filesystem::remove_all(dir_template);
}

}  // namespace
}  // namespace kiln
