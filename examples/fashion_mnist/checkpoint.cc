#include "examples/fashion_mnist/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "client/npy.h"

namespace kiln::examples {
namespace {

namespace fs = std::filesystem;

std::string Manifest(const Checkpoint& c) {
  return absl::StrFormat(
      "model %s\nepoch %d\nstep %d\nglobal_step %d\nloss_sum %.17g\ncorrect %.17g\nparams %d\n"
      "velocity %d\n",
      c.point.model, c.point.epoch, c.point.step, c.point.global_step, c.point.loss_sum,
      c.point.correct, c.params.size(), c.velocity.size());
}

// Writes `text` to `path` through a temporary file and a rename.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp-", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& dir, const Checkpoint& checkpoint) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string name = absl::StrFormat("step-%06d", checkpoint.point.global_step);
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp-", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  for (size_t i = 0; i < checkpoint.params.size(); ++i) {
    RETURN_IF_ERROR(client::WriteNpyFile(absl::StrCat(tmp, "/param_", i, ".npy"),
                                         checkpoint.params[i]));
  }
  for (size_t i = 0; i < checkpoint.velocity.size(); ++i) {
    RETURN_IF_ERROR(client::WriteNpyFile(absl::StrCat(tmp, "/velocity_", i, ".npy"),
                                         checkpoint.velocity[i]));
  }
  RETURN_IF_ERROR(WriteAtomically(tmp + "/manifest.txt", Manifest(checkpoint)));
  const std::string final_path = absl::StrCat(dir, "/", name);
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  RETURN_IF_ERROR(WriteAtomically(dir + "/LATEST", name + "\n"));
  // Keep the two newest, by step number (names grow past six digits).
  std::vector<std::pair<int64_t, std::string>> saved;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    int64_t step = 0;
    if (n.rfind("step-", 0) == 0 && absl::SimpleAtoi(n.substr(5), &step)) {
      saved.emplace_back(step, n);
    }
  }
  std::sort(saved.begin(), saved.end());
  for (size_t i = 0; i + 2 < saved.size(); ++i) fs::remove_all(dir + "/" + saved[i].second, ec);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Checkpoint>> LoadLatestCheckpoint(const std::string& dir) {
  std::ifstream latest(dir + "/LATEST");
  std::string name;
  if (!latest || !std::getline(latest, name) || name.empty()) return std::optional<Checkpoint>();
  const std::string path = absl::StrCat(dir, "/", name);
  std::ifstream manifest(path + "/manifest.txt");
  if (!manifest) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has no manifest"));
  }
  Checkpoint c;
  int64_t params = -1, velocity = -1;
  std::string line;
  while (std::getline(manifest, line)) {
    std::vector<std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (kv.size() != 2) continue;
    bool ok = true;
    if (kv[0] == "model") c.point.model = kv[1];
    else if (kv[0] == "epoch") ok = absl::SimpleAtoi(kv[1], &c.point.epoch);
    else if (kv[0] == "step") ok = absl::SimpleAtoi(kv[1], &c.point.step);
    else if (kv[0] == "global_step") ok = absl::SimpleAtoi(kv[1], &c.point.global_step);
    else if (kv[0] == "loss_sum") ok = absl::SimpleAtod(kv[1], &c.point.loss_sum);
    else if (kv[0] == "correct") ok = absl::SimpleAtod(kv[1], &c.point.correct);
    else if (kv[0] == "params") ok = absl::SimpleAtoi(kv[1], &params);
    else if (kv[0] == "velocity") ok = absl::SimpleAtoi(kv[1], &velocity);
    if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, "/manifest.txt: bad line '", line, "'"));
  }
  if (params < 0 || velocity < 0 || c.point.epoch < 1 || c.point.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, "/manifest.txt is incomplete"));
  }
  for (int64_t i = 0; i < params; ++i) {
    ASSIGN_OR_RETURN(ir::Literal v, client::ReadNpyFile(absl::StrCat(path, "/param_", i, ".npy")));
    c.params.push_back(std::move(v));
  }
  for (int64_t i = 0; i < velocity; ++i) {
    ASSIGN_OR_RETURN(ir::Literal v,
                     client::ReadNpyFile(absl::StrCat(path, "/velocity_", i, ".npy")));
    c.velocity.push_back(std::move(v));
  }
  return std::optional<Checkpoint>(std::move(c));
}

}  // namespace kiln::examples
