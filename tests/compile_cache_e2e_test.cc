// End to end: kiln-server's persistent compile cache (--compile_cache_dir)
// across restarts, with a convolution whose kernel the first compile chose
// by timing.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "compiler/ir/hlo_parser.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using client::Client;

// A convolution (timed against other kernels at compile time) feeding a
// reduction: what a training step is made of.
constexpr char kProgram[] = R"(
HloModule conv_step
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,12,12,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  c = f32[8,10,10,4] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(c, z), dimensions={0,1,2}, to_apply=add
})";

int64_t Counter(Client& c, const std::string& name) {
  auto m = c.Metrics();
  EXPECT_TRUE(m.ok()) << m.status();
  for (const auto& counter : m->counters()) {
    if (counter.name() == name) return counter.value();
  }
  return 0;
}

ir::Literal Iota(std::vector<int64_t> dims, float scale) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  // Values whose sums round differently in different orders, so that two
  // kernels of the convolution give different last bits.
  for (int64_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, dims, v);
}

// Compiles and runs kProgram on a fresh server with `flags`; the result and
// the executable's cache flags.
struct Outcome {
  std::vector<float> result;
  bool persistent_hit = false;
  bool memory_hit = false;
  int64_t loaded = 0;
  std::string compile_log;
};

Outcome RunOnce(const std::vector<std::string>& flags, uint64_t seed = 0,
                const std::string& device = "cpu:0") {
  Outcome out;
  testing::ServerProcess server(flags);
  EXPECT_FALSE(server.address().empty());
  auto c = Client::Connect(server.address());
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return out;
  auto module = ir::ParseModule(kProgram);
  EXPECT_TRUE(module.ok()) << module.status();
  auto exe = (*c)->Compile(**module, device, seed);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return out;
  out.persistent_hit = (*exe)->persistent_cache_hit();
  out.memory_hit = (*exe)->cache_hit();
  auto x = (*c)->TransferToDevice(Iota({8, 12, 12, 3}, 0.3f), device);
  auto k = (*c)->TransferToDevice(Iota({3, 3, 3, 4}, 0.7f), device);
  EXPECT_TRUE(x.ok() && k.ok());
  auto r = (*c)->Execute(**exe, {*x, *k});
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    auto lit = (*c)->TransferFromDevice(*r->outputs[0]);
    EXPECT_TRUE(lit.ok());
    if (lit.ok()) out.result.assign(lit->data<float>(), lit->data<float>() + 4);
  }
  out.loaded = Counter(**c, "persistent_cache_hits");
  return out;
}

class CompileCacheE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("kiln_cc_", getpid(), "_", rand()))
               .string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CompileCacheE2E, ARestartedServerLoadsAKnownProgramWithoutCompiling) {
  const std::string flag = "--compile_cache_dir=" + dir_;
  Outcome first = RunOnce({flag});
  EXPECT_FALSE(first.persistent_hit);
  EXPECT_EQ(first.loaded, 0);
  ASSERT_EQ(first.result.size(), 4u);
  size_t entries = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir_)) {
    entries += f.path().extension() == ".kca";
  }
  EXPECT_EQ(entries, 1u);

  Outcome second = RunOnce({flag});
  EXPECT_TRUE(second.persistent_hit);
  EXPECT_FALSE(second.memory_hit);
  EXPECT_EQ(second.loaded, 1);
  // The loaded program computes exactly what the compiled one did: the
  // same kernels, chosen by the first compile's timing.
  EXPECT_EQ(second.result, first.result);

  // Without the directory nothing is loaded; the compile times the kernels
  // again and may choose another, whose sums round differently.
  Outcome memory_only = RunOnce({});
  EXPECT_FALSE(memory_only.persistent_hit);
  ASSERT_EQ(memory_only.result.size(), first.result.size());
  for (size_t i = 0; i < first.result.size(); ++i) {
    EXPECT_NEAR(memory_only.result[i], first.result[i], 1e-4 * std::abs(first.result[i]));
  }
}

TEST_F(CompileCacheE2E, SimulatedTpuProgramsAreKeptPerChip) {
  const std::string flag = "--compile_cache_dir=" + dir_;
  const std::string devices = "--devices=cpu:1,tpu:1";
  Outcome first = RunOnce({flag, devices}, 0, "tpu:0");
  EXPECT_FALSE(first.persistent_hit);
  ASSERT_EQ(first.result.size(), 4u);
  Outcome second = RunOnce({flag, devices}, 0, "tpu:0");
  EXPECT_TRUE(second.persistent_hit);
  EXPECT_EQ(second.result, first.result);
  // Another chip is another key: compiled, not loaded.
  Outcome other_chip =
      RunOnce({flag, devices, "--backend_config=tpu.matrix_unit_size=256"}, 0, "tpu:0");
  EXPECT_FALSE(other_chip.persistent_hit);
}

TEST_F(CompileCacheE2E, AMissIsCountedByThePartOfTheKeyThatDiffered) {
  const std::string flag = "--compile_cache_dir=" + dir_;
  RunOnce({flag}, /*seed=*/5);
  testing::ServerProcess server({flag});
  auto c = Client::Connect(server.address());
  ASSERT_TRUE(c.ok()) << c.status();
  auto module = ir::ParseModule(kProgram);
  ASSERT_TRUE(module.ok());
  auto other_seed = (*c)->Compile(**module, "cpu:0", /*rng_seed=*/6);
  ASSERT_TRUE(other_seed.ok()) << other_seed.status();
  EXPECT_FALSE((*other_seed)->persistent_cache_hit());
  EXPECT_EQ(Counter(**c, "persistent_cache_misses{options}"), 1);
  auto same_seed = (*c)->Compile(**module, "cpu:0", /*rng_seed=*/5);
  ASSERT_TRUE(same_seed.ok());
  EXPECT_TRUE((*same_seed)->persistent_cache_hit());
  auto other_module = ir::ParseModule(
      "ENTRY e {\n x = f32[2] parameter(0)\n ROOT y = f32[2] negate(x)\n}");
  ASSERT_TRUE(other_module.ok());
  ASSERT_TRUE((*c)->Compile(**other_module, "cpu:0").ok());
  EXPECT_EQ(Counter(**c, "persistent_cache_misses{absent}"), 1);
}

TEST_F(CompileCacheE2E, AnUnusableDirectoryStopsTheServerWithItsName) {
  testing::ServerProcess server({"--compile_cache_dir=/proc/kiln-no-such-dir"});
  EXPECT_TRUE(server.address().empty());
  EXPECT_NE(server.Stop(), 0);
}

}  // namespace
}  // namespace kiln
