// The host backend's kernels against what they are built on, in one run:
//  - dot: a one-instruction program (Kiln: allocation, dispatch and the
//    kernel) against OpenBLAS's and oneDNN's sgemm called directly on the
//    same shapes (the training shapes of the MLP and LeNet-5);
//  - a fused elementwise chain (x + s * y over 16M floats) against a STREAM
//    triad loop over the same bytes;
//  - SGD with momentum on a 784x512 weight (the MLP's first layer): one
//    loop writing the velocity and the weights (loop-fusion's multi-output
//    loops), the same module with one loop per result, and a C++ loop;
//  - the MLP's dense layers with their bias and relu fused into the
//    product (dot-bias-fusion) against the product and a loop apart;
//  - per-instruction overhead: a chain of 2,000 scalar adds against the
//    same adds in a C++ loop.
// Prints every time and ratio; the thread count is --threads (default 1).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/passes/cpu_pipeline.h"
#include "dnnl.h"
#include "runtime/compute_threads.h"
#include "runtime/host/compute_workers.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_device.h"
#include "runtime/host/threads.h"
#include "runtime/host/vector_loops.h"

ABSL_FLAG(int32_t, threads, 1, "compute threads (OpenBLAS, oneDNN)");
ABSL_FLAG(int32_t, repeats, 20, "timed runs per measurement (the best is kept)");

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double Best(F&& f) {
  f();  // warm up
  double best = 1e30;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

struct Program {
  std::shared_ptr<kiln::runtime::Executable> exe;
  std::vector<kiln::runtime::BufferPtr> args;
};

// Compiles as the CPU backend does (the pass pipeline, then the program);
// with `multi_output_fusion` false, each loop writes one result; with
// `dot_bias_fusion` false, a layer's bias and relu are a loop after the
// product.
Program Compile(kiln::host::HostDevice& device, const std::string& text,
                bool multi_output_fusion = true, bool dot_bias_fusion = true) {
  auto module = kiln::ir::ParseModule(text);
  if (!module.ok()) {
    std::fprintf(stderr, "%s\n", std::string(module.status().message()).c_str());
    std::exit(1);
  }
  kiln::passes::LoopFusionOptions fusion;
  fusion.multi_output = multi_output_fusion;
  if (auto st = kiln::passes::CpuPipeline(false, fusion, dot_bias_fusion)->Run(module->get());
      !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.status().message()).c_str());
    std::exit(1);
  }
  Program p;
  p.exe = *kiln::host::CompileProgram("cpu", **module, {});
  for (const kiln::ir::Shape& shape : (*module)->entry()->ParameterShapes()) {
    kiln::ir::Literal lit(shape);
    float* v = lit.data<float>();
    for (int64_t i = 0; i < shape.ElementCount(); ++i) v[i] = 0.001f * (i % 97);
    p.args.push_back(*device.TransferToDevice(lit));
  }
  return p;
}

double Run(kiln::host::HostDevice& device, const Program& p) {
  return Best([&] {
    auto out = p.exe->Execute(device, p.args, {});
    if (!out.ok()) std::exit(1);
  });
}

