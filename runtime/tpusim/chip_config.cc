#include "runtime/tpusim/chip_config.h"

#include "base/format.h"

#include <algorithm>
#include <fstream>
#include <type_traits>
#include <variant>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace kiln::tpusim {
namespace {

// Every numeric field, in file order: its name, where it lives, and whether
// zero is allowed.
using FieldPtr = std::variant<int ChipConfig::*, int64_t ChipConfig::*, double ChipConfig::*>;
struct Field {
  absl::string_view name;
  FieldPtr ptr;
  bool zero_allowed = false;
};
const std::vector<Field>& Fields() {
  static const auto* const kFields = new std::vector<Field>{
      {"cores", &ChipConfig::cores},
      {"hbm_bytes", &ChipConfig::hbm_bytes},
      {"matrix_unit_size", &ChipConfig::matrix_unit_size},
      {"matrix_units", &ChipConfig::matrix_units},
      {"clock_hz", &ChipConfig::clock_hz},
      {"vector_ops_per_cycle", &ChipConfig::vector_ops_per_cycle},
      {"transcendental_ops", &ChipConfig::transcendental_ops},
      {"hbm_bandwidth", &ChipConfig::hbm_bandwidth},
      {"matrix_efficiency", &ChipConfig::matrix_efficiency},
      {"hbm_efficiency", &ChipConfig::hbm_efficiency},
      {"region_overhead", &ChipConfig::region_overhead, true},
      {"chips_x", &ChipConfig::chips_x},
      {"chips_y", &ChipConfig::chips_y},
      {"cores_per_chip", &ChipConfig::cores_per_chip},
      {"ici_link_bandwidth", &ChipConfig::ici_link_bandwidth},
      {"on_chip_bandwidth", &ChipConfig::on_chip_bandwidth},
      {"interconnect_latency", &ChipConfig::interconnect_latency, true},
      {"host_link_bandwidth", &ChipConfig::host_link_bandwidth},
      {"dcn_bandwidth", &ChipConfig::dcn_bandwidth},
      {"dcn_latency", &ChipConfig::dcn_latency, true},
  };
  return *kFields;
}

absl::Status SetField(ChipConfig& config, const Field& field, absl::string_view text) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !(v >= 0) || (!field.zero_allowed && v == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a ", field.zero_allowed ? "non-negative" : "positive", " number"));
  }
  std::visit([&](auto member) { config.*member = static_cast<std::remove_reference_t<
                                    decltype(config.*member)>>(v); },
             field.ptr);
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
    if (key == "name") {
      name = std::string(value);
      continue;
    }
    const auto& fields = Fields();
    auto field = std::find_if(fields.begin(), fields.end(),
                              [&](const Field& f) { return f.name == key; });
    if (field == fields.end()) {
      const absl::string_view replaced =
          key == "interconnect_bandwidth" ? " (now ici_link_bandwidth, per link)"
          : key == "infeed_bandwidth"     ? " (now host_link_bandwidth, per chip)"
                                          : "";
      return absl::InvalidArgumentError(absl::StrCat(
          "chip config line ", line_number, ": unknown field '", key, "'", replaced));
    }
    if (absl::Status st = SetField(*this, *field, value); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chip config line ", line_number, ", ", key, ": ", st.message()));
    }
  }
  if (cores > 1024) return absl::InvalidArgumentError("chip config: at most 1024 cores");
  if (matrix_efficiency > 1 || hbm_efficiency > 1) {
    return absl::InvalidArgumentError("chip config: an efficiency is a share, at most 1");
  }
  if (static_cast<int64_t>(chips_x) * chips_y * cores_per_chip < cores) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chip config: ", cores, " cores do not fit chips_x x chips_y x cores_per_chip = ",
        chips_x, " x ", chips_y, " x ", cores_per_chip));
  }
  return absl::OkStatus();
}

std::string ChipConfig::ToString() const {
  std::string out = absl::StrCat("name = ", name, "\n");
  for (const Field& field : Fields()) {
    std::visit(
        [&](auto member) {
          // Doubles in their shortest exact form, so that Apply reads back
          // exactly this config.
          if constexpr (std::is_same_v<decltype(this->*member), const double&>) {
            absl::StrAppend(&out, field.name, " = ", FormatShortest(this->*member), "\n");
          } else {
            absl::StrAppend(&out, field.name, " = ", this->*member, "\n");
          }
        },
        field.ptr);
  }
  return out;
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
