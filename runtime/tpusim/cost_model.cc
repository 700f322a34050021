#include "runtime/tpusim/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "runtime/tpusim/layout.h"

namespace kiln::tpusim {
namespace {

using ir::Instruction;
using ir::Opcode;

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

bool IsTranscendental(Opcode op) {
  switch (op) {
    case Opcode::kExp: case Opcode::kExpm1: case Opcode::kErf: case Opcode::kLog:
    case Opcode::kLog1p:
    case Opcode::kLogistic: case Opcode::kTanh: case Opcode::kSin: case Opcode::kCos:
    case Opcode::kTan: case Opcode::kAtan2: case Opcode::kPower: case Opcode::kRsqrt:
    case Opcode::kSqrt: case Opcode::kCbrt: case Opcode::kDivide: case Opcode::kAcos:
    case Opcode::kAcosh: case Opcode::kAsin: case Opcode::kAsinh: case Opcode::kAtanh:
    case Opcode::kCosh: case Opcode::kSinh:
      return true;
    default:
      return false;
  }
}

// Steps that move no data and do no work of their own.
bool IsFree(Opcode op) {
  switch (op) {
    case Opcode::kParameter: case Opcode::kConstant: case Opcode::kTuple:
    case Opcode::kGetTupleElement: case Opcode::kWhile: case Opcode::kCall:
    case Opcode::kConditional: case Opcode::kAfterAll: case Opcode::kReplicaId:
    case Opcode::kPartitionId:
      return true;
    default:
      return false;
  }
}

int64_t Product(const ir::Shape& s, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= s.dim(d);
  return p;
}

int64_t WindowSize(const std::vector<ir::WindowDim>& window) {
  int64_t p = 1;
  for (const ir::WindowDim& w : window) p *= w.size;
  return p;
}

}  // namespace

double CostModel::MatrixSeconds(int64_t batch, int64_t m, int64_t k, int64_t n) const {
  const int64_t s = config_.matrix_unit_size;
  return 2.0 * batch * RoundUp(m, 8) * RoundUp(k, s) * RoundUp(n, s) / config_.PeakMatrixFlops();
}

double CostModel::VectorSeconds(int64_t ops) const {
  return static_cast<double>(ops) / (config_.vector_ops_per_cycle * config_.clock_hz);
}

double CostModel::HbmSeconds(int64_t bytes) const {
  return static_cast<double>(bytes) / config_.hbm_bandwidth;
}

double CostModel::AllReduceSeconds(int64_t bytes, int64_t replicas, int64_t calls) const {
  if (replicas <= 1 || calls <= 0) return 0;
  const double n = static_cast<double>(replicas);
  return 2.0 * (n - 1) / n * static_cast<double>(bytes) / config_.interconnect_bandwidth +
         2.0 * (n - 1) * config_.interconnect_latency * static_cast<double>(calls);
}

double CostModel::InfeedSeconds(int64_t bytes) const {
  return static_cast<double>(bytes) / config_.infeed_bandwidth;
}

runtime::CostCounters CostModel::StepCost(
    const std::vector<const Instruction*>& members) const {
  runtime::CostCounters c;
  if (members.empty()) return c;
  const Instruction& out = *members.back();
  const Opcode op = out.opcode();
  if (members.size() == 1 && IsFree(op)) return c;
  if (op == Opcode::kInfeed) {
    c.infeed_seconds = InfeedSeconds(PaddedBytes(out.shape()));
    return c;
  }
  if (op == Opcode::kOutfeed) {
    c.infeed_seconds = InfeedSeconds(PaddedBytes(out.operand(0)->shape()));
    return c;
  }
  if (op == Opcode::kCollectivePermute) {
    // One hop of the operand to its target.
    c.interconnect_seconds =
        static_cast<double>(PaddedBytes(out.shape())) / config_.interconnect_bandwidth +
        config_.interconnect_latency;
    return c;
  }
  if (ir::IsCollective(op)) {  // the permute is priced above
    // An all-gather, a reduce-scatter, an all-to-all and a broadcast are
    // priced as one phase of a ring all-reduce: half the traffic of an
    // all-reduce of the whole (gathered, scattered or broadcast) array.
    int64_t bytes = 0;
    if (op == Opcode::kAllGather) {
      bytes = PaddedBytes(out.shape()) / 2;
    } else {
      for (const Instruction* o : out.operands()) bytes += PaddedBytes(o->shape());
      if (op != Opcode::kAllReduce) bytes /= 2;
    }
    const auto& groups = out.attrs().replica_groups;
    if (groups.empty()) {
      c.all_replica_reduce_bytes = bytes;
      c.all_replica_reduce_calls = 1;
    } else {
      c.interconnect_seconds = AllReduceSeconds(bytes, static_cast<int64_t>(groups[0].size()));
    }
    return c;
  }

  // HBM traffic: what the step reads from outside itself and what it writes.
  int64_t read = 0, read_logical = 0;
  if (op == Opcode::kSlice || op == Opcode::kDynamicSlice || op == Opcode::kGather) {
    read = PaddedBytes(out.shape());
    read_logical = out.shape().ByteSize();
  } else if (op == Opcode::kDynamicUpdateSlice) {
    read = PaddedBytes(out.operand(1)->shape());
    read_logical = out.operand(1)->shape().ByteSize();
  } else {
    absl::flat_hash_set<const Instruction*> inside(members.begin(), members.end());
    absl::flat_hash_set<const Instruction*> seen;
    for (const Instruction* m : members) {
      for (const Instruction* o : m->operands()) {
        if (inside.contains(o) || !seen.insert(o).second) continue;
        read += PaddedBytes(o->shape());
        read_logical += o->shape().ByteSize();
      }
    }
  }
  const ir::Shape& written_shape =
      op == Opcode::kDynamicUpdateSlice ? out.operand(1)->shape() : out.shape();
  c.hbm_bytes = read + PaddedBytes(written_shape);
  c.hbm_logical_bytes = read_logical + written_shape.ByteSize();

  double matrix = 0;
  int64_t vector_ops = 0;
  const int64_t transcendental = config_.transcendental_ops;
  switch (op) {
    case Opcode::kDot: {
      const ir::DotDims& d = out.attrs().dot;
      const ir::Shape& lhs = out.operand(0)->shape();
      const ir::Shape& rhs = out.operand(1)->shape();
      const int64_t batch = Product(lhs, d.lhs_batch);
      const int64_t k = Product(lhs, d.lhs_contracting);
      const int64_t m = lhs.ElementCount() / std::max<int64_t>(1, batch * k);
      const int64_t n = rhs.ElementCount() / std::max<int64_t>(1, batch * k);
      matrix = MatrixSeconds(batch, m, k, n);
      c.matrix_flops = 2 * batch * m * k * n;
      break;
    }
    case Opcode::kConvolution: {
      const ir::ConvDims& d = out.attrs().conv;
      const ir::Shape& input = out.operand(0)->shape();
      const ir::Shape& kernel = out.operand(1)->shape();
      const int64_t groups = std::max<int64_t>(1, out.attrs().feature_group_count);
      const int64_t m = out.shape().dim(d.output_batch) * Product(out.shape(), d.output_spatial);
      const int64_t k = input.dim(d.input_feature) / groups * Product(kernel, d.kernel_spatial);
      const int64_t n = kernel.dim(d.kernel_output_feature) / groups;
      matrix = MatrixSeconds(groups, m, k, n);
      c.matrix_flops = 2 * groups * m * k * n;
      break;
    }
    case Opcode::kReduce:
      for (int i = 0; i < out.operand_count() / 2; ++i) {
        vector_ops += PaddedElements(out.operand(i)->shape());
      }
      break;
    case Opcode::kReduceWindow:
      vector_ops = PaddedElements(out.shape().IsTuple() ? out.shape().tuple_shapes()[0]
                                                        : out.shape()) *
                   WindowSize(out.attrs().window);
      break;
    case Opcode::kSelectAndScatter:
      vector_ops = 2 * PaddedElements(out.operand(1)->shape()) * WindowSize(out.attrs().window);
      break;
    case Opcode::kSort: {
      const int64_t n = out.operand(0)->shape().ElementCount();
      const int64_t log_n = n > 1 ? static_cast<int64_t>(std::ceil(std::log2(double(n)))) : 1;
      vector_ops = PaddedElements(out.operand(0)->shape()) * log_n * out.operand_count();
      break;
    }
    case Opcode::kScatter:
      // Each update of each operand.
      vector_ops = PaddedElements(out.operand(out.operand_count() - 1)->shape()) *
                   (out.operand_count() / 2);
      break;
    case Opcode::kIota:
      vector_ops = PaddedElements(out.shape());
      break;
    case Opcode::kRng:
      vector_ops = PaddedElements(out.shape()) * transcendental;
      break;
    default:
      for (const Instruction* m : members) {
        if (!ir::IsElementwise(m->opcode())) continue;
        vector_ops += PaddedElements(m->shape()) * (IsTranscendental(m->opcode()) ? transcendental : 1);
      }
      break;
  }
  const double vector = VectorSeconds(vector_ops);
  const double memory = HbmSeconds(c.hbm_bytes);
  if (memory > matrix + vector) {
    c.hbm_seconds = memory;
  } else {
    c.matrix_seconds = matrix;
    c.vector_seconds = vector;
  }
  return c;
}

runtime::ExecutionProfile CostModel::Profile(const runtime::CostCounters& c,
                                             int replica_count) const {
  runtime::ExecutionProfile p;
  p.matrix_seconds = c.matrix_seconds;
  p.vector_seconds = c.vector_seconds;
  p.hbm_seconds = c.hbm_seconds;
  p.infeed_seconds = c.infeed_seconds;
  p.interconnect_seconds =
      c.interconnect_seconds + AllReduceSeconds(c.all_replica_reduce_bytes, replica_count,
                                                c.all_replica_reduce_calls);
  p.simulated_seconds = p.matrix_seconds + p.vector_seconds + p.hbm_seconds +
                        p.infeed_seconds + p.interconnect_seconds;
  p.matrix_flops = c.matrix_flops;
  p.hbm_bytes = c.hbm_bytes;
  if (p.simulated_seconds > 0) {
    p.matrix_utilization =
        static_cast<double>(c.matrix_flops) / (p.simulated_seconds * config_.PeakMatrixFlops());
  }
  if (c.hbm_bytes > 0) {
    p.padding_waste = 1.0 - static_cast<double>(c.hbm_logical_bytes) / c.hbm_bytes;
  }
  return p;
}

}  // namespace kiln::tpusim
