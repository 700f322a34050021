// The TPU simulator against its peer, the CPU backend, in the same run:
//  1. simulator overhead: wall time of the same program on tpu:0 and cpu:0
//     (a 512x512 matmul and the Fashion-MNIST training steps), and the ratio;
//  2. the predicted (simulated) step time of the Fashion-MNIST models on one
//     core and data-parallel on eight, against the roofline of the cost
//     model's own formulas: max(matrix flops / peak, HBM bytes / bandwidth).
//
//   tpusim_benchmark [steps]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "client/client.h"
#include "client/lazy.h"
#include "compiler/ir/hlo_parser.h"
#include "embedded/embedded.h"
#include "examples/fashion_mnist/trainer.h"
#include "runtime/tpusim/chip_config.h"
#include "base/logging.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace client = kiln::client;
namespace examples = kiln::examples;
namespace embedded = kiln::embedded;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Run {
  double wall_ms = 0;  // per step, after the first (compile) step
  std::optional<kiln::v1::ExecutionProfileProto> profile;
};

// Times `steps` training steps of `model` (batch 128) on `devices` (one:
// single device; several: data-parallel replicas).
Run TrainSteps(client::Client* c, const std::string& model_name,
               const std::vector<std::string>& devices, int steps) {
  auto ctx = client::LazyContext::Create(c);
  auto model = examples::MakeModel(model_name, ctx.get(), devices[0], 1);
  examples::TrainerOptions options;
  options.learning_rate = 0.01;
  if (devices.size() > 1) options.replica_devices = devices;
  examples::Trainer trainer(ctx.get(), model->get(), devices[0], options);
  const int batch = 128;
  std::vector<float> images(batch * 784);
  std::vector<int32_t> labels(batch);
  std::mt19937 rng(3);
  for (float& v : images) v = float(rng() % 256) / 255.0f;
  for (int32_t& l : labels) l = int32_t(rng() % 10);
  auto step = [&]() {
    auto r = trainer.TrainStep(images.data(), labels.data(), batch);
    if (!r.ok()) {
      std::fprintf(stderr, "step failed: %s\n", std::string(r.status().message()).c_str());
      std::exit(1);
    }
  };
  step();  // compiles
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  return {1e3 * Since(start) / steps, ctx->metrics().last_profile};
}

double Roofline(const kiln::v1::ExecutionProfileProto& p, const kiln::tpusim::ChipConfig& chip) {
  return std::max(p.matrix_flops() / chip.PeakMatrixFlops(), p.hbm_bytes() / chip.hbm_bandwidth);
}

void PrintProfile(const char* what, const kiln::v1::ExecutionProfileProto& p,
                  const kiln::tpusim::ChipConfig& chip) {
  const double roof = Roofline(p, chip);
  std::printf("  %-22s predicted %8.3f ms  roofline %8.3f ms  predicted/roofline %6.2f\n", what,
              1e3 * p.simulated_seconds(), 1e3 * roof,
              roof > 0 ? p.simulated_seconds() / roof : 0.0);
  std::printf("  %-22s matrix %.3f  vector %.3f  hbm %.3f  interconnect %.3f  infeed %.3f ms;"
              " matrix units %.1f%% busy, padding %.0f%% of HBM bytes\n",
              "", 1e3 * p.matrix_seconds(), 1e3 * p.vector_seconds(), 1e3 * p.hbm_seconds(),
              1e3 * p.interconnect_seconds(), 1e3 * p.infeed_seconds(),
              100 * p.matrix_utilization(), 100 * p.padding_waste());
}

}  // namespace

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: tpusim_benchmark [STEPS]\nTPU-simulator overhead against the cpu backend and predicted step times against the roofline.");
  kiln::logging::SetLevel("warn").IgnoreError();
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("tpusim benchmark: %d timed steps each; OPENBLAS_CORETYPE=%s; "
              "peer: the cpu backend, same program, same process\n",
              steps, coretype ? coretype : "(unset)");
  embedded::Options options;
  options.devices = "cpu:1,tpu:8";
  auto c = embedded::Connect(options);
  if (!c.ok()) return 1;
  const kiln::tpusim::ChipConfig chip;

  // A plain matmul through the client.
  auto module = kiln::ir::ParseModule(R"(HloModule mm
ENTRY main {
  a = f32[512,512] parameter(0)
  b = f32[512,512] parameter(1)
  ROOT d = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
  std::printf("\n1. simulator overhead (wall time per execution)\n");
  double mm_ms[2] = {0, 0};
  std::optional<kiln::v1::ExecutionProfileProto> mm_profile;
  const char* mm_devices[2] = {"cpu:0", "tpu:0"};
  for (int d = 0; d < 2; ++d) {
    auto exe = (*c)->Compile(**module, mm_devices[d]);
    kiln::ir::Literal m(kiln::ir::Shape(kiln::ir::ElementType::kF32, {512, 512}));
    auto a = (*c)->TransferToDevice(m, mm_devices[d]);
    auto b = (*c)->TransferToDevice(m, mm_devices[d]);
    if (!exe.ok() || !a.ok() || !b.ok()) return 1;
    (void)(*c)->Execute(**exe, {*a, *b});
    const auto start = Clock::now();
    const int reps = 5 * steps;
    for (int i = 0; i < reps; ++i) {
      auto r = (*c)->Execute(**exe, {*a, *b});
      if (!r.ok()) return 1;
      mm_profile = r->profile;
    }
    mm_ms[d] = 1e3 * Since(start) / reps;
  }
  std::printf("  %-22s cpu %8.3f ms  tpusim %8.3f ms  tpusim/cpu %5.2f\n", "matmul 512x512",
              mm_ms[0], mm_ms[1], mm_ms[1] / mm_ms[0]);
  Run runs[2][2];
  const char* models[2] = {"mlp", "lenet"};
  for (int m = 0; m < 2; ++m) {
    runs[m][0] = TrainSteps(c->get(), models[m], {"cpu:0"}, steps);
    runs[m][1] = TrainSteps(c->get(), models[m], {"tpu:0"}, steps);
    std::printf("  %-22s cpu %8.3f ms  tpusim %8.3f ms  tpusim/cpu %5.2f\n",
                absl::StrCat(models[m], " train step, b128").c_str(), runs[m][0].wall_ms,
                runs[m][1].wall_ms, runs[m][1].wall_ms / runs[m][0].wall_ms);
  }

  std::printf("\n2. predicted time on a simulated %s core against the roofline\n",
              chip.name.c_str());
  if (mm_profile) PrintProfile("matmul 512x512", *mm_profile, chip);
  std::vector<std::string> eight;
  for (int i = 0; i < 8; ++i) eight.push_back(absl::StrCat("tpu:", i));
  for (int m = 0; m < 2; ++m) {
    if (runs[m][1].profile) {
      PrintProfile(absl::StrCat(models[m], ", 1 core").c_str(), *runs[m][1].profile, chip);
    }
    Run replicated = TrainSteps(c->get(), models[m], eight, steps);
    if (replicated.profile) {
      PrintProfile(absl::StrCat(models[m], ", 8 cores").c_str(), *replicated.profile, chip);
      std::printf("  %-22s wall %.3f ms per step on this host; simulated 1 core / 8 cores %.2f\n",
                  "", replicated.wall_ms,
                  runs[m][1].profile->simulated_seconds() /
                      replicated.profile->simulated_seconds());
    }
  }
  return 0;
}