void Dots(kiln::host::HostDevice& device) {
  struct Shape {
    int m, n, k;
    bool ta, tb;
  };
  const Shape shapes[] = {{128, 512, 784, false, false}, {128, 512, 512, false, false},
                          {128, 784, 512, false, true},  {784, 512, 128, true, false},
                          {512, 512, 128, true, false},  {128, 120, 400, false, false},
                          {400, 120, 128, true, false},  {1024, 1024, 1024, false, false}};
  std::printf("dot (f32)                 kiln      openblas  onednn    kiln/best\n");
  for (const Shape& s : shapes) {
    const std::string lhs = s.ta ? absl::StrCat(s.k, ",", s.m) : absl::StrCat(s.m, ",", s.k);
    const std::string rhs = s.tb ? absl::StrCat(s.n, ",", s.k) : absl::StrCat(s.k, ",", s.n);
    const Program p = Compile(
        device, absl::StrCat("ENTRY e {\n a = f32[", lhs, "] parameter(0)\n b = f32[", rhs,
                             "] parameter(1)\n ROOT d = f32[", s.m, ",", s.n,
                             "] dot(a, b), lhs_contracting_dims={", s.ta ? 0 : 1,
                             "}, rhs_contracting_dims={", s.tb ? 1 : 0, "}\n}"));
    std::vector<float> a(int64_t{s.m} * s.k, 0.5f), b(int64_t{s.k} * s.n, 0.25f),
        c(int64_t{s.m} * s.n);
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const double kiln = Run(device, p);
    // The libraries run on the compute worker Kiln's programs run on, and so
    // on its OpenMP team: a second team (this thread's) would make libgomp
    // count more threads than cores and cut every worker's spin short.
    double blas = 0, dnnl = 0;
    kiln::host::RunOnComputeWorker([&] {
      kiln::host::UseComputeThreads();
      blas = Best([&] {
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                    s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), lda,
                    b.data(), ldb, 0.0f, c.data(), s.n);
      });
      dnnl = Best([&] {
        dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data(), lda,
                   b.data(), ldb, 0.0f, c.data(), s.n);
      });
    });
    std::printf("%4d x %4d x %4d %c%c    %7.1f us %7.1f us %7.1f us  %.2f\n", s.m, s.n, s.k,
                s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', kiln * 1e6, blas * 1e6, dnnl * 1e6,
                kiln / std::min(blas, dnnl));
  }
}

void Stream(kiln::host::HostDevice& device) {
  constexpr int64_t n = int64_t{1} << 24;
  const Program p = Compile(device, absl::StrCat(R"(ENTRY e {
 x = f32[)", n, R"(] parameter(0)
 y = f32[)", n, R"(] parameter(1)
 s = f32[] constant(3)
 b = f32[)", n, R"(] broadcast(s), dimensions={}
 m = f32[)", n, R"(] multiply(b, y)
 ROOT r = f32[)", n, R"(] add(x, m)
})"));
  std::vector<float> x(n, 1.0f), y(n, 2.0f), z(n);
  const double kiln = Run(device, p);
  const double triad = Best([&] {
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + 3.0f * y[i];
  });
  const double bytes = 3.0 * n * sizeof(float);
  std::printf("\nfused x + 3*y over %lld floats: kiln %.2f ms (%.1f GB/s) | STREAM triad %.2f ms "
              "(%.1f GB/s) | ratio of bandwidths kiln/triad %.2f\n",
              static_cast<long long>(n), kiln * 1e3, bytes / kiln * 1e-9, triad * 1e3,
              bytes / triad * 1e-9, triad / kiln);
}

void Momentum(kiln::host::HostDevice& device) {
  constexpr int64_t n = 784 * 512;
  const std::string text = R"(ENTRY e {
 w = f32[784,512] parameter(0)
 v = f32[784,512] parameter(1)
 g = f32[784,512] parameter(2)
 mu = f32[] constant(0.9)
 mub = f32[784,512] broadcast(mu), dimensions={}
 mv = f32[784,512] multiply(v, mub)
 v2 = f32[784,512] add(mv, g)
 lr = f32[] constant(0.01)
 lrb = f32[784,512] broadcast(lr), dimensions={}
 step = f32[784,512] multiply(v2, lrb)
 w2 = f32[784,512] subtract(w, step)
 ROOT t = (f32[784,512], f32[784,512]) tuple(w2, v2)
})";
  const Program one = Compile(device, text);
  const Program two = Compile(device, text, /*multi_output_fusion=*/false);
  std::vector<float> w(n, 1.0f), v(n, 0.5f), g(n, 0.25f), w2(n), v2(n);
  double kiln_one = 1e30, kiln_two = 1e30, loop = 1e30;
  // Interleaved, so that the machine's drift meets all three alike.
  for (int round = 0; round < 5; ++round) {
    kiln_one = std::min(kiln_one, Run(device, one));
    kiln_two = std::min(kiln_two, Run(device, two));
    loop = std::min(loop, Best([&] {
      for (int64_t i = 0; i < n; ++i) {
        const float nv = v[i] * 0.9f + g[i];
        v2[i] = nv;
        w2[i] = w[i] - nv * 0.01f;
      }
    }));
  }
  std::printf("\nSGD momentum on 784x512: kiln one loop %.1f us | kiln a loop per result %.1f us "
              "| C++ loop %.1f us | one/two %.2f, one/loop %.2f\n",
              kiln_one * 1e6, kiln_two * 1e6, loop * 1e6, kiln_one / kiln_two, kiln_one / loop);
}

