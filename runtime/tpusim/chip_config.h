// The simulated TPU chip: one config names every number the simulator and
// its cost model use. The default mimics a TPU v3-8 (four chips, eight
// TensorCores); a config file overrides any field.
#ifndef KILN_RUNTIME_TPUSIM_CHIP_CONFIG_H_
#define KILN_RUNTIME_TPUSIM_CHIP_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::tpusim {

struct ChipConfig {
  std::string name = "TPU v3-8";
  int cores = 8;
  int64_t hbm_bytes = int64_t{16} << 30;  // per core
  int matrix_unit_size = 128;             // a matrix unit is size x size
  int matrix_units = 2;                   // per core
  double clock_hz = 940e6;
  // Elementwise operations the vector unit finishes per cycle (8 sublanes x
  // 128 lanes) and what a transcendental (exp, log, tanh, ...) costs in them.
  int vector_ops_per_cycle = 1024;
  int transcendental_ops = 4;
  double hbm_bandwidth = 450e9;          // bytes/s per core
  double interconnect_bandwidth = 70e9;  // bytes/s per core
  double interconnect_latency = 2e-6;    // seconds per hop
  double infeed_bandwidth = 4e9;         // host to core, bytes/s

  // Peak matrix-unit throughput of one core, flop/s (a multiply-add is 2).
  double PeakMatrixFlops() const {
    return 2.0 * matrix_units * matrix_unit_size * matrix_unit_size * clock_hz;
  }
  // "name = value" per line, one field per line, "#" starts a comment;
  // fields not named keep their values. Errors name the line.
  absl::Status Apply(absl::string_view text);
  // Every field, in the file format (Apply reads it back).
  std::string ToString() const;
};

// Reads a config file over the defaults.
absl::StatusOr<ChipConfig> LoadChipConfig(const std::string& path);

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_CHIP_CONFIG_H_
