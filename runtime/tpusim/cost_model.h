// The tpusim cost model: what a program would cost on the configured chip.
// Every formula is here and in docs/tpusim.md; nothing else prices work.
//
// A program is priced after the TPU pipeline (compiler/passes/
// tpu_pipeline.h) as the fused regions a TPU would run (fusion.h). With S
// the matrix-unit size, U the matrix units per core, f the clock, V the
// vector ops per cycle, each region costs:
//
//   matrix   dot [B: M x K] x [K x N]:  P * 2 * B * ceil8(M) * ceilS(K)
//              * ceilS(N) / (2 * U * S^2 * f), operands padded to the
//              unit's shape, P the bf16 passes its precision takes (1 for
//              bf16 operands and for f32 at default precision, 3 at
//              `high`, 6 at `highest`); convolution: the same for its
//              im2col product, with B = feature groups, M = batch * output
//              positions, K = input features per group * window size,
//              N = output features per group.
//   vector   padded elements * ops per element / (V * f) summed over the
//            members: an elementwise op is 1 op per element (a
//            transcendental is transcendental_ops), reduce: its input
//            elements, reduce-window: output elements * window size,
//            select-and-scatter: twice that, sort: n * ceil(log2 n) per
//            operand, scatter: update elements, iota: output elements, rng:
//            transcendental_ops per element, cholesky: 2 n^3 / 3 per n x n
//            matrix, triangular-solve: m^2 per right-hand side of length m.
//   hbm      bytes / hbm_bandwidth, where bytes are the padded sizes
//            (layout.h) of what the region reads from outside itself and
//            the root it writes (an input read only through slices,
//            dynamic slices or gathers: what they take; dynamic-update-
//            slice reads and writes the update; a fused constant array is
//            read).
//   A region takes max(matrix / matrix_efficiency + vector,
//   hbm / hbm_efficiency) + region_overhead and is charged to the unit
//   that bounds it: the compute parts when they are larger, hbm otherwise.
//   feeds    infeed and outfeed: padded bytes / (host_link_bandwidth / k),
//            k the cores of one chip that run the program (replicas share
//            their chip's host link).
//   interconnect  on the chip torus (chip_config.h): an all-reduce of b
//            padded bytes over a group on m chips with c cores each takes
//              max(2 (c-1)/c * b / on_chip_bandwidth,
//                  2 (m-1)/m * b / (L * ici_link_bandwidth))
//              + 2 (c - 1 + hops) * interconnect_latency,
//            L the links each chip drives (2 per torus dimension the group
//            spans) and hops the ring steps across chips (the distinct
//            positions it covers in each dimension, minus one, summed); the on-chip and the
//            cross-chip phase pipeline over chunks, so the slower bounds.
//            All-gather, reduce-scatter, all-to-all and broadcast are one
//            phase: half that for the whole array. A collective-permute
//            moves its operand one path: b / on_chip_bandwidth on one chip,
//            b / ici_link_bandwidth + d * interconnect_latency across d
//            chip hops of the torus.
//            Across h servers (a group), an all-reduce over every replica
//            reduces on each server's cores first (the replicas of one
//            server, as above), then adds the ring between the servers:
//              2 (h-1)/h * b / dcn_bandwidth + 2 (h-1) * dcn_latency.
//
// An execution's simulated time is the sum over the regions it ran (loop
// bodies once per iteration). Matrix utilization = useful matrix flops /
// (simulated time * peak matrix flops); padding waste = 1 - unpadded bytes
// / padded bytes of the HBM traffic.
#ifndef KILN_RUNTIME_TPUSIM_COST_MODEL_H_
#define KILN_RUNTIME_TPUSIM_COST_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "runtime/cost.h"
#include "runtime/tpusim/chip_config.h"
#include "runtime/tpusim/fusion.h"

namespace kiln::tpusim {

// Immutable; thread-safe.
class CostModel {
 public:
  explicit CostModel(const ChipConfig& config) : config_(config) {}

  // The cost of one fused region.
  runtime::CostCounters RegionCost(const FusedRegion& region) const;
  // The profile of an execution that accumulated `counters`, with feeds and
  // all-reduces over every replica priced for `replica_count` replicas
  // (replica r on core r).
  // With `hosts` > 1 the replicas span that many servers (a group): each
  // all-reduce over every replica reduces on each server's chips, then
  // across the servers (dcn_bandwidth, dcn_latency).
  runtime::ExecutionProfile Profile(const runtime::CostCounters& counters, int replica_count,
                                    int hosts = 1) const;

  // The formulas, exposed for tests and benchmarks. Times of the matrix
  // and HBM parts are before the efficiency factors.
  double MatrixSeconds(int64_t batch, int64_t m, int64_t k, int64_t n, int passes = 1) const;
  double VectorSeconds(int64_t ops) const;
  double HbmSeconds(int64_t bytes) const;
  // `calls` all-reduces moving `bytes` in all over the replicas on `cores`.
  double AllReduceSeconds(int64_t bytes, const std::vector<int64_t>& cores,
                          int64_t calls = 1) const;
  // The same over cores 0..replicas-1.
  double AllReduceSeconds(int64_t bytes, int64_t replicas, int64_t calls = 1) const;
  // The ring between `hosts` servers of `calls` all-reduces of `bytes` in
  // all (0 for one server).
  double HostsAllReduceSeconds(int64_t bytes, int64_t hosts, int64_t calls = 1) const;
  // One transfer of `bytes` from core `from` to core `to`.
  double TransferSeconds(int64_t bytes, int64_t from, int64_t to) const;
  // Feeds moving `bytes` while `sharing` cores use their chip's host link.
  double FeedSeconds(int64_t bytes, int sharing) const;

  const ChipConfig& config() const { return config_; }

 private:
  const ChipConfig config_;
};

// A module's prices: its fusion plan and each region's cost, computed once
// when a program is built. Borrows the module, which must outlive it.
class ModulePrices {
 public:
  ModulePrices(const ir::Module& module, const CostModel& model);

  // What a host program step computing `members` adds: the costs of the
  // regions rooted among them.
  runtime::CostCounters StepCost(const std::vector<const ir::Instruction*>& members) const;

  // The cost of one execution priced without running it: every region of
  // the entry once, a loop's body and condition once per iteration (the
  // trip count must follow from the module: a counter from a constant
  // start compared against a constant and stepped by a constant), a
  // conditional's dearest branch, a call's callee; each computation is
  // priced once. FAILED_PRECONDITION names a loop whose trip count is not
  // static, or says the counts pass 2^62.
  absl::StatusOr<runtime::CostCounters> Estimate() const;

  // The `n` regions that cost most per run, dearest first, a line each:
  // root, opcode, shape, members, seconds and the bound unit, HBM bytes.
  std::string Dearest(int n) const;

  const FusionPlan& plan() const { return plan_; }

 private:
  using Memo =
      absl::flat_hash_map<const ir::Computation*, absl::StatusOr<runtime::CostCounters>>;
  absl::StatusOr<runtime::CostCounters> EstimateComputation(const ir::Computation& c, int depth,
                                                            Memo& memo) const;
  absl::StatusOr<runtime::CostCounters> PriceComputation(const ir::Computation& c, int depth,
                                                         Memo& memo) const;

  const ir::Module& module_;
  const CostModel& model_;
  FusionPlan plan_;
  absl::flat_hash_map<const ir::Instruction*, runtime::CostCounters> cost_of_root_;
};

// The static trip count of `loop` (a while) with an integer counter, or -1
// when the module does not fix it (or it passes 2^62).
int64_t StaticTripCount(const ir::Instruction& loop);

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_COST_MODEL_H_
