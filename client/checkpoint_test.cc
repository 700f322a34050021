// Checkpoints of named tensors: a round trip, the newest kept, atomicity
// against a save cut short, and refusals.
#include "client/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect();
    ctx_ = LazyContext::Create(client_.get());
    dir_ = (fs::temp_directory_path() / absl::StrCat("kiln_ckpt_", getpid(), "_", rand())).string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  Tensor Vector(std::vector<float> v) {
    return ctx_->FromVector<float>(ir::ElementType::kF32, {static_cast<int64_t>(v.size())}, v,
                                   "cpu:0");
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
  std::string dir_;
};

TEST_F(CheckpointTest, SavesAndRestoresNamedTensorsAndMeta) {
  EXPECT_FALSE(LoadLatestCheckpoint(dir_)->has_value());
  Tensor w = Vector({1.5f, -2, 0.25f});
  Tensor v = Vector({7});
  Tensor computed = w * 2.0;  // read (and run) by the save
  ASSERT_TRUE(SaveCheckpoint(dir_, 10, {{"w", &w}, {"v", &v}, {"c", &computed}},
                             {{"epoch", "3"}, {"loss", "0.5"}})
                  .ok());
  auto loaded = LoadLatestCheckpoint(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  const Checkpoint& c = **loaded;
  EXPECT_EQ(c.step, 10);
  EXPECT_EQ(c.meta.at("epoch"), "3");
  EXPECT_EQ(c.tensors.at("c").ToText(), "{3, -4, 0.5}");

  Tensor w2 = Vector({0, 0, 0}), v2 = Vector({0});
  ASSERT_TRUE(RestoreTensors(c, {{"w", &w2}, {"v", &v2}}, ctx_.get(), "cpu:0").ok());
  EXPECT_EQ(w2.ToHost()->ToText(), "{1.5, -2, 0.25}");
  EXPECT_EQ(v2.ToHost()->ToText(), "{7}");

  // A missing name or another shape sets nothing.
  Tensor other = Vector({0, 0}), untouched = Vector({9});
  EXPECT_EQ(RestoreTensors(c, {{"v", &untouched}, {"w", &other}}, ctx_.get(), "cpu:0").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(untouched.ToHost()->ToText(), "{9}");
  EXPECT_FALSE(RestoreTensors(c, {{"nope", &untouched}}, ctx_.get(), "cpu:0").ok());
  EXPECT_FALSE(SaveCheckpoint(dir_, 11, {{"bad name", &w}}).ok());
}

TEST_F(CheckpointTest, TheNewestAreKeptByStepNumberAndAHalfSaveIsIgnored) {
  Tensor w = Vector({1});
  for (int64_t step : {5, 99999, 100000, 1000000}) {
    ASSERT_TRUE(SaveCheckpoint(dir_, step, {{"w", &w}}, {}, /*keep=*/2).ok());
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"LATEST", "step-100000", "step-1000000"}));
  // A save killed before its rename leaves only a temporary directory:
  // the newest complete checkpoint still loads.
  fs::create_directories(dir_ + "/.step-2000000.tmp-1");
  std::ofstream(dir_ + "/.step-2000000.tmp-1/t0.npy") << "partial";
  auto loaded = LoadLatestCheckpoint(dir_);
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->step, 1000000);
  // LATEST naming a damaged checkpoint is an error, not a silent restart.
  std::ofstream(dir_ + "/step-1000000/manifest.txt", std::ios::trunc) << "tensor w\n";
  EXPECT_EQ(LoadLatestCheckpoint(dir_).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::client
