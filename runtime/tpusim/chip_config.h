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
  double hbm_bandwidth = 450e9;  // bytes/s per core
  // Shares of the peaks that real programs reach: a fused region takes
  // max(matrix / matrix_efficiency + vector, hbm / hbm_efficiency) plus
  // region_overhead seconds (docs/tpusim.md gives the sources).
  double matrix_efficiency = 0.9;
  double hbm_efficiency = 0.85;
  double region_overhead = 0.5e-6;
  // Topology: chips in a chips_x x chips_y torus, cores_per_chip cores on
  // each (core c on chip c / cores_per_chip, chip j at x = j % chips_x,
  // y = j / chips_x). Each chip has one inter-chip link each way in each
  // torus dimension, of ici_link_bandwidth bytes/s; the cores of one chip
  // exchange at on_chip_bandwidth.
  int chips_x = 2;
  int chips_y = 2;
  int cores_per_chip = 2;
  double ici_link_bandwidth = 82e9;      // 656 Gbit/s
  double on_chip_bandwidth = 450e9;
  double interconnect_latency = 2e-6;    // seconds per hop
  // The host link (PCIe) of one chip, shared by its cores' feeds.
  double host_link_bandwidth = 15.75e9;  // PCIe 3.0 x16
  // The network between the servers of a group (data-center network):
  // bytes/s of one server's link and seconds per message.
  double dcn_bandwidth = 12.5e9;  // 100 Gbit/s
  double dcn_latency = 10e-6;

  // Peak matrix-unit throughput of one core, flop/s (a multiply-add is 2).
  double PeakMatrixFlops() const {
    return 2.0 * matrix_units * matrix_unit_size * matrix_unit_size * clock_hz;
  }
  // The chip and the position of `core` on it.
  int ChipOf(int core) const { return core / cores_per_chip; }
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
