// The kiln CLI end to end: check, run, and clean failures on bad input.
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / absl::StrCat("kiln_cli_", getpid(), "_",
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::string WriteNpy(const std::string& name, const ir::Literal& lit) {
    fs::path p = dir_ / name;
    EXPECT_TRUE(client::WriteNpyFile(p.string(), lit).ok());
    return p.string();
  }
  testing::ProcessResult Kiln(const std::string& args) {
    return testing::RunCommand(absl::StrCat(testing::KilnBinary(), " ", args), 60);
  }

  fs::path dir_;
};

constexpr char kAddModule[] = R"(HloModule adder
ENTRY main {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  ROOT s = f32[3] add(x, y)
})";

// Every binary answers --help with its usage on stdout and exit 0; the
// flag-based ones list each flag with its default.
TEST(HelpTest, EveryBinaryPrintsItsUsageAndExitsZero) {
  struct Binary {
    const char* name;
    std::vector<const char*> expected;
  };
  const std::vector<Binary> binaries = {
      {"kiln", {"usage:", "kiln run FILE.hlo"}},
      {"kiln-server", {"kiln-server", "--devices", "(default: auto)", "--listen",
                       "(default: 127.0.0.1:8470)", "--backend_config"}},
      {"fashion_mnist", {"fashion_mnist", "--model", "(default: mlp)", "--epochs"}},
      {"infeed_training", {"infeed_training", "--model", "--server"}},
      {"feed_producer", {"usage: feed_producer"}},
      {"lease_client", {"usage: lease_client"}},
  };
  for (const Binary& b : binaries) {
    for (const char* flag : {"--help", "-h"}) {
      auto r = testing::RunCommand(
          absl::StrCat(KILN_BIN_DIR, "/", b.name, " ", flag), 60);
      EXPECT_EQ(r.exit_code, 0) << b.name << " " << flag << ": " << r.output;
      for (const char* text : b.expected) {
        EXPECT_NE(r.output.find(text), std::string::npos)
            << b.name << " " << flag << " lacks '" << text << "': " << r.output;
      }
    }
  }
  // Abseil's own flags are not listed as the program's.
  auto server = testing::RunCommand(absl::StrCat(KILN_BIN_DIR, "/kiln-server --help"), 60);
  EXPECT_EQ(server.output.find("--flagfile"), std::string::npos) << server.output;
}

TEST_F(CliTest, CheckPrintsCanonicalTextAndFingerprint) {
  auto r = Kiln("check " + Write("m.hlo", kAddModule));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ROOT %s = f32[3] add(%x, %y)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fingerprint: "), std::string::npos);
  // The same program under other names has the same fingerprint.
  std::string renamed(kAddModule);
  renamed.replace(renamed.find("adder"), 5, "other");
  auto r2 = Kiln("check " + Write("m2.hlo", renamed));
  EXPECT_EQ(r.output.substr(r.output.find("fingerprint: ")),
            r2.output.substr(r2.output.find("fingerprint: ")));
}

