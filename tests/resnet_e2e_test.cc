// examples/resnet end to end, on a small slice of Fashion-MNIST: epochs run
// as device loops fed through the infeed with the losses read from the
// outfeed, through the embedded service and through kiln-server, and a run
// resumed from its checkpoint ends exactly where an uninterrupted run ends.
#include <filesystem>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "tests/process_util.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;

// A small network on 512 images: two steps' worth of compile, then
// milliseconds per step. Kernels are chosen without timing, so that runs
// repeat bit for bit.
const std::string kSmall = "KILN_KERNEL_TUNING=0 " + std::string(KILN_BIN_DIR) +
                           "/resnet --width=4 --train_limit=512 --test_limit=500 "
                           "--batch_size=64 --eval_batch_size=250 --log_every=4";

// The "sum of squares" of the final state that the example prints.
std::string FinalState(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("sum of squares ([0-9.e+-]+)"))) return "";
  return m[1];
}

class ResnetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-resnet-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ResnetTest, EpochsRunAsDeviceLoopsWithTheirLossesStreamedOut) {
  testing::ProcessResult r = RunCommand(kSmall + " --epochs=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Every step's loss came from the outfeed, three epochs of eight steps.
  EXPECT_NE(r.output.find("epoch 1 step 8/8: loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 3 step 8/8: loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in loop mode: 8 steps per epoch program"), std::string::npos);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("final test accuracy ([0-9.]+)")))
      << r.output;
  // Ten classes: learning shows above chance even on this slice, after three
  // epochs (after two, the test accuracy lies anywhere between chance and
  // 0.3 depending on the last bits of the sums).
  EXPECT_GT(std::stod(m[1]), 0.2) << r.output;
  EXPECT_FALSE(FinalState(r.output).empty());
}

// Data parallel in loop mode: each of four simulated TPU cores runs its own
// device loop on a quarter of every batch, fed by its own producer; the
// replicas average their gradients inside the loop and end holding one
// model, which learns.
TEST_F(ResnetTest, DataParallelDeviceLoopsOnFourTpuCores) {
  testing::ProcessResult r =
      RunCommand(kSmall + " --epochs=2 --devices=cpu:1,tpu:4 --device=tpu --replicas=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on tpu:0 and 3 more replicas (16 examples each per step)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 2 step 8/8: loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all 4 replicas hold the same"), std::string::npos) << r.output;
  // It learns: the training loss falls from epoch to epoch, and the test
  // accuracy (batch statistics of 16 examples per replica) is above chance.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("epoch 1: train loss ([0-9.]+)")));
  const double first = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("epoch 2: train loss ([0-9.]+)")));
  EXPECT_LT(std::stod(m[1]), first - 0.2) << r.output;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("final test accuracy ([0-9.]+)")))
      << r.output;
  EXPECT_GT(std::stod(m[1]), 0.12) << r.output;
  // A batch that does not split evenly, and more replicas than devices.
  testing::ProcessResult uneven =
      RunCommand(kSmall + " --epochs=1 --devices=cpu:1,tpu:4 --device=tpu --replicas=3");
  EXPECT_NE(uneven.exit_code, 0);
  EXPECT_NE(uneven.output.find("multiple of --replicas"), std::string::npos) << uneven.output;
  testing::ProcessResult too_many =
      RunCommand(kSmall + " --epochs=1 --devices=cpu:1,tpu:4 --device=tpu --replicas=8");
  EXPECT_NE(too_many.exit_code, 0);
  EXPECT_NE(too_many.output.find("8 replicas need 8"), std::string::npos) << too_many.output;
}

TEST_F(ResnetTest, MixedPrecisionTrains) {
  testing::ProcessResult r = RunCommand(kSmall + " --epochs=2 --compute=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("matrix work in bf16"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("final test accuracy ([0-9.]+)")))
      << r.output;
  EXPECT_GT(std::stod(m[1]), 0.2) << r.output;
  EXPECT_NE(RunCommand(kSmall + " --epochs=1 --compute=f8").exit_code, 0);
}

TEST_F(ResnetTest, ThroughKilnServer) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  testing::ProcessResult r =
      RunCommand(kSmall + " --epochs=1 --server=" + server.address());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("through kiln-server at " + server.address()), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("epoch 1 step 8/8: loss"), std::string::npos) << r.output;
}

TEST_F(ResnetTest, AResumedRunContinuesExactly) {
  const std::string straight = (dir_ / "straight").string();
  const std::string resumed = (dir_ / "resumed").string();
  testing::ProcessResult a = RunCommand(kSmall + " --epochs=2 --checkpoint_dir=" + straight);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  testing::ProcessResult b1 = RunCommand(kSmall + " --epochs=1 --checkpoint_dir=" + resumed);
  ASSERT_EQ(b1.exit_code, 0) << b1.output;
  testing::ProcessResult b2 = RunCommand(kSmall + " --epochs=2 --checkpoint_dir=" + resumed);
  ASSERT_EQ(b2.exit_code, 0) << b2.output;
  EXPECT_NE(b2.output.find("resuming after epoch 1"), std::string::npos) << b2.output;
  EXPECT_EQ(b2.output.find("epoch 1 step"), std::string::npos) << "epoch 1 ran again";
  ASSERT_FALSE(FinalState(a.output).empty()) << a.output;
  EXPECT_EQ(FinalState(b2.output), FinalState(a.output));
  // The first, shorter run ended elsewhere: the comparison is not trivial.
  EXPECT_NE(FinalState(b1.output), FinalState(a.output));
  // A checkpoint of another width is refused, not loaded.
  testing::ProcessResult wrong =
      RunCommand(kSmall + " --width=8 --epochs=3 --checkpoint_dir=" + resumed);
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("is of width 4, not 8"), std::string::npos) << wrong.output;
}

}  // namespace
}  // namespace kiln
