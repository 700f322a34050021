// Cost of recording one lazy op (no execution): builds chains of elementwise
// ops and prints nanoseconds per op; then a cached lazy step: a chain of
// 1,000 ops on one element traced, keyed and run per step (the program, one
// fused loop over one element, is a small part of it), per traced op; then
// the cost of one op in eager mode (each op executed as it is recorded,
// embedded), the same chain of adds and multiplies on one element, without
// and with gradients recorded. benchmarks/fashion_mnist_vs_torch.py runs it
// beside PyTorch's eager per-op cost and prints the ratios.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "base/flags.h"
#include "client/client.h"
#include "client/lazy.h"
#include "client/tensor.h"
#include "base/logging.h"
#include "embedded/embedded.h"

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: trace_benchmark [CHAINS] [LENGTH] [STEPS] [EAGER_OPS]\nCost of tracing lazy tensor ops, per op: CHAINS chains of LENGTH ops traced (default 200 of 1000), STEPS cached lazy steps of 1000 ops (default 200) and EAGER_OPS eager ops (default 20000).");
  kiln::logging::SetLevel("warn").IgnoreError();
  const int chains = argc > 1 ? std::atoi(argv[1]) : 200;
  const int length = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 200;
  const int eager_ops = argc > 4 ? std::atoi(argv[4]) : 20000;
  auto client = *kiln::embedded::Connect();
  auto ctx = kiln::client::LazyContext::Create(client.get());
  kiln::client::Tensor a = ctx->FromVector<float>(kiln::ir::ElementType::kF32, {1}, std::vector<float>{1}, "cpu:0");
  kiln::client::Tensor b = ctx->FromVector<float>(kiln::ir::ElementType::kF32, {1}, std::vector<float>{2}, "cpu:0");
  const int64_t ops_before = ctx->metrics().traced_ops;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < chains; ++c) {
    kiln::client::Tensor x = a;
    for (int i = 0; i < length; ++i) x = (i % 2 == 0) ? x + b : x * b;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t ops = ctx->metrics().traced_ops - ops_before;
  std::printf("kiln trace: %lld ops in %.3f s, %.0f ns per op (including release)\n",
              static_cast<long long>(ops), seconds, seconds * 1e9 / ops);

  // A cached lazy step: trace, key (a cache hit after the first), run.
  if (steps > 0) {
    const int step_ops = 1000;
    auto step = [&] {
      kiln::client::Tensor x = a;
      for (int i = 0; i < step_ops; ++i) x = (i % 2 == 0) ? x + b : x * b;
      return ctx->Realize({x});
    };
    for (int i = 0; i < 3; ++i) {
      if (absl::Status st = step(); !st.ok()) {
        std::fprintf(stderr, "lazy step failed: %s\n", std::string(st.message()).c_str());
        return 1;
      }
    }
    const auto step_start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      if (absl::Status st = step(); !st.ok()) return 1;
    }
    const double step_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    std::printf("kiln cached lazy step: %d steps of %d ops in %.3f s, %.0f ns per traced op "
                "(tracing, keying, sending and running)\n",
                steps, step_ops, step_seconds, step_seconds * 1e9 / (steps * step_ops));
  }

  // Eager: every op runs at once (after the first of each kind compiles),
  // first without gradients recorded (as PyTorch's tensors that do not
  // require them), then with them (each value keeps its graph until the
  // next barrier, as PyTorch's autograd keeps its own).
  if (eager_ops <= 0) return 0;
  ctx->set_eager(true);
  auto eager_ns = [&](bool gradients) -> double {
    ctx->set_record_gradients(gradients);
    kiln::client::Tensor x = a;
    for (int i = 0; i < 100; ++i) x = (i % 2 == 0) ? x + b : x * b;  // warm the caches
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < eager_ops; ++i) {
      x = (i % 2 == 0) ? x + b : x * b;
      if (i % 1000 == 999) x = a;
    }
    if (!x.status().ok()) {
      std::fprintf(stderr, "eager op failed: %s\n", std::string(x.status().message()).c_str());
      return -1;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() *
           1e9 / eager_ops;
  };
  (void)eager_ns(false);  // warms the allocator and the program caches
  const double plain = eager_ns(false);
  if (plain < 0) return 1;
  std::printf("kiln eager: %d ops, %.0f ns per op\n", eager_ops, plain);
  const double recorded = eager_ns(true);
  if (recorded < 0) return 1;
  std::printf("kiln eager with gradients: %d ops, %.0f ns per op\n", eager_ops, recorded);
  return 0;
}
