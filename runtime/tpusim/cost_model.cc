#include "runtime/tpusim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
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

bool ReadsOnlyWhatItOutputs(Opcode op) {
  return op == Opcode::kSlice || op == Opcode::kDynamicSlice || op == Opcode::kGather;
}

// The bf16 passes a dot or convolution takes: f32 operands at `high`
// precision take 3, at `highest` 6 (XLA's bf16_3x and bf16_6x).
int MatrixPasses(const Instruction& instr) {
  if (instr.operand(0)->shape().type() != ir::ElementType::kF32 &&
      instr.operand(1)->shape().type() != ir::ElementType::kF32) {
    return 1;
  }
  ir::Precision p = ir::Precision::kDefault;
  for (ir::Precision q : instr.attrs().operand_precision) p = std::max(p, q);
  switch (p) {
    case ir::Precision::kHighest: return 6;
    case ir::Precision::kHigh: return 3;
    default: return 1;
  }
}

// Matrix time (before efficiency) and useful flops of a dot or convolution.
std::pair<double, int64_t> MatrixWork(const Instruction& out, const CostModel& model) {
  if (out.opcode() == Opcode::kDot) {
    const ir::DotDims& d = out.attrs().dot;
    const ir::Shape& lhs = out.operand(0)->shape();
    const ir::Shape& rhs = out.operand(1)->shape();
    const int64_t batch = Product(lhs, d.lhs_batch);
    const int64_t k = Product(lhs, d.lhs_contracting);
    const int64_t m = lhs.ElementCount() / std::max<int64_t>(1, batch * k);
    const int64_t n = rhs.ElementCount() / std::max<int64_t>(1, batch * k);
    return {model.MatrixSeconds(batch, m, k, n, MatrixPasses(out)), 2 * batch * m * k * n};
  }
  const ir::ConvDims& d = out.attrs().conv;
  const ir::Shape& input = out.operand(0)->shape();
  const ir::Shape& kernel = out.operand(1)->shape();
  const int64_t groups = std::max<int64_t>(1, out.attrs().feature_group_count);
  const int64_t m = out.shape().dim(d.output_batch) * Product(out.shape(), d.output_spatial);
  const int64_t k = input.dim(d.input_feature) / groups * Product(kernel, d.kernel_spatial);
  const int64_t n = kernel.dim(d.kernel_output_feature) / groups;
  return {model.MatrixSeconds(groups, m, k, n, MatrixPasses(out)), 2 * groups * m * k * n};
}

// Vector-unit ops of one member of a region.
int64_t VectorOps(const Instruction& m, int64_t transcendental) {
  switch (m.opcode()) {
    case Opcode::kReduce: {
      int64_t ops = 0;
      for (int i = 0; i < m.operand_count() / 2; ++i) ops += PaddedElements(m.operand(i)->shape());
      return ops;
    }
    case Opcode::kReduceWindow:
      return PaddedElements(m.shape().IsTuple() ? m.shape().tuple_shapes()[0] : m.shape()) *
             WindowSize(m.attrs().window);
    case Opcode::kSelectAndScatter:
      return 2 * PaddedElements(m.operand(1)->shape()) * WindowSize(m.attrs().window);
    case Opcode::kSort: {
      const int64_t n = m.operand(0)->shape().ElementCount();
      const int64_t log_n = n > 1 ? static_cast<int64_t>(std::ceil(std::log2(double(n)))) : 1;
      return PaddedElements(m.operand(0)->shape()) * log_n * m.operand_count();
    }
    case Opcode::kScatter:
      // Each update of each operand.
      return PaddedElements(m.operand(m.operand_count() - 1)->shape()) * (m.operand_count() / 2);
    case Opcode::kIota:
      return PaddedElements(m.shape());
    case Opcode::kCholesky: {
      // n^3 / 3 multiply-adds per matrix, on the vector unit.
      const int64_t n = m.shape().dim(m.shape().rank() - 1);
      return n == 0 ? 0 : m.shape().ElementCount() / n * n * n / 3 * 2;
    }
    case Opcode::kTriangularSolve: {
      // m^2 multiply-adds per right-hand side.
      const int64_t n = m.operand(0)->shape().dim(m.operand(0)->shape().rank() - 1);
      return m.shape().ElementCount() * n;
    }
    case Opcode::kRng:
      return PaddedElements(m.shape()) * transcendental;
    default:
      if (!ir::IsElementwise(m.opcode())) return 0;
      return PaddedElements(m.shape()) * (IsTranscendental(m.opcode()) ? transcendental : 1);
  }
}

