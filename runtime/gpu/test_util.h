// What the GPU backend's tests share: the modules of tests/data/hlo.
#ifndef KILN_RUNTIME_GPU_TEST_UTIL_H_
#define KILN_RUNTIME_GPU_TEST_UTIL_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::gpu {

inline const std::filesystem::path kCorpus =
    std::filesystem::path(KILN_SOURCE_DIR) / "tests/data/hlo";

// The corpus modules' names, sorted.
inline std::vector<std::string> CorpusModules() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus)) {
    if (entry.path().extension() == ".hlo") names.push_back(entry.path().stem());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The text of corpus module `name`.
inline std::string CorpusText(const std::string& name) {
  std::ifstream in(kCorpus / (name + ".hlo"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_TEST_UTIL_H_
