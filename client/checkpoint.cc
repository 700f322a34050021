#include "client/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "client/npy.h"

namespace kiln::client {
namespace {

namespace fs = std::filesystem;

bool IsName(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
           c == ':' || c == '-';
  });
}

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
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& dir, int64_t step,
                            const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                            const std::map<std::string, std::string>& meta, int keep) {
  std::string manifest = absl::StrCat("step ", step, "\n");
  for (const auto& [key, value] : meta) {
    if (!IsName(key) || value.find('\n') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad checkpoint meta entry '", key, "'"));
    }
    absl::StrAppend(&manifest, "meta ", key, " ", value, "\n");
  }
  // Every tensor of a device computed by one program: tensors that come
  // out of one computation (a device loop's state) are computed together,
  // not once per tensor read.
  std::map<std::string, std::vector<Tensor>> by_device;
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr || !tensor->defined()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no value"));
    }
    RETURN_IF_ERROR(WithContext(tensor->status(), name));
    by_device[tensor->device()].push_back(*tensor);
  }
  for (const auto& [device, group] : by_device) {
    RETURN_IF_ERROR(group.front().context()->Realize(group));
  }
  std::vector<std::pair<std::string, ir::Literal>> values;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    if (!IsName(name)) return absl::InvalidArgumentError(absl::StrCat("bad tensor name '", name, "'"));
    ASSIGN_OR_RETURN(ir::Literal value, tensor->ToHost());
    absl::StrAppend(&manifest, "tensor ", name, " t", i, ".npy\n");
    values.emplace_back(absl::StrCat("t", i, ".npy"), std::move(value));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  const std::string name = absl::StrCat("step-", step);
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp-", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  }
  for (const auto& [file, value] : values) {
    absl::Status st = WriteNpyFile(absl::StrCat(tmp, "/", file), value);
    if (!st.ok()) return absl::FailedPreconditionError(st.message());
  }
  RETURN_IF_ERROR(WriteAtomically(tmp + "/manifest.txt", manifest));
  const std::string final_path = absl::StrCat(dir, "/", name);
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  }
  RETURN_IF_ERROR(WriteAtomically(dir + "/LATEST", name + "\n"));
  // Keep the newest, by step number.
  std::vector<std::pair<int64_t, std::string>> saved;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    int64_t s = 0;
    if (n.rfind("step-", 0) == 0 && absl::SimpleAtoi(n.substr(5), &s)) saved.emplace_back(s, n);
  }
  std::sort(saved.begin(), saved.end());
  for (size_t i = 0; i + std::max(keep, 1) < saved.size(); ++i) {
    fs::remove_all(dir + "/" + saved[i].second, ec);
  }
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
  bool has_step = false;
  std::string line;
  while (std::getline(manifest, line)) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat(path, "/manifest.txt: bad line '", line, "'"));
    };
    if (f[0] == "step") {
      if (f.size() != 2 || !absl::SimpleAtoi(f[1], &c.step)) return bad();
      has_step = true;
    } else if (f[0] == "meta") {
      if (f.size() < 2) return bad();
      c.meta[f[1]] = f.size() == 3 ? f[2] : "";
    } else if (f[0] == "tensor") {
      if (f.size() != 3 || !IsName(f[1]) || f[2].find('/') != std::string::npos) return bad();
      ASSIGN_OR_RETURN(ir::Literal value, ReadNpyFile(absl::StrCat(path, "/", f[2])));
      c.tensors.emplace(f[1], std::move(value));
    } else if (!line.empty()) {
      return bad();
    }
  }
  if (!has_step) return absl::InvalidArgumentError(absl::StrCat(path, "/manifest.txt has no step"));
  return std::optional<Checkpoint>(std::move(c));
}

absl::Status RestoreTensors(const Checkpoint& checkpoint,
                            const std::vector<std::pair<std::string, Tensor*>>& targets,
                            LazyContext* ctx, const std::string& device) {
  for (const auto& [name, target] : targets) {
    auto it = checkpoint.tensors.find(name);
    if (it == checkpoint.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no tensor '", name, "'"));
    }
    // Values are saved as the tensors stand (a reduced-precision tensor's
    // as f32) and stored again as the target is.
    const ir::Shape logical(target->dtype(), target->shape().dims());
    if (it->second.shape() != logical) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's '", name, "' is ", it->second.shape().ToString(), ", not ",
          logical.ToString()));
    }
  }
  for (const auto& [name, target] : targets) {
    const bool reduced = target->IsReducedPrecision();
    *target = ctx->FromLiteral(checkpoint.tensors.at(name), device);
    if (reduced) *target = target->ToReducedPrecision();
  }
  return absl::OkStatus();
}

}  // namespace kiln::client