// Where core `core` sits: {chip x, chip y, chip}.
struct Place {
  int64_t x, y, chip;
};
Place PlaceOf(const ChipConfig& c, int64_t core) {
  const int64_t chip = core / c.cores_per_chip;
  return {chip % c.chips_x, (chip / c.chips_x) % c.chips_y, chip};
}

// Ring distance between two positions of a torus dimension of `size`.
int64_t TorusDistance(int64_t a, int64_t b, int64_t size) {
  const int64_t d = std::abs(a - b) % size;
  return std::min(d, size - d);
}

}  // namespace

double CostModel::MatrixSeconds(int64_t batch, int64_t m, int64_t k, int64_t n,
                                int passes) const {
  const int64_t s = config_.matrix_unit_size;
  return passes * 2.0 * batch * RoundUp(m, 8) * RoundUp(k, s) * RoundUp(n, s) /
         config_.PeakMatrixFlops();
}

double CostModel::VectorSeconds(int64_t ops) const {
  return static_cast<double>(ops) / (config_.vector_ops_per_cycle * config_.clock_hz);
}

double CostModel::HbmSeconds(int64_t bytes) const {
  return static_cast<double>(bytes) / config_.hbm_bandwidth;
}

double CostModel::AllReduceSeconds(int64_t bytes, const std::vector<int64_t>& cores,
                                   int64_t calls) const {
  if (cores.size() <= 1 || calls <= 0) return 0;
  std::set<int64_t> chips, xs, ys;
  absl::flat_hash_map<int64_t, int64_t> per_chip;
  for (int64_t core : cores) {
    const Place p = PlaceOf(config_, core);
    chips.insert(p.chip);
    xs.insert(p.x);
    ys.insert(p.y);
    ++per_chip[p.chip];
  }
  int64_t c = 1;
  for (const auto& [chip, n] : per_chip) c = std::max(c, n);
  const double m = static_cast<double>(chips.size());
  const double b = static_cast<double>(bytes);
  const double on_chip = 2.0 * (c - 1) / c * b / config_.on_chip_bandwidth;
  const int64_t dims = (xs.size() > 1 ? 1 : 0) + (ys.size() > 1 ? 1 : 0);
  const double across =
      dims == 0 ? 0 : 2.0 * (m - 1) / m * b / (2.0 * dims * config_.ici_link_bandwidth);
  const int64_t hops = static_cast<int64_t>(xs.size() + ys.size()) - 2;
  return std::max(on_chip, across) + 2.0 * static_cast<double>(c - 1 + hops) *
                                         static_cast<double>(calls) *
                                         config_.interconnect_latency;
}

double CostModel::AllReduceSeconds(int64_t bytes, int64_t replicas, int64_t calls) const {
  if (replicas <= 1 || calls <= 0) return 0;
  std::vector<int64_t> cores;
  for (int64_t r = 0; r < std::min<int64_t>(replicas, config_.cores); ++r) cores.push_back(r);
  return AllReduceSeconds(bytes, cores, calls);
}

double CostModel::HostsAllReduceSeconds(int64_t bytes, int64_t hosts, int64_t calls) const {
  if (hosts <= 1 || calls <= 0) return 0;
  const double h = static_cast<double>(hosts);
  return 2.0 * (h - 1) / h * static_cast<double>(bytes) / config_.dcn_bandwidth +
         2.0 * (h - 1) * static_cast<double>(calls) * config_.dcn_latency;
}

