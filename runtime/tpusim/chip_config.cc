#include "runtime/tpusim/chip_config.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace kiln::tpusim {
namespace {

template <typename T>
absl::Status ParseNumber(absl::string_view text, T* out, bool positive) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || (positive && !(v > 0)) || !(v >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a ",
                                                   positive ? "positive" : "non-negative",
                                                   " number"));
  }
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

}  // namespace

absl::Status ChipConfig::Apply(absl::string_view text) {
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("chip config line ", line_number, ": expected 'name = value'"));
    }
    const absl::string_view key = absl::StripAsciiWhitespace(kv[0]);
    const absl::string_view value = absl::StripAsciiWhitespace(kv[1]);
    absl::Status st;
    if (key == "name") {
      name = std::string(value);
    } else if (key == "cores") {
      st = ParseNumber(value, &cores, true);
    } else if (key == "hbm_bytes") {
      st = ParseNumber(value, &hbm_bytes, true);
    } else if (key == "matrix_unit_size") {
      st = ParseNumber(value, &matrix_unit_size, true);
    } else if (key == "matrix_units") {
      st = ParseNumber(value, &matrix_units, true);
    } else if (key == "clock_hz") {
      st = ParseNumber(value, &clock_hz, true);
    } else if (key == "vector_ops_per_cycle") {
      st = ParseNumber(value, &vector_ops_per_cycle, true);
    } else if (key == "transcendental_ops") {
      st = ParseNumber(value, &transcendental_ops, true);
    } else if (key == "hbm_bandwidth") {
      st = ParseNumber(value, &hbm_bandwidth, true);
    } else if (key == "interconnect_bandwidth") {
      st = ParseNumber(value, &interconnect_bandwidth, true);
    } else if (key == "interconnect_latency") {
      st = ParseNumber(value, &interconnect_latency, false);
    } else if (key == "infeed_bandwidth") {
      st = ParseNumber(value, &infeed_bandwidth, true);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("chip config line ", line_number, ": unknown field '", key, "'"));
    }
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chip config line ", line_number, ", ", key, ": ", st.message()));
    }
  }
  if (cores > 1024) return absl::InvalidArgumentError("chip config: at most 1024 cores");
  return absl::OkStatus();
}

std::string ChipConfig::ToString() const {
  return absl::StrCat("name = ", name, "\ncores = ", cores, "\nhbm_bytes = ", hbm_bytes,
                      "\nmatrix_unit_size = ", matrix_unit_size,
                      "\nmatrix_units = ", matrix_units, "\nclock_hz = ", clock_hz,
                      "\nvector_ops_per_cycle = ", vector_ops_per_cycle,
                      "\ntranscendental_ops = ", transcendental_ops,
                      "\nhbm_bandwidth = ", hbm_bandwidth,
                      "\ninterconnect_bandwidth = ", interconnect_bandwidth,
                      "\ninterconnect_latency = ", interconnect_latency,
                      "\ninfeed_bandwidth = ", infeed_bandwidth, "\n");
}

absl::StatusOr<ChipConfig> LoadChipConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read chip config ", path));
  std::stringstream text;
  text << in.rdbuf();
  ChipConfig config;
  absl::Status st = config.Apply(text.str());
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.message()));
  return config;
}

}  // namespace kiln::tpusim