// The MLP's two hidden layers, relu(x w + bias), as one call
// (dot-bias-fusion: the product, then its rows plus the bias and relu in
// place) and as the product and a loop apart; interleaved.
void DenseLayers(kiln::host::HostDevice& device) {
  std::printf("\ndense layer relu(x w + b)   fused     apart     fused/apart\n");
  for (const auto& [m, k, n] : {std::tuple<int, int, int>{128, 784, 512}, {128, 512, 512}}) {
    const std::string text = absl::StrCat(
        "ENTRY e {\n x = f32[", m, ",", k, "] parameter(0)\n w = f32[", k, ",", n,
        "] parameter(1)\n bias = f32[", n, "] parameter(2)\n d = f32[", m, ",", n,
        "] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n b = f32[", m, ",", n,
        "] broadcast(bias), dimensions={1}\n s = f32[", m, ",", n, "] add(d, b)\n z = f32[] "
        "constant(0)\n zb = f32[", m, ",", n, "] broadcast(z), dimensions={}\n ROOT r = f32[", m,
        ",", n, "] maximum(s, zb)\n}");
    const Program fused = Compile(device, text);
    const Program apart = Compile(device, text, true, /*dot_bias_fusion=*/false);
    double t_fused = 1e30, t_apart = 1e30;
    for (int round = 0; round < 5; ++round) {
      t_fused = std::min(t_fused, Run(device, fused));
      t_apart = std::min(t_apart, Run(device, apart));
    }
    std::printf("%4dx%4d -> %4d           %6.1f us %6.1f us %.3f\n", m, k, n, t_fused * 1e6,
                t_apart * 1e6, t_fused / t_apart);
  }
}

void Overhead(kiln::host::HostDevice& device) {
  constexpr int kOps = 2000;
  std::string text = "ENTRY e {\n x = f32[] parameter(0)\n one = f32[] constant(1)\n v0 = f32[] add(x, one)\n";
  for (int i = 1; i < kOps; ++i) {
    // Alternating ops so that nothing folds a chain of adds.
    text += absl::StrCat(" v", i, " = f32[] ", i % 2 ? "multiply" : "add", "(v", i - 1, ", one)\n");
  }
  text += absl::StrCat(" ROOT r = f32[] negate(v", kOps - 1, ")\n}");
  const Program p = Compile(device, text);
  const double kiln = Run(device, p);
  volatile float one = 1.0f;
  const double loop = Best([&] {
    float v = 0.5f;
    for (int i = 0; i < kOps; ++i) v = i % 2 ? v * one : v + one;
    volatile float sink = v;
    (void)sink;
  });
  std::printf("\n%d scalar ops in one program: kiln %.1f us, %.3f us per instruction | C++ loop "
              "%.2f us | kiln/loop %.0f\n",
              kOps + 1, kiln * 1e6, kiln * 1e6 / (kOps + 1), loop * 1e6, kiln / loop);
}

}  // namespace

int main(int argc, char** argv) {
  kiln::ParseFlags(argc, argv,
                   "host_kernels_benchmark: the host backend's dot, fused elementwise and "
                   "per-instruction costs against the libraries and loops they stand for.");
  const int threads = absl::GetFlag(FLAGS_threads);
  kiln::runtime::SetComputeThreads(threads);
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
  std::printf("threads %d, vector unit %s, best of %d runs each\n", threads,
              kiln::host::vec::VectorUnit(), absl::GetFlag(FLAGS_repeats));
  kiln::host::HostDevice device("cpu", 0, int64_t{8} << 30, 4);
  Dots(device);
  Stream(device);
  Momentum(device);
  DenseLayers(device);
  Overhead(device);
  return 0;
}