double CostModel::TransferSeconds(int64_t bytes, int64_t from, int64_t to) const {
  const Place a = PlaceOf(config_, from), b = PlaceOf(config_, to);
  if (a.chip == b.chip) return static_cast<double>(bytes) / config_.on_chip_bandwidth;
  const int64_t hops = TorusDistance(a.x, b.x, config_.chips_x) +
                       TorusDistance(a.y, b.y, config_.chips_y);
  return static_cast<double>(bytes) / config_.ici_link_bandwidth +
         static_cast<double>(hops) * config_.interconnect_latency;
}

double CostModel::FeedSeconds(int64_t bytes, int sharing) const {
  return static_cast<double>(bytes) * std::max(1, sharing) / config_.host_link_bandwidth;
}

runtime::CostCounters CostModel::RegionCost(const FusedRegion& region) const {
  runtime::CostCounters c;
  const std::vector<const Instruction*>& members = region.members;
  if (members.empty()) return c;
  const Instruction& out = *members.back();
  const Opcode op = out.opcode();
  if (members.size() == 1 && IsFreeOp(op)) return c;
  if (op == Opcode::kInfeed) {
    c.feed_bytes = PaddedBytes(out.shape());
    return c;
  }
  if (op == Opcode::kOutfeed) {
    c.feed_bytes = PaddedBytes(out.operand(0)->shape());
    return c;
  }
  if (op == Opcode::kCollectivePermute) {
    // Every pair moves at once; the slowest path bounds.
    const int64_t bytes = PaddedBytes(out.shape());
    for (const std::vector<int64_t>& pair : out.attrs().source_target_pairs) {
      if (pair.size() != 2) continue;
      c.interconnect_seconds =
          std::max(c.interconnect_seconds, TransferSeconds(bytes, pair[0], pair[1]));
    }
    return c;
  }
  if (ir::IsCollective(op)) {  // the permute is priced above
    // An all-gather, a reduce-scatter, an all-to-all and a broadcast are
    // priced as one phase of an all-reduce: half the traffic of an
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
      // Groups run at once; the slowest bounds.
      for (const std::vector<int64_t>& group : groups) {
        c.interconnect_seconds = std::max(c.interconnect_seconds, AllReduceSeconds(bytes, group));
      }
    }
    return c;
  }

  // HBM traffic: what the region reads from outside itself and what it
  // writes.
  const absl::flat_hash_set<const Instruction*> inside(members.begin(), members.end());
  int64_t read = 0, read_logical = 0;
  if (op == Opcode::kDynamicUpdateSlice) {
    read = PaddedBytes(out.operand(1)->shape());
    read_logical = out.operand(1)->shape().ByteSize();
  } else {
    // Per outside input: the bytes its readers in the region take.
    absl::flat_hash_map<const Instruction*, std::pair<int64_t, int64_t>> taken;
    absl::flat_hash_set<const Instruction*> whole;
    for (const Instruction* m : members) {
      if (m->opcode() == Opcode::kConstant && m->shape().ElementCount() > 1) {
        read += PaddedBytes(m->shape());
        read_logical += m->shape().ByteSize();
      }
      for (int i = 0; i < m->operand_count(); ++i) {
        const Instruction* o = m->operand(i);
        if (inside.contains(o)) continue;
        if (i == 0 && ReadsOnlyWhatItOutputs(m->opcode())) {
          taken[o].first += PaddedBytes(m->shape());
          taken[o].second += m->shape().ByteSize();
        } else {
          whole.insert(o);
        }
      }
    }
    for (const Instruction* o : region.shared_reads) {
      whole.erase(o);
      taken.erase(o);
    }
    for (const Instruction* o : whole) {
      read += PaddedBytes(o->shape());
      read_logical += o->shape().ByteSize();
    }
    for (const auto& [o, bytes] : taken) {
      if (whole.contains(o)) continue;
      read += std::min(bytes.first, PaddedBytes(o->shape()));
      read_logical += std::min(bytes.second, o->shape().ByteSize());
    }
  }
  const ir::Shape& written_shape =
      op == Opcode::kDynamicUpdateSlice ? out.operand(1)->shape() : out.shape();
  c.hbm_bytes = read + PaddedBytes(written_shape);
  c.hbm_logical_bytes = read_logical + written_shape.ByteSize();

  double matrix = 0;
  int64_t vector_ops = 0;
  for (const Instruction* m : members) {
    if (m->opcode() == Opcode::kDot || m->opcode() == Opcode::kConvolution) {
      const auto [seconds, flops] = MatrixWork(*m, *this);
      matrix += seconds / config_.matrix_efficiency;
      c.matrix_flops += flops;
    } else {
      vector_ops += VectorOps(*m, config_.transcendental_ops);
    }
  }
  const double vector = VectorSeconds(vector_ops);
  const double memory = HbmSeconds(c.hbm_bytes) / config_.hbm_efficiency;
  if (memory > matrix + vector) {
    c.hbm_seconds = memory + config_.region_overhead;
  } else if (matrix > 0) {
    c.matrix_seconds = matrix + config_.region_overhead;
    c.vector_seconds = vector;
  } else {
    c.vector_seconds = vector + config_.region_overhead;
  }
  return c;
}

