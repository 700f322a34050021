// Collectives across kiln-servers against bare Gloo, in one run on the same
// loopback, and the scaling of data-parallel training over 1 to N servers.
//
// All-reduce: N kiln-servers (separate processes, one cpu device each) form
// a group; a program runs K all-reduces of f32[n] in a device loop, so
// (time of K - time of 1) / (K - 1) is one trip without the RPC, less the
// trip of the same loop with a negation instead (the loop's own cost). The
// peer: N threads of this process, each with its own Gloo TCP context on
// loopback, run gloo::allreduce (ring) of the same n floats K times.
// Training: the MLP of examples/fashion_mnist, 128 examples per server a
// step, through Client::ConnectMesh over 1, 2, ... N servers; efficiency
// is examples/s over N servers / (N x examples/s on one).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "client/client.h"
#include "client/lazy.h"
#include "client/mesh.h"
#include "compiler/ir/hlo_parser.h"
#include "examples/fashion_mnist/trainer.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "tests/server_process.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// K trips of a loop whose body all-reduces its f32[n] (or, without
// `collective`, negates it: the loop's own cost).
std::string LoopModule(int64_t n, int trips, bool collective) {
  return absl::StrFormat(R"(HloModule allreduce_loop
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  p = (s32[], f32[%d]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(%d)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[%d]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x = f32[%d] get-tuple-element(p), index=1
  y = f32[%d] %s
  ROOT t = (s32[], f32[%d]) tuple(j, y)
}
ENTRY main {
  x = f32[%d] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[%d]) tuple(zero, x)
  w = (s32[], f32[%d]) while(t), condition=cond, body=body
  ROOT r = f32[%d] get-tuple-element(w), index=1
})",
                         n, trips, n, n, n,
                         collective ? "all-reduce(x), replica_groups={}, to_apply=add"
                                    : "negate(x)",
                         n, n, n, n, n);
}

// Seconds per loop trip of n floats through the group, with or without
// the all-reduce.
double KilnLoopTrip(kiln::client::Mesh& mesh, kiln::client::MeshGroup& group, int64_t n,
                    int trips, bool collective) {
  auto run = [&](int k) {
    auto module = kiln::ir::ParseModule(LoopModule(n, k, collective));
    if (!module.ok()) {
      std::fprintf(stderr, "%s\n", std::string(module.status().message()).c_str());
      std::exit(1);
    }
    auto program = group.Compile(**module, "cpu");
    if (!program.ok()) {
      std::fprintf(stderr, "%s\n", std::string(program.status().message()).c_str());
      std::exit(1);
    }
    std::vector<kiln::client::MeshReplica> replicas;
    for (int h = 0; h < mesh.hosts(); ++h) {
      auto x = mesh.host(h).TransferToDevice(
          kiln::ir::Literal(kiln::ir::Shape(kiln::ir::ElementType::kF32, {n})), "cpu:0");
      replicas.push_back({absl::StrCat("host", h, "/cpu:0"), {*x}});
    }
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      auto out = group.Run(*program, replicas);
      const double s = Since(t0);
      if (!out.ok()) {
        std::fprintf(stderr, "%s\n", std::string(out.status().message()).c_str());
        std::exit(1);
      }
      best = std::min(best, s);
    }
    return best;
  };
  const double one = run(1);
  const double many = run(trips);
  return (many - one) / (trips - 1);
}

// Seconds per gloo::allreduce of n floats among `ranks` threads.
double GlooAllReduce(int ranks, int64_t n, int trips) {
  gloo::rendezvous::HashStore store;
  std::vector<double> seconds(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      context->connectFullMesh(store, device);
      std::vector<float> data(n, 0.0f);
      double best = 1e30;
      uint32_t tag = 0;
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = Clock::now();
        for (int k = 0; k < trips; ++k) {
          gloo::AllreduceOptions options(context);
          options.setOutput(data.data(), data.size());
          options.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          options.setTag(tag++);
          gloo::allreduce(options);
        }
        best = std::min(best, Since(t0) / trips);
      }
      seconds[r] = best;
    });
  }
  for (auto& t : threads) t.join();
  return *std::max_element(seconds.begin(), seconds.end());
}

