// Infeed throughput against a bare gRPC client stream of the same bytes, in
// one run on the same loopback. Kiln: a producer streams Fashion-MNIST-sized
// batches (f32[128,784] images, s32[128] labels) through the Infeed RPC
// while a device loop on the server consumes them. Peer: the same messages
// over a bare client stream whose server copies each one, as Kiln does.
#include <chrono>
#include <cstdio>
#include <thread>

#include "base/flags.h"
#include "client/client.h"
#include "client/lazy.h"
#include "client/loop.h"
#include "benchmarks/echo_service.h"
#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/allocator.h"
#include "server/grpc_service.h"
#include "base/logging.h"
#include "server/service.h"

namespace {

using Clock = std::chrono::steady_clock;
using kiln::client::Tensor;
using kiln::ir::ElementType;
using kiln::ir::Shape;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: infeed_benchmark [BATCHES]\nInfeed throughput through kiln-server against a bare gRPC stream of the same bytes; prints the ratio.");
  kiln::logging::SetLevel("warn").IgnoreError();
  const int batches = argc > 1 ? std::atoi(argv[1]) : 500;
  const int batch = 128;

  // Tuned as kiln-server tunes itself (both peers share the process).
  kiln::server::TuneAllocatorForServing();
  kiln::server::ServiceOptions options;
  auto service = *kiln::server::Service::Create(options);
  auto kiln_server = *kiln::server::GrpcServer::Start(service.get(), "127.0.0.1:0");
  auto echo = kiln::bench::StartEchoPeer();
  auto& echo_stub = echo->stub;

  auto client = *kiln::client::Client::Connect(kiln_server->address());
  auto ctx = kiln::client::LazyContext::Create(client.get());
  kiln::ir::Literal images(Shape(ElementType::kF32, {batch, 784}));
  kiln::ir::Literal labels(Shape(ElementType::kS32, {batch}));
  for (size_t i = 0; i < images.mutable_bytes().size(); i += 64) images.mutable_bytes()[i] = 1;
  const int64_t bytes_per_batch = images.shape().ByteSize() + labels.shape().ByteSize();

  // Kiln: a device loop consumes `batches` batches while this thread feeds.
  auto run_kiln = [&]() {
    Tensor count = ctx->FromVector<float>(ElementType::kF32, {}, std::vector<float>{0}, "cpu:0");
    auto out = kiln::client::While(
        batches, {count}, [&](kiln::client::DeviceLoop& loop, const std::vector<Tensor>& s) {
          loop.Infeed(images.shape());
          Tensor y = loop.Infeed(labels.shape());
          return absl::StatusOr<std::vector<Tensor>>(
              {s[0] + kiln::client::Sum(kiln::client::Cast(y, ElementType::kF32))});
        });
    if (!out.ok()) std::abort();
    auto stream = *client->OpenInfeed("cpu:0");
    const auto t0 = Clock::now();
    absl::Status loop_status;
    std::thread runner([&]() { loop_status = ctx->Realize(*out); });
    for (int b = 0; b < batches; ++b) {
      if (!stream->Write(images).ok() || !stream->Write(labels).ok()) break;
    }
    if (!stream->Finish().ok()) std::abort();
    runner.join();
    if (!loop_status.ok()) {
      std::fprintf(stderr, "%s\n", loop_status.ToString().c_str());
      std::abort();
    }
    return Since(t0);
  };
  auto run_bare = [&]() {
    const auto t0 = Clock::now();
    grpc::ClientContext call;
    kiln::bench::Count count;
    auto writer = echo_stub->Upload(&call, &count);
    kiln::bench::Blob x, y;
    for (int b = 0; b < batches; ++b) {
      x.set_data(images.bytes().data(), images.bytes().size());
      y.set_data(labels.bytes().data(), labels.bytes().size());
      writer->Write(x);
      writer->Write(y);
    }
    writer->WritesDone();
    if (!writer->Finish().ok() || count.bytes() != bytes_per_batch * batches) std::abort();
    return Since(t0);
  };
  run_kiln();  // compiles the loop
  run_bare();
  double kiln_best = 1e30, bare_best = 1e30;
  // Each goes first in every other round, so neither always follows the
  // other's heap and caches.
  for (int r = 0; r < 4; ++r) {
    if (r % 2 == 0) {
      kiln_best = std::min(kiln_best, run_kiln());
      bare_best = std::min(bare_best, run_bare());
    } else {
      bare_best = std::min(bare_best, run_bare());
      kiln_best = std::min(kiln_best, run_kiln());
    }
  }
  const double mb = double(bytes_per_batch) * batches / 1e6;
  std::printf("infeed (%d batches of f32[%d,784] + s32[%d], %.0f MB, best of 4): "
              "kiln %.0f MB/s, %.0f batches/s | bare gRPC stream %.0f MB/s, %.0f batches/s | "
              "ratio kiln/bare %.2f\n",
              batches, batch, batch, mb, mb / kiln_best, batches / kiln_best, mb / bare_best,
              batches / bare_best, bare_best / kiln_best);
  ctx.reset();
  client.reset();
  echo->server->Shutdown();
  kiln_server->Shutdown(absl::Seconds(1));
  return 0;
}