runtime::ExecutionProfile CostModel::Profile(const runtime::CostCounters& c,
                                             int replica_count, int hosts) const {
  hosts = std::max(1, hosts);
  // The replicas of one server (the busiest).
  const int here = (std::max(1, replica_count) + hosts - 1) / hosts;
  runtime::ExecutionProfile p;
  p.matrix_seconds = c.matrix_seconds;
  p.vector_seconds = c.vector_seconds;
  p.hbm_seconds = c.hbm_seconds;
  // Replicas r on cores r: the first chip runs min(cores_per_chip,
  // replicas) of them, which share its host link.
  p.infeed_seconds =
      c.infeed_seconds +
      FeedSeconds(c.feed_bytes, std::min(here, config_.cores_per_chip));
  p.interconnect_seconds =
      c.interconnect_seconds +
      AllReduceSeconds(c.all_replica_reduce_bytes, here, c.all_replica_reduce_calls) +
      HostsAllReduceSeconds(c.all_replica_reduce_bytes, hosts, c.all_replica_reduce_calls);
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

ModulePrices::ModulePrices(const ir::Module& module, const CostModel& model)
    : module_(module), model_(model), plan_(module) {
  for (const auto& region : plan_.regions()) {
    cost_of_root_[region->members.back()] = model_.RegionCost(*region);
  }
}

runtime::CostCounters ModulePrices::StepCost(
    const std::vector<const Instruction*>& members) const {
  runtime::CostCounters c;
  for (const Instruction* m : members) {
    auto it = cost_of_root_.find(m);
    if (it != cost_of_root_.end()) c += it->second;
  }
  return c;
}

std::string ModulePrices::Dearest(int n) const {
  auto seconds = [](const runtime::CostCounters& c) {
    return c.matrix_seconds + c.vector_seconds + c.hbm_seconds + c.interconnect_seconds +
           c.infeed_seconds;
  };
  std::vector<std::pair<const Instruction*, const runtime::CostCounters*>> all;
  for (const auto& [root, cost] : cost_of_root_) all.push_back({root, &cost});
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
    return seconds(*a.second) != seconds(*b.second) ? seconds(*a.second) > seconds(*b.second)
                                                    : a.first->name() < b.first->name();
  });
  std::string out;
  for (int i = 0; i < n && i < static_cast<int>(all.size()); ++i) {
    const auto& [root, c] = all[i];
    const FusedRegion* region = plan_.RegionRootedAt(root);
    absl::StrAppend(&out, root->name(), " ", ir::OpcodeName(root->opcode()), " ",
                    root->shape().ToString(), ", ", region ? region->members.size() : 1,
                    " members: ", seconds(*c) * 1e6, " us (",
                    c->hbm_seconds > 0 ? "hbm" : c->matrix_seconds > 0 ? "matrix" : "other",
                    "), ", c->hbm_bytes, " HBM bytes\n");
  }
  return out;
}

