// Fits y = 3x - 2 by gradient descent on a kiln-server: each step is one
// cached program on the server. Usage: fit_line [HOST:PORT]
#include <cstdio>

#include "client/autodiff.h"
#include "client/lazy.h"
#include "client/optimizers.h"

using namespace kiln::client;

int main(int argc, char** argv) {
  auto client = Client::Connect(argc > 1 ? argv[1] : "127.0.0.1:8470");
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.status().ToString().c_str()), 1;
  auto ctx = LazyContext::Create(client->get());
  std::vector<float> xs, ys;
  for (int i = 0; i < 64; ++i) xs.push_back(i / 32.0f - 1), ys.push_back(3 * xs.back() - 2);
  const auto f32 = kiln::ir::ElementType::kF32;
  Tensor x = ctx->FromVector(f32, {64, 1}, xs, "cpu:0"), y = ctx->FromVector(f32, {64, 1}, ys, "cpu:0");
  Tensor w = ctx->FromVector<float>(f32, {1, 1}, {0}, "cpu:0"), b = ctx->FromVector<float>(f32, {1, 1}, {0}, "cpu:0");
  Sgd sgd(0.5);
  for (int step = 1; step <= 60; ++step) {
    Tensor err = Matmul(x, w) + b - y, loss = Mean(err * err);
    std::vector<Tensor> next = *sgd.Step({w, b}, *Grad(loss, {w, b}));
    w = next[0], b = next[1];
    if (!ctx->Barrier("cpu:0").ok()) return 1;
    if (step % 20 == 0) std::printf("step %d loss %.6f\n", step, *loss.Item());
  }
  std::printf("w %.4f b %.4f\n", *w.Item(), *b.Item());
}
