// The HLO corpus (tests/data/hlo): its modules, their NumPy-computed
// expectations and how closely outputs must match, shared by the tests that
// run it on each backend.
#ifndef KILN_TESTS_HLO_CORPUS_H_
#define KILN_TESTS_HLO_CORPUS_H_

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"

namespace kiln {

namespace fs = std::filesystem;

inline const fs::path kCorpus = fs::path(KILN_SOURCE_DIR) / "tests/data/hlo";

inline std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().extension() == ".hlo") names.push_back(entry.path().stem());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// How closely a module's float outputs must match. The default suits the
// random f32 data of the first modules. The edge-value modules (edges_*)
// have no absolute term, so subnormals and tiny results count, and check the
// sign of zero; their relative term is a few units in the last place (ulp)
// of the module's float type, because the expectation is the float64 result
// rounded once, while libm's float pow and atan2 may land an ulp away, and
// rounding that to a half type can make one ulp of the half type. The
// types_* modules use data whose every result is exact in the output type.
struct Tolerance {
  double abs = 1e-5;
  double rel = 1e-4;
  bool signed_zero = false;
};

inline Tolerance ToleranceFor(const std::string& module) {
  if (module == "edges_float_f64") return {0, 4 * 0x1p-52, true};
  if (module == "edges_float_f32") return {0, 4 * 0x1p-23, true};
  if (module == "edges_float_f16") return {0, 0x1p-10, true};  // 1 ulp of f16
  if (module == "edges_float_bf16") return {0, 0x1p-7, true};  // 1 ulp of bf16
  // libm's and the vector loops' transcendental functions are within a few
  // ulp; NaN, infinities and signed zeros still match exactly.
  if (module == "edges_unary_f64") return {0, 8 * 0x1p-52, true};
  if (module == "edges_unary_f32") return {0, 8 * 0x1p-23, true};
  if (module == "edges_unary_f16") return {0, 0x1p-10, true};  // 1 ulp of f16
  if (module == "edges_unary_bf16") return {0, 0x1p-7, true};  // 1 ulp of bf16
  if (module.starts_with("edges_") || module.starts_with("types_"))
    return {0, 0, true};
  return {};
}

inline void ExpectClose(const ir::Literal& got, const ir::Literal& want,
                 const Tolerance& tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const bool is_float = ir::IsFloatType(want.shape().type());
  int reported = 0;
  for (int64_t i = 0; i < want.element_count() && reported < 5; ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    bool ok;
    if (is_float) {
      ok = (std::isnan(g) && std::isnan(w)) || g == w ||
           std::abs(g - w) <= tol.abs + tol.rel * std::abs(w);
      if (tol.signed_zero && w == 0 && g == 0)
        ok = std::signbit(g) == std::signbit(w);
    } else {
      ok = got.GetAsInt64(i) == want.GetAsInt64(i);
    }
    if (!ok) {
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
      ++reported;
    }
  }
}

// Runs corpus module `name` through `kiln run` with `flags` and compares
// each output with the NumPy expectation.
inline void CheckCorpusModule(const std::string& name, const std::string& flags) {
  const fs::path data = kCorpus / name;
  ASSERT_TRUE(fs::is_directory(data)) << "no data for " << name;
  std::string command = absl::StrCat(testing::KilnBinary(), " run ", (kCorpus / (name + ".hlo")).string(), flags);
  for (int i = 0; fs::exists(data / absl::StrCat("in_", i, ".npy")); ++i) {
    absl::StrAppend(&command, " --input=", (data / absl::StrCat("in_", i, ".npy")).string());
  }
  const fs::path out_dir = fs::temp_directory_path() / absl::StrCat("kiln_corpus_", getpid(), "_", name, flags.empty() ? "" : "_dev");
  fs::remove_all(out_dir);
  absl::StrAppend(&command, " --output_dir=", out_dir.string());
  testing::ProcessResult run = testing::RunCommand(command);
  ASSERT_EQ(run.exit_code, 0) << command << "\n" << run.output;
  int outputs = 0;
  for (; fs::exists(data / absl::StrCat("expected_", outputs, ".npy")); ++outputs) {
    auto want = client::ReadNpyFile((data / absl::StrCat("expected_", outputs, ".npy")).string());
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = client::ReadNpyFile((out_dir / absl::StrCat("out_", outputs, ".npy")).string());
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, *want, ToleranceFor(name),
                absl::StrCat(name, " output ", outputs));
  }
  EXPECT_GT(outputs, 0);
  EXPECT_FALSE(fs::exists(out_dir / absl::StrCat("out_", outputs, ".npy")))
      << "more outputs than expected";
  fs::remove_all(out_dir);
}

}  // namespace kiln

#endif  // KILN_TESTS_HLO_CORPUS_H_