namespace {

// The constant scalar `instr` holds, if it is one.
std::optional<int64_t> ConstantScalar(const Instruction* instr) {
  if (instr->opcode() != Opcode::kConstant || !instr->shape().IsArray() ||
      instr->shape().ElementCount() != 1) {
    return std::nullopt;
  }
  return instr->attrs().literal.GetAsInt64(0);
}

// Element `index` of a loop state tuple of `state` (a parameter), when
// `instr` is get-tuple-element(state), index.
bool IsStateElement(const Instruction* instr, const Instruction* state, int64_t index) {
  return instr->opcode() == Opcode::kGetTupleElement && instr->operand(0) == state &&
         instr->attrs().tuple_index == index;
}

// Counts past this are refused rather than wrapped.
constexpr int64_t kMaxCount = int64_t{1} << 62;

absl::Status TooLarge() {
  return absl::FailedPreconditionError(
      "the program does more work than the estimate can count (over 2^62 bytes or flops)");
}

// total += c, refusing counts that would pass kMaxCount.
absl::Status Accumulate(runtime::CostCounters& total, const runtime::CostCounters& c) {
  for (auto [t, v] : {std::pair{&total.matrix_flops, c.matrix_flops},
                      std::pair{&total.hbm_bytes, c.hbm_bytes},
                      std::pair{&total.hbm_logical_bytes, c.hbm_logical_bytes},
                      std::pair{&total.feed_bytes, c.feed_bytes},
                      std::pair{&total.all_replica_reduce_bytes, c.all_replica_reduce_bytes},
                      std::pair{&total.all_replica_reduce_calls, c.all_replica_reduce_calls}}) {
    if (v > kMaxCount - *t) return TooLarge();
  }
  total += c;
  return absl::OkStatus();
}

// `c` repeated `n` times (n >= 0).
absl::StatusOr<runtime::CostCounters> Times(const runtime::CostCounters& c, int64_t n) {
  runtime::CostCounters r = c;
  const double f = static_cast<double>(n);
  r.matrix_seconds *= f;
  r.vector_seconds *= f;
  r.hbm_seconds *= f;
  r.interconnect_seconds *= f;
  r.infeed_seconds *= f;
  for (int64_t* v : {&r.matrix_flops, &r.hbm_bytes, &r.hbm_logical_bytes, &r.feed_bytes,
                     &r.all_replica_reduce_bytes, &r.all_replica_reduce_calls}) {
    if (__builtin_mul_overflow(*v, n, v) || *v > kMaxCount) return TooLarge();
  }
  return r;
}

}  // namespace

int64_t StaticTripCount(const Instruction& loop) {
  if (loop.opcode() != Opcode::kWhile || loop.called().size() != 2) return -1;
  const ir::Computation& cond = *loop.called(0);
  const ir::Computation& body = *loop.called(1);
  const Instruction* init = loop.operand(0);
  if (init->opcode() != Opcode::kTuple || cond.parameter_count() != 1 ||
      body.parameter_count() != 1) {
    return -1;
  }
  const Instruction* compare = cond.root();
  if (compare->opcode() != Opcode::kCompare) return -1;
  // counter < limit (or limit > counter), with `index` the counter's place.
  for (int side = 0; side < 2; ++side) {
    const Instruction* counter = compare->operand(side);
    const std::optional<int64_t> limit = ConstantScalar(compare->operand(1 - side));
    const ir::ComparisonDirection want =
        side == 0 ? ir::ComparisonDirection::kLt : ir::ComparisonDirection::kGt;
    if (!limit.has_value() || compare->attrs().direction != want ||
        counter->opcode() != Opcode::kGetTupleElement || counter->operand(0) != cond.parameter(0)) {
      continue;
    }
    if (!counter->shape().IsArray() || !ir::IsIntegralType(counter->shape().type())) return -1;
    const int64_t index = counter->attrs().tuple_index;
    if (index < 0 || index >= init->operand_count()) return -1;
    const std::optional<int64_t> start = ConstantScalar(init->operand(index));
    const Instruction* next = body.root();
    if (!start.has_value() || next->opcode() != Opcode::kTuple || index >= next->operand_count()) {
      return -1;
    }
    const Instruction* step_op = next->operand(index);
    if (step_op->opcode() != Opcode::kAdd) return -1;
    std::optional<int64_t> step;
    for (int s = 0; s < 2; ++s) {
      if (IsStateElement(step_op->operand(s), body.parameter(0), index)) {
        step = ConstantScalar(step_op->operand(1 - s));
      }
    }
    if (!step.has_value() || *step <= 0) return -1;
    if (*limit <= *start) return 0;
    const __int128 trips =
        (static_cast<__int128>(*limit) - *start + *step - 1) / static_cast<__int128>(*step);
    return trips > kMaxCount ? -1 : static_cast<int64_t>(trips);
  }
  return -1;
}