// Examples per second of MLP training, 128 examples per server a step.
double TrainingRate(const std::vector<std::string>& addresses, int steps) {
  auto client = kiln::client::Client::ConnectMesh(addresses);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", std::string(client.status().message()).c_str());
    std::exit(1);
  }
  const int replicas = static_cast<int>(addresses.size());
  const int batch = 128 * replicas;
  auto ctx = kiln::client::LazyContext::Create(client->get());
  auto devices = kiln::examples::ReplicaDevices(**client, "cpu", replicas);
  auto model = kiln::examples::MakeModel("mlp", ctx.get(), (*devices)[0], 1);
  kiln::examples::TrainerOptions options;
  options.learning_rate = 0.05;
  if (replicas > 1) options.replica_devices = *devices;
  kiln::examples::Trainer trainer(ctx.get(), model->get(), (*devices)[0], options);
  std::vector<float> images(static_cast<size_t>(batch) * 784);
  std::vector<int32_t> labels(batch);
  for (size_t i = 0; i < images.size(); ++i) images[i] = float((i * 37) % 255) / 255.0f;
  for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % 10;
  auto step = [&]() {
    auto r = trainer.TrainStep(images.data(), labels.data(), batch);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
      std::exit(1);
    }
  };
  for (int i = 0; i < 3; ++i) step();  // compile and warm up
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  return steps * batch / Since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv,
                   "usage: group_benchmark [SERVERS]\nAll-reduce across kiln-servers against "
                   "bare Gloo, and data-parallel training over 1 to SERVERS servers; prints the "
                   "ratios.");
  const int servers = argc > 1 ? std::max(2, std::atoi(argv[1])) : 3;
  std::vector<std::unique_ptr<kiln::testing::ServerProcess>> processes;
  std::vector<std::string> addresses;
  for (int i = 0; i < servers; ++i) {
    processes.push_back(std::make_unique<kiln::testing::ServerProcess>(
        std::vector<std::string>{"--devices=cpu:1", "--threads=1"}));
    if (processes.back()->address().empty()) {
      std::fprintf(stderr, "kiln-server %d did not start\n", i);
      return 1;
    }
    addresses.push_back(processes.back()->address());
  }
  std::printf("%d kiln-servers on loopback (one cpu device and one compute thread each), "
              "%u cores\n\n", servers, std::thread::hardware_concurrency());

  {
    auto mesh = kiln::client::Mesh::Connect(addresses);
    if (!mesh.ok()) {
      std::fprintf(stderr, "%s\n", std::string(mesh.status().message()).c_str());
      return 1;
    }
    auto group = (*mesh)->FormGroup({}, absl::Seconds(60));
    if (!group.ok()) {
      std::fprintf(stderr, "%s\n", std::string(group.status().message()).c_str());
      return 1;
    }
    std::printf("all-reduce of f32[n] across %d servers, sum (Kiln: group of kiln-servers; "
                "Gloo: ring all-reduce between %d threads over TCP)\n", servers, servers);
    std::printf("%10s %12s %12s %14s %14s %12s\n", "bytes", "kiln us", "gloo us", "kiln GB/s",
                "gloo GB/s", "kiln/gloo");
    for (int64_t n : {int64_t{256}, int64_t{16384}, int64_t{262144}, int64_t{4194304}}) {
      const int trips = n >= 262144 ? 20 : 200;
      // The loop's own cost (a negation of the same array) comes off.
      const double kiln = KilnLoopTrip(**mesh, **group, n, trips, true) -
                          KilnLoopTrip(**mesh, **group, n, trips, false);
      const double gloo = GlooAllReduce(servers, n, trips);
      const double bytes = 4.0 * n;
      // Bus bandwidth of a ring all-reduce: 2 (N-1)/N of the bytes per rank.
      const double bus = 2.0 * (servers - 1) / servers * bytes;
      std::printf("%10.0f %12.1f %12.1f %14.3f %14.3f %12.2f\n", bytes, kiln * 1e6, gloo * 1e6,
                  bus / kiln / 1e9, bus / gloo / 1e9, kiln / gloo);
    }
  }

  std::printf("\ndata-parallel MLP training, 128 examples per server a step\n");
  std::printf("%8s %14s %12s\n", "servers", "examples/s", "efficiency");
  double one = 0;
  for (int n = 1; n <= servers; ++n) {
    std::vector<std::string> some(addresses.begin(), addresses.begin() + n);
    const double rate = TrainingRate(some, 20);
    if (n == 1) one = rate;
    std::printf("%8d %14.0f %12.2f\n", n, rate, rate / (n * one));
  }
  return 0;
}