TEST_F(CliTest, RunWritesOutputsAndSummaries) {
  std::string x = WriteNpy("x.npy", ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  std::string y = WriteNpy("y.npy", ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {10, 20, 30}));
  auto r = Kiln(absl::StrCat("run ", Write("m.hlo", kAddModule), " --input=", x, " --input=", y,
                             " --output_dir=", (dir_ / "out").string(), " --repeat=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out_0: f32[3] [11, 22, 33]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("run 3: "), std::string::npos);
  auto out = client::ReadNpyFile((dir_ / "out/out_0.npy").string());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->data<float>()[2], 33.0f);
}

TEST_F(CliTest, RandomInputs) {
  auto r = Kiln(absl::StrCat("run ", Write("m.hlo", kAddModule), " --random_inputs=7"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out_0: f32[3]"), std::string::npos);
}

TEST_F(CliTest, EmptyTupleWritesNothing) {
  auto r = Kiln(absl::StrCat("run ", Write("m.hlo", "ENTRY e {\n ROOT t = () tuple()\n}"),
                             " --output_dir=", (dir_ / "out").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out/out_0.npy"));
}

// Each bad input exits 1 with a one-line message naming the problem.
void ExpectCleanFailure(const testing::ProcessResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST_F(CliTest, BadInputsFailCleanly) {
  std::string m = Write("m.hlo", kAddModule);
  std::string x = WriteNpy("x.npy", ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  std::string wrong_shape =
      WriteNpy("w.npy", ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2}));
  std::string wrong_type =
      WriteNpy("t.npy", ir::Literal::FromVector<int>(ir::ElementType::kS32, {3}, {1, 2, 3}));
  ExpectCleanFailure(Kiln("run " + Write("bad.hlo", "ENTRY e {\n ROOT x = f32[2] frob(y)\n}")),
                     "unknown or unsupported opcode 'frob'");
  ExpectCleanFailure(Kiln("run " + Write("bad2.hlo", "ENTRY e {\n x = f32[2] parameter(0)\n ROOT y = f32[3] negate(x)\n}")),
                     "declared shape f32[3]");
  ExpectCleanFailure(Kiln("run " + Write("bad3.hlo", "ENTRY e {\n x = f32[2] parameter(0)\n ROOT y = f32[2] negate(x), bogus={1}\n}")),
                     "unsupported attribute 'bogus'");
  ExpectCleanFailure(Kiln("run " + Write("bad4.hlo", "ENTRY e {\n x = f32[2] parameter(0\n")), "line");
  ExpectCleanFailure(Kiln("run " + m + " --input=" + x), "takes 2 inputs, got 1");
  ExpectCleanFailure(Kiln("run " + m + " --input=" + x + " --input=" + wrong_shape),
                     "input 1");
  ExpectCleanFailure(Kiln("run " + m + " --input=" + x + " --input=" + wrong_type),
                     "element type s32");
  ExpectCleanFailure(Kiln("run " + m + " --input=" + x + " --input=" + Write("junk.npy", "garbage")),
                     "invalid .npy");
  ExpectCleanFailure(Kiln("run " + (dir_ / "missing.hlo").string()), "cannot open");
  ExpectCleanFailure(Kiln("run " + m + " --random_inputs=1 --device=quantum:7"), "no backend of kind 'quantum' (this build has cpu");
  ExpectCleanFailure(Kiln("run " + m + " --frobnicate"), "unknown flag");
}

TEST_F(CliTest, RunOnTpuPrintsTheSimulatedProfile) {
  const std::string m = Write("dot.hlo", R"(HloModule dot
ENTRY main {
  a = f32[256,512] parameter(0)
  b = f32[512,256] parameter(1)
  ROOT d = f32[256,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
  auto r = Kiln("run " + m + " --random_inputs=3 --device=tpu:0 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: simulated time on tpu:0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("matrix unit"), std::string::npos) << r.output;
  // 2 * 256 * 512 * 256 useful flops.
  EXPECT_NE(r.output.find("67108864 flops"), std::string::npos) << r.output;
  // A dry run prices the same program without inputs and without running
  // it: the same flops, and no output printed.
  auto dry = Kiln("run " + m + " --device=tpu:0 --profile --dry_run");
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("profile: predicted time (not run) on tpu:0"), std::string::npos)
      << dry.output;
  EXPECT_NE(dry.output.find("67108864 flops"), std::string::npos) << dry.output;
  EXPECT_EQ(dry.output.find("out_0"), std::string::npos) << dry.output;
  ExpectCleanFailure(Kiln("run " + m + " --device=cpu:0 --profile --dry_run"),
                     "cpu:0 has no cost model");
  ExpectCleanFailure(Kiln("run " + m + " --device=tpu:0 --dry_run"), "--dry_run goes with --profile");
  auto cpu = Kiln("run " + m + " --random_inputs=3 --profile");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("cpu:0 has no cost model"), std::string::npos) << cpu.output;
  ExpectCleanFailure(Kiln("run " + Write("wide.hlo", "ENTRY e {\n x = f64[2] parameter(0)\n ROOT y = f64[2] negate(x)\n}") +
                          " --random_inputs=1 --device=tpu:0"),
                     "TPUs have no f64");
}

TEST_F(CliTest, ServerModeMatchesInProcessAndReportsStats) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  std::string x = WriteNpy("x.npy", ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}));
  std::string y = WriteNpy("y.npy", ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {10, 20, 30}));
  const std::string run = absl::StrCat("run ", Write("m.hlo", kAddModule), " --input=", x, " --input=", y);
  auto local = Kiln(run);
  auto remote = Kiln(run + " --server=" + server.address());
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  EXPECT_EQ(remote.output, local.output);
  auto again = Kiln(run + " --server=" + server.address());
  ASSERT_EQ(again.exit_code, 0);
  auto devices = Kiln("devices --server=" + server.address());
  ASSERT_EQ(devices.exit_code, 0) << devices.output;
  EXPECT_NE(devices.output.find("cpu:0    kind=cpu ordinal=0"), std::string::npos) << devices.output;
  auto stats = Kiln("stats --server=" + server.address());
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  // Two runs of one program: one compile, then a cache hit.
  EXPECT_NE(stats.output.find("compile_cache_misses"), std::string::npos) << stats.output;
  EXPECT_NE(stats.output.find("compile_cache_hits                       1"), std::string::npos)
      << stats.output;
  EXPECT_NE(stats.output.find("execute "), std::string::npos);
  ExpectCleanFailure(Kiln("devices --server=127.0.0.1:1 --connect_timeout=1"), "cannot reach");
}

TEST_F(CliTest, StarvedInfeedFailsInsteadOfHanging) {
  auto r = Kiln("run " + Write("feed.hlo", R"(ENTRY e {
  t = token[] after-all()
  i = (f32[2], token[]) infeed(t)
  ROOT x = f32[2] get-tuple-element(i), index=0
})"));
  ExpectCleanFailure(r, "infeed");
}

}  // namespace
}  // namespace kiln
