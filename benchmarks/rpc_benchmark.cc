// Kiln's RPC costs against bare gRPC on the same loopback, in one run:
//  1. round trip of a cached execute of a tiny module (result inline)
//     vs a bare unary call carrying a payload of the same size;
//  2. host-to-device transfer throughput vs a bare client stream of the
//     same bytes in the same chunk size.
// Both servers run in this process; both use the same channel settings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/flags.h"
#include "client/client.h"
#include "compiler/ir/hlo_parser.h"
#include "benchmarks/echo_service.h"
#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/allocator.h"
#include "server/grpc_service.h"
#include "base/logging.h"
#include "server/service.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double mean_us, p50_us;
};

template <typename F>
Stats Time(int iterations, F&& f) {
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  return {sum / us.size(), us[us.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: rpc_benchmark [ITERATIONS] [TRANSFER_MIB]\nKiln RPCs against bare gRPC calls of the same size; prints the ratios.");
  kiln::logging::SetLevel("warn").IgnoreError();
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int64_t transfer_bytes = (argc > 2 ? std::atoll(argv[2]) : 256) << 20;

  // Tuned as kiln-server tunes itself (both peers share the process).
  kiln::server::TuneAllocatorForServing();
  kiln::server::ServiceOptions options;
  auto service = *kiln::server::Service::Create(options);
  auto kiln_server = *kiln::server::GrpcServer::Start(service.get(), "127.0.0.1:0");
  auto echo = kiln::bench::StartEchoPeer();
  auto& echo_stub = echo->stub;
  auto client = *kiln::client::Client::Connect(kiln_server->address());

  // 1. Cached execute round trip.
  auto module = *kiln::ir::ParseModule(
      "ENTRY e {\n x = f32[1] parameter(0)\n ROOT y = f32[1] negate(x)\n}");
  auto exe = *client->Compile(*module, "cpu:0");
  auto arg = *client->TransferToDevice(
      kiln::ir::Literal::FromVector<float>(kiln::ir::ElementType::kF32, {1}, {2.0f}), "cpu:0");
  kiln::client::ExecuteOptions inline_result;
  inline_result.inline_result_max_bytes = 64;
  kiln::bench::Blob payload;
  payload.set_data(std::string(4, 'x'));
  auto kiln_call = [&] {
    auto r = client->Execute(*exe, {arg}, inline_result);
    if (!r.ok() || r->inline_values[0]->data<float>()[0] != -2.0f) std::abort();
  };
  auto bare_call = [&] {
    grpc::ClientContext ctx;
    kiln::bench::Blob out;
    if (!echo_stub->Unary(&ctx, payload, &out).ok()) std::abort();
  };
  for (int i = 0; i < 200; ++i) {
    kiln_call();
    bare_call();
  }
  // Interleaved so that both see the same machine load.
  std::vector<double> kiln_us, bare_us;
  for (int i = 0; i < iterations; ++i) {
    kiln_us.push_back(Time(1, kiln_call).mean_us);
    bare_us.push_back(Time(1, bare_call).mean_us);
  }
  auto summarize = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    return Stats{sum / v.size(), v[v.size() / 2]};
  };
  const Stats kiln_rt = summarize(kiln_us), bare_rt = summarize(bare_us);
  std::printf("cached execute round trip: kiln mean %.1f us (p50 %.1f) | bare gRPC unary mean %.1f us (p50 %.1f) | ratio kiln/bare %.2f\n",
              kiln_rt.mean_us, kiln_rt.p50_us, bare_rt.mean_us, bare_rt.p50_us,
              kiln_rt.p50_us / bare_rt.p50_us);

  // 2. Transfer throughput, same bytes, 1 MiB chunks on both sides.
  kiln::ir::Literal big(kiln::ir::Shape(kiln::ir::ElementType::kU8, {transfer_bytes}));
  for (int64_t i = 0; i < transfer_bytes; i += 4096) big.mutable_bytes()[i] = uint8_t(i);
  const int rounds = 3;
  double kiln_best = 0, bare_best = 0;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    auto buf = client->TransferToDevice(big, "cpu:0");
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!buf.ok()) std::abort();
    kiln_best = std::max(kiln_best, transfer_bytes / s / 1e6);
    buf->reset();
    client->FlushReleases().IgnoreError();

    t0 = Clock::now();
    grpc::ClientContext ctx;
    kiln::bench::Count count;
    auto writer = echo_stub->Upload(&ctx, &count);
    const int64_t chunk = int64_t{1} << 20;
    kiln::bench::Blob blob;
    for (int64_t pos = 0; pos < transfer_bytes; pos += chunk) {
      blob.set_data(reinterpret_cast<const char*>(big.bytes().data()) + pos,
                    std::min(chunk, transfer_bytes - pos));
      writer->Write(blob);
    }
    writer->WritesDone();
    if (!writer->Finish().ok() || count.bytes() != transfer_bytes) std::abort();
    s = std::chrono::duration<double>(Clock::now() - t0).count();
    bare_best = std::max(bare_best, transfer_bytes / s / 1e6);
  }
  std::printf("transfer to device (%lld MiB, best of %d): kiln %.0f MB/s | bare gRPC stream %.0f MB/s | ratio kiln/bare %.2f\n",
              static_cast<long long>(transfer_bytes >> 20), rounds, kiln_best, bare_best,
              kiln_best / bare_best);
  client.reset();
  echo->server->Shutdown();
  kiln_server->Shutdown(absl::Seconds(1));
  return 0;
}
