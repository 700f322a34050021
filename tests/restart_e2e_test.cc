// End to end: kiln-server killed with SIGKILL in the middle of a training
// run and started again on the same port. fashion_mnist --checkpoint_dir
// waits for it, resumes from its last checkpoint, finishes with the numbers
// of an uninterrupted run, and the restarted server loads the training step
// from its persistent compile cache instead of compiling it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

class RestartE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("kiln_restart_", getpid(), "_", rand()))
               .string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

std::vector<std::string> TrainArgs(const std::string& server, const std::string& checkpoints) {
  std::vector<std::string> args = {
      std::string(KILN_BIN_DIR) + "/fashion_mnist", "--server=" + server, "--model=mlp",
      "--epochs=2", "--train_limit=5120", "--test_limit=1000", "--log_every=10",
      "--report=false", "--seed=3"};
  if (!checkpoints.empty()) {
    args.push_back("--checkpoint_dir=" + checkpoints);
    args.push_back("--checkpoint_every=15");
    args.push_back("--reconnect_seconds=60");
  }
  return args;
}

// Lines a process prints until it exits (at most `timeout_ms` in all);
// `on_line` sees each as it comes.
std::vector<std::string> ReadAll(int fd, int timeout_ms,
                                 const std::function<void(const std::string&)>& on_line) {
  std::vector<std::string> lines;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string line;
  while (std::chrono::steady_clock::now() < deadline) {
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (!testing::ReadLine(fd, &line, std::max(left, 1))) break;
    lines.push_back(line);
    on_line(line);
  }
  return lines;
}

std::string Last(const std::vector<std::string>& lines, const std::string& prefix) {
  std::string found;
  for (const std::string& l : lines) {
    if (l.rfind(prefix, 0) == 0) found = l;
  }
  return found;
}

// "epoch 2: train loss ..., test accuracy 0.xxxx, 1.23 s, ..." up to the
// time, which differs between runs.
std::string Numbers(const std::string& epoch_line) {
  const size_t accuracy = epoch_line.find("test accuracy");
  return accuracy == std::string::npos ? "" : epoch_line.substr(0, accuracy + 21);
}

TEST_F(RestartE2E, TrainingResumesFromItsCheckpointAfterTheServerIsKilled) {
  const std::string cache = "--compile_cache_dir=" + dir_ + "/cache";
  // The uninterrupted run, for its numbers.
  std::string uninterrupted;
  {
    testing::ServerProcess server({cache});
    ASSERT_FALSE(server.address().empty());
    int fd = -1;
    const pid_t pid = testing::SpawnWithStdout(TrainArgs(server.address(), ""), &fd);
    std::vector<std::string> lines = ReadAll(fd, 240000, [](const std::string&) {});
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uninterrupted = Numbers(Last(lines, "epoch 2: train loss"));
    ASSERT_FALSE(uninterrupted.empty());
  }

  auto server = std::make_unique<testing::ServerProcess>(std::vector<std::string>{cache});
  ASSERT_FALSE(server->address().empty());
  const std::string address = server->address();
  int fd = -1;
  const pid_t trainer = testing::SpawnWithStdout(TrainArgs(address, dir_ + "/ckpt"), &fd);
  bool killed = false;
  int checkpoints_before_kill = 0;
  std::vector<std::string> lines = ReadAll(fd, 300000, [&](const std::string& line) {
    // After the second checkpoint: SIGKILL, then a new server on the port.
    if (!killed && line.find("checkpoint of step") != std::string::npos &&
        ++checkpoints_before_kill == 2) {
      kill(server->pid(), SIGKILL);
      server->Stop();
      killed = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      server = std::make_unique<testing::ServerProcess>(
          std::vector<std::string>{cache, "--listen=" + address});
    }
  });
  int status = 0;
  waitpid(trainer, &status, 0);
  close(fd);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  ASSERT_TRUE(killed) << all;
  ASSERT_FALSE(server->address().empty()) << "the server did not restart on " << address;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << all;
  EXPECT_NE(all.find("lost the server"), std::string::npos) << all;
  // From the second checkpoint or a later one (the trainer runs on while
  // the server is killed).
  const size_t resumed = all.find("resumed from the checkpoint of step ");
  ASSERT_NE(resumed, std::string::npos) << all;
  const int resumed_step = std::atoi(all.c_str() + resumed + 36);
  EXPECT_GE(resumed_step, 30) << all;
  EXPECT_EQ(resumed_step % 15, 0) << all;
  // The same numbers as the run that was never interrupted.
  EXPECT_EQ(Numbers(Last(lines, "epoch 2: train loss")), uninterrupted) << all;

  // The restarted server loaded the step instead of compiling it.
  auto c = client::Client::Connect(address);
  ASSERT_TRUE(c.ok()) << c.status();
  auto m = (*c)->Metrics();
  ASSERT_TRUE(m.ok());
  int64_t loaded = 0, compiled = 0;
  for (const auto& counter : m->counters()) {
    if (counter.name() == "persistent_cache_hits") loaded = counter.value();
    if (counter.name().rfind("persistent_cache_misses", 0) == 0) compiled += counter.value();
  }
  EXPECT_GE(loaded, 1) << all;
  // Every program the resumed run needed was known from the first run.
  EXPECT_EQ(compiled, 0) << all;
}

}  // namespace
}  // namespace kiln
