// What a backend with a cost model (tpusim) says about an execution: the
// counters each program step adds as it runs, and the profile an execution
// reports. The formulas live with the model (runtime/tpusim/cost_model.h);
// this header only carries the numbers.
#ifndef KILN_RUNTIME_COST_H_
#define KILN_RUNTIME_COST_H_

#include <cstdint>

namespace kiln::runtime {

// Simulated cost of one program step, or the sum over the steps run so far.
// Thread-compatible.
struct CostCounters {
  // Time per unit, seconds: each step's time is charged to the unit that
  // bounds it (see the cost model).
  double matrix_seconds = 0;
  double vector_seconds = 0;
  double hbm_seconds = 0;
  double interconnect_seconds = 0;
  double infeed_seconds = 0;
  // Useful floating-point work of the matrix unit (2 per multiply-add).
  int64_t matrix_flops = 0;
  // Bytes read and written in HBM, in padded tiles, and the unpadded part.
  int64_t hbm_bytes = 0;
  int64_t hbm_logical_bytes = 0;
  // Infeed and outfeed bytes: costed once the replica count says how many
  // cores share a chip's host link.
  int64_t feed_bytes = 0;
  // All-reduces over every replica: costed once the replica count is known.
  int64_t all_replica_reduce_bytes = 0;
  int64_t all_replica_reduce_calls = 0;

  CostCounters& operator+=(const CostCounters& o) {
    matrix_seconds += o.matrix_seconds;
    vector_seconds += o.vector_seconds;
    hbm_seconds += o.hbm_seconds;
    interconnect_seconds += o.interconnect_seconds;
    infeed_seconds += o.infeed_seconds;
    matrix_flops += o.matrix_flops;
    hbm_bytes += o.hbm_bytes;
    hbm_logical_bytes += o.hbm_logical_bytes;
    feed_bytes += o.feed_bytes;
    all_replica_reduce_bytes += o.all_replica_reduce_bytes;
    all_replica_reduce_calls += o.all_replica_reduce_calls;
    return *this;
  }
};

// The simulated cost of one execution (one replica).
struct ExecutionProfile {
  double simulated_seconds = 0;  // the sum of the five parts below
  double matrix_seconds = 0;
  double vector_seconds = 0;
  double hbm_seconds = 0;
  double interconnect_seconds = 0;
  double infeed_seconds = 0;
  // Useful matrix-unit work over what the matrix units could have done in
  // the simulated time.
  double matrix_utilization = 0;
  int64_t matrix_flops = 0;
  int64_t hbm_bytes = 0;
  // Share of the HBM bytes moved that were tile padding.
  double padding_waste = 0;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_COST_H_
