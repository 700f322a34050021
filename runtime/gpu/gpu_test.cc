// The GPU backend on a machine with a CUDA GPU (skipped elsewhere, with the
// reason): memory and transfers, and every module of the corpus computing
// what the CPU backend computes on the same random inputs.
#include <random>
#include <thread>

#include "base/status_macros.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/backend.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/test_util.h"
#include "runtime/host/test_util.h"

namespace kiln::gpu {
namespace {

using host::RandomLiteral;

using ::testing::HasSubstr;

#define SKIP_WITHOUT_GPU()                                                \
  do {                                                                    \
    const GpuCount gpus = CountGpus();                                    \
    if (gpus.count == 0) GTEST_SKIP() << "no GPU: " << gpus.reason;       \
  } while (0)

std::unique_ptr<runtime::Backend> MakeBackend(const std::string& devices,
                                              const std::string& config = "") {
  runtime::RegisterBuiltinBackends();
  auto specs = runtime::ParseBackendSpecs(devices, config);
  EXPECT_TRUE(specs.ok()) << specs.status();
  auto backend = runtime::CreateBackend((*specs)[0]);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

void ExpectNear(const ir::Literal& got, const ir::Literal& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (want.shape().IsTuple()) {
    for (size_t k = 0; k < want.tuple_elements().size(); ++k) {
      ExpectNear(got.tuple_elements()[k], want.tuple_elements()[k],
                 absl::StrCat(what, " element ", k));
    }
    return;
  }
  if (!want.shape().IsArray()) return;
  const bool is_float = IsFloatType(want.shape().type());
  const double rel = want.shape().type() == ElementType::kBF16   ? 1e-2
                     : want.shape().type() == ElementType::kF16 ? 2e-3
                                                                 : 1e-4;
  int reported = 0;
  for (int64_t i = 0; i < want.element_count() && reported < 5; ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    const bool ok = is_float ? ((std::isnan(g) && std::isnan(w)) || g == w ||
                                std::abs(g - w) <= 1e-5 + rel * std::abs(w))
                             : got.GetAsInt64(i) == want.GetAsInt64(i);
    if (!ok) {
      ADD_FAILURE() << what << " element " << i << ": gpu " << g << ", cpu " << w;
      ++reported;
    }
  }
}

// A result buffer's value, tuples element by element.
absl::StatusOr<ir::Literal> Fetch(runtime::Device& device, const runtime::Buffer& buffer) {
  if (buffer.shape().IsToken()) return ir::Literal(buffer.shape());
  if (!buffer.shape().IsTuple()) return device.TransferFromDevice(buffer);
  std::vector<ir::Literal> elements;
  for (int i = 0; i < buffer.tuple_size(); ++i) {
    ASSIGN_OR_RETURN(ir::Literal e, Fetch(device, *buffer.tuple_element(i)));
    elements.push_back(std::move(e));
  }
  return ir::Literal::Tuple(std::move(elements));
}

absl::StatusOr<ir::Literal> RunExecutable(runtime::Device& device,
                                          runtime::Executable& executable,
                                          const std::vector<ir::Literal>& inputs) {
  std::vector<runtime::BufferPtr> args;
  for (const ir::Literal& in : inputs) {
    ASSIGN_OR_RETURN(runtime::BufferPtr b, device.TransferToDevice(in));
    args.push_back(std::move(b));
  }
  runtime::ExecuteOptions options;
  options.infeed_timeout = absl::Seconds(1);
  ASSIGN_OR_RETURN(runtime::BufferPtr result, executable.Execute(device, args, options));
  return Fetch(device, *result);
}

TEST(GpuDeviceTest, TransfersRoundTripAndMemoryIsCharged) {
  SKIP_WITHOUT_GPU();
  auto backend = MakeBackend("gpu:1");
  ASSERT_NE(backend, nullptr);
  runtime::Device& device = *backend->devices()[0];
  EXPECT_EQ(device.name(), "gpu:0");
  std::mt19937_64 rng(7);
  // Larger than one staging chunk, so the transfer goes in pieces.
  const ir::Literal value = RandomLiteral(ir::Shape(ElementType::kF32, {3, 1 << 19}), rng);
  const int64_t before = device.memory_stats().bytes_in_use;
  {
    auto buffer = device.TransferToDevice(value);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(device.memory_stats().bytes_in_use, before + value.shape().ByteSize());
    auto back = device.TransferFromDevice(**buffer);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == value);
  }
  EXPECT_EQ(device.memory_stats().bytes_in_use, before);
}

TEST(GpuDeviceTest, AllocationsPastTheCapacityFailCleanly) {
  SKIP_WITHOUT_GPU();
  auto backend = MakeBackend("gpu:1", "gpu.memory_bytes=1M");
  ASSERT_NE(backend, nullptr);
  runtime::Device& device = *backend->devices()[0];
  auto big = device.Allocate(ir::Shape(ElementType::kF32, {1 << 20}));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  auto small = device.Allocate(ir::Shape(ElementType::kF32, {1 << 10}));
  EXPECT_TRUE(small.ok()) << small.status();
}

TEST(GpuDeviceTest, BuffersOfAnotherDeviceAreRefused) {
  SKIP_WITHOUT_GPU();
  auto gpu = MakeBackend("gpu:1");
  auto cpu = MakeBackend("cpu:1");
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY main {
  a = f32[4] parameter(0)
  ROOT b = f32[4] negate(a)
})");
  ASSERT_TRUE(module.ok());
  ASSERT_TRUE(ir::Verify(**module).ok());
  auto executable = gpu->compiler().Compile(**module, {});
  ASSERT_TRUE(executable.ok()) << executable.status();
  auto host_buffer = cpu->devices()[0]->Allocate(ir::Shape(ElementType::kF32, {4}));
  ASSERT_TRUE(host_buffer.ok());
  auto result = (*executable)->Execute(*gpu->devices()[0], {*host_buffer}, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  auto on_cpu = (*executable)->Execute(*cpu->devices()[0], {*host_buffer}, {});
  ASSERT_FALSE(on_cpu.ok());
  EXPECT_THAT(on_cpu.status().message(), HasSubstr("gpu"));
}

// Compiles module `text` once for the CPU and once for the GPU backend and
// runs both `executions` times, each time on new random inputs (drawn from
// `seed`), comparing the results. The GPU's first execution runs step by
// step; later ones replay the program's CUDA graph where it has one.
void ExpectGpuMatchesCpu(const std::string& text, uint64_t seed, const std::string& what,
                         int executions = 3) {
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(ir::Verify(**module).ok());
  auto gpu = MakeBackend("gpu:1");
  auto cpu = MakeBackend("cpu:1");
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  auto on_gpu = gpu->compiler().Compile(**module, {});
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  auto on_cpu = cpu->compiler().Compile(**module, {});
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  std::mt19937_64 rng(seed);
  for (int run = 0; run < executions; ++run) {
    std::vector<ir::Literal> inputs;
    for (const ir::Shape& s : (*module)->entry()->ParameterShapes()) {
      inputs.push_back(RandomLiteral(s, rng));
    }
    auto want = RunExecutable(*cpu->devices()[0], **on_cpu, inputs);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = RunExecutable(*gpu->devices()[0], **on_gpu, inputs);
    ASSERT_TRUE(got.ok()) << what << " execution " << run << ": " << got.status();
    ExpectNear(*got, *want, absl::StrCat(what, " seed ", seed, " execution ", run));
  }
}

class GpuCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuCorpusTest, MatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  for (uint64_t seed : {1, 2}) ExpectGpuMatchesCpu(CorpusText(GetParam()), seed, GetParam());
}

// A program replayed as a CUDA graph: results that are a parameter, a
// constant, the same value twice and views, intermediates sharing arena
// bytes, each execution on new inputs; executions from two threads at once
// (one replays the graph, the other finds it busy and runs step by step);
// the graph's memory is returned when the executable goes.
TEST(GpuGraphTest, ReplaysMatchTheCpuBackendAndReleaseTheirMemory) {
  SKIP_WITHOUT_GPU();
  const std::string text = R"(
HloModule graph_results
add_f32 {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT s = f32[] add(p0, p1)
}
ENTRY main {
  x = f32[64,32] parameter(0)
  w = f32[32,16] parameter(1)
  b = f32[16] parameter(2)
  h = f32[64,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[64,16] broadcast(b), dimensions={1}
  z = f32[64,16] add(h, bb)
  zero = f32[] constant(0)
  zeros = f32[64,16] broadcast(zero), dimensions={}
  r = f32[64,16] maximum(z, zeros)
  t = f32[16,64] transpose(r), dimensions={1,0}
  g = f32[16,32] dot(t, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[16] reduce(r, zero), dimensions={0}, to_apply=add_f32
  flat = f32[1024] reshape(r)
  k = f32[3] constant({1, 2, 3})
  ROOT out = (f32[16,32], f32[16], f32[1024], f32[1024], f32[32,16], f32[3]) tuple(g, s, flat, flat, w, k)
})";
  ExpectGpuMatchesCpu(text, 5, "graph results", 5);

  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  auto gpu = MakeBackend("gpu:1");
  auto cpu = MakeBackend("cpu:1");
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  runtime::Device& device = *gpu->devices()[0];
  const int64_t before = device.memory_stats().bytes_in_use;
  {
    auto executable = gpu->compiler().Compile(**module, {});
    ASSERT_TRUE(executable.ok()) << executable.status();
    auto reference = cpu->compiler().Compile(**module, {});
    ASSERT_TRUE(reference.ok()) << reference.status();
    std::mt19937_64 rng(9);
    std::vector<std::vector<ir::Literal>> inputs(8);
    std::vector<ir::Literal> want;
    for (auto& set : inputs) {
      for (const ir::Shape& s : (*module)->entry()->ParameterShapes()) {
        set.push_back(RandomLiteral(s, rng));
      }
      auto w = RunExecutable(*cpu->devices()[0], **reference, set);
      ASSERT_TRUE(w.ok()) << w.status();
      want.push_back(*std::move(w));
    }
    // Two executions first, so that the graph exists before the threads.
    for (int i = 0; i < 2; ++i) {
      auto got = RunExecutable(device, **executable, inputs[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectNear(*got, want[i], absl::StrCat("execution ", i));
    }
    std::vector<absl::StatusOr<ir::Literal>> got(inputs.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = 2 + t; i < inputs.size(); i += 2) {
          got[i] = RunExecutable(device, **executable, inputs[i]);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 2; i < inputs.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      ExpectNear(*got[i], want[i], absl::StrCat("threaded execution ", i));
    }
    EXPECT_GT(device.memory_stats().bytes_in_use, before);  // constants, arena, parameters
  }
  EXPECT_EQ(device.memory_stats().bytes_in_use, before);
}

// Reductions long enough that a block of threads shares each output
// (reduce with an init that is not the identity, max, integer sums that
// wrap, and a convolution with few outputs, as a filter gradient has).
TEST(GpuReductionTest, BlockReductionsMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  ExpectGpuMatchesCpu(R"(
HloModule long_reductions
add_f32 {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT s = f32[] add(p0, p1)
}
max_f32 {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT m = f32[] maximum(p0, p1)
}
add_s8 {
  p0 = s8[] parameter(0)
  p1 = s8[] parameter(1)
  ROOT s = s8[] add(p0, p1)
}
ENTRY main {
  x = f32[3,7000] parameter(0)
  n = s8[2,3000] parameter(1)
  img = f32[16,12,12,3] parameter(2)
  grad = f32[16,8,8,5] parameter(3)
  three = f32[] constant(3)
  low = f32[] constant(-1e30)
  zero8 = s8[] constant(0)
  sum = f32[3] reduce(x, three), dimensions={1}, to_apply=add_f32
  all = f32[] reduce(x, three), dimensions={0,1}, to_apply=add_f32
  mx = f32[3] reduce(x, low), dimensions={1}, to_apply=max_f32
  wrap = s8[2] reduce(n, zero8), dimensions={1}, to_apply=add_s8
  filter = f32[5,5,3,5] convolution(img, grad), window={size=8x8}, dim_labels=f01b_i01o->01bf
  ROOT out = (f32[3], f32[], f32[3], s8[2], f32[5,5,3,5]) tuple(sum, all, mx, wrap, filter)
})",
                      11, "long reductions");
}

INSTANTIATE_TEST_SUITE_P(Corpus, GpuCorpusTest, ::testing::ValuesIn(CorpusModules()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::gpu
