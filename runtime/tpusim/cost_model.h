// The tpusim cost model: what a program would cost on the configured chip.
// Every formula is here and in docs/tpusim.md; nothing else prices work.
//
// Each program step (one instruction, or a fused chain of elementwise
// instructions) is priced on its own, with S the matrix-unit size, U the
// matrix units per core, f the clock, V the vector ops per cycle:
//
//   matrix   dot [B: M x K] x [K x N]:  2 * B * ceil8(M) * ceilS(K) * ceilS(N)
//              / (2 * U * S^2 * f)   (operands padded to the unit's shape);
//            convolution: the same for its im2col product, with
//              B = feature groups, M = batch * output positions,
//              K = input features per group * window size,
//              N = output features per group.
//   vector   padded elements * ops per element / (V * f); an elementwise op
//            is 1 op per element (a transcendental is transcendental_ops),
//            reduce: its input elements, reduce-window: output elements *
//            window size, select-and-scatter: twice that, sort:
//            n * ceil(log2 n) per operand, scatter: update elements, iota:
//            output elements, rng: transcendental_ops per element.
//   hbm      bytes / hbm_bandwidth, where bytes are the padded sizes
//            (layout.h) of the step's inputs read and output written
//            (slice, dynamic-slice and gather read only what they output;
//            dynamic-update-slice reads and writes the update).
//   A step takes max(matrix + vector, hbm) and is charged to the unit that
//   bounds it: the compute parts when they are larger, hbm otherwise.
//   infeed   infeed and outfeed: padded bytes / infeed_bandwidth.
//   interconnect  all-reduce of b padded bytes over a group of n replicas
//            (ring): 2 (n-1)/n * b / interconnect_bandwidth
//              + 2 (n-1) * interconnect_latency.
//
// An execution's simulated time is the sum over the steps it ran (loop
// bodies once per iteration). Matrix utilization = useful matrix flops /
// (simulated time * peak matrix flops); padding waste = 1 - unpadded bytes
// / padded bytes of the HBM traffic.
#ifndef KILN_RUNTIME_TPUSIM_COST_MODEL_H_
#define KILN_RUNTIME_TPUSIM_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "compiler/ir/instruction.h"
#include "runtime/cost.h"
#include "runtime/tpusim/chip_config.h"

namespace kiln::tpusim {

// Immutable; thread-safe.
class CostModel {
 public:
  explicit CostModel(const ChipConfig& config) : config_(config) {}

  // The cost of a step computing `members` (output last).
  runtime::CostCounters StepCost(const std::vector<const ir::Instruction*>& members) const;
  // The profile of an execution that accumulated `counters`, with all-reduces
  // over every replica priced for `replica_count` replicas.
  runtime::ExecutionProfile Profile(const runtime::CostCounters& counters,
                                    int replica_count) const;

  // The formulas, exposed for tests and benchmarks.
  double MatrixSeconds(int64_t batch, int64_t m, int64_t k, int64_t n) const;
  double VectorSeconds(int64_t ops) const;
  double HbmSeconds(int64_t bytes) const;
  // `calls` all-reduces moving `bytes` in all.
  double AllReduceSeconds(int64_t bytes, int64_t replicas, int64_t calls = 1) const;
  double InfeedSeconds(int64_t bytes) const;

  const ChipConfig& config() const { return config_; }

 private:
  const ChipConfig config_;
};

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_COST_MODEL_H_