absl::StatusOr<runtime::CostCounters> ModulePrices::Estimate() const {
  if (module_.entry() == nullptr) return absl::InvalidArgumentError("module has no entry");
  Memo memo;
  return EstimateComputation(*module_.entry(), 0, memo);
}

absl::StatusOr<runtime::CostCounters> ModulePrices::EstimateComputation(
    const ir::Computation& computation, int depth, Memo& memo) const {
  // A computation costs the same wherever it is called: each is priced
  // once, however many calls, loops and branches reach it.
  if (auto known = memo.find(&computation); known != memo.end()) return known->second;
  absl::StatusOr<runtime::CostCounters> cost = PriceComputation(computation, depth, memo);
  memo.emplace(&computation, cost);
  return cost;
}

absl::StatusOr<runtime::CostCounters> ModulePrices::PriceComputation(
    const ir::Computation& computation, int depth, Memo& memo) const {
  if (depth > 64) return absl::FailedPreconditionError("control flow nests too deep to price");
  runtime::CostCounters total;
  for (const auto& instr : computation.instructions()) {
    auto it = cost_of_root_.find(instr.get());
    if (it != cost_of_root_.end()) RETURN_IF_ERROR(Accumulate(total, it->second));
    switch (instr->opcode()) {
      case Opcode::kCall: {
        ASSIGN_OR_RETURN(runtime::CostCounters c,
                         EstimateComputation(*instr->called(0), depth + 1, memo));
        RETURN_IF_ERROR(Accumulate(total, c));
        break;
      }
      case Opcode::kWhile: {
        const int64_t trips = StaticTripCount(*instr);
        if (trips < 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "cannot price loop ", instr->name(), " in ", computation.name(),
              " without running it: its trip count is not a constant under 2^62 (an integer "
              "counter from a constant start, stepped by a constant, compared less-than a "
              "constant)"));
        }
        ASSIGN_OR_RETURN(runtime::CostCounters cond,
                         EstimateComputation(*instr->called(0), depth + 1, memo));
        ASSIGN_OR_RETURN(runtime::CostCounters body,
                         EstimateComputation(*instr->called(1), depth + 1, memo));
        RETURN_IF_ERROR(Accumulate(total, cond));
        RETURN_IF_ERROR(Accumulate(body, cond));
        ASSIGN_OR_RETURN(runtime::CostCounters loop, Times(body, trips));
        RETURN_IF_ERROR(Accumulate(total, loop));
        break;
      }
      case Opcode::kConditional: {
        std::optional<runtime::CostCounters> dearest;
        double dearest_seconds = 0;
        for (const ir::Computation* branch : instr->called()) {
          ASSIGN_OR_RETURN(runtime::CostCounters c,
                           EstimateComputation(*branch, depth + 1, memo));
          const double seconds = model_.Profile(c, 1).simulated_seconds;
          if (!dearest.has_value() || seconds > dearest_seconds) {
            dearest = c;
            dearest_seconds = seconds;
          }
        }
        if (dearest.has_value()) RETURN_IF_ERROR(Accumulate(total, *dearest));
        break;
      }
      default:
        break;
    }
  }
  return total;
}

}  // namespace kiln::tpusim
