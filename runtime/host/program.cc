#include "runtime/host/program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "compiler/passes/buffer_assignment.h"
#include "compiler/passes/convolution_fusion.h"
#include "compiler/passes/dot_bias_fusion.h"
#include "compiler/passes/dot_fusion.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/reduction_fusion.h"
#include "runtime/host/cancel.h"
#include "runtime/host/elementwise.h"
#include "runtime/host/fused_reduce.h"

namespace kiln::host {
namespace {

// KILN_HOST_PROFILE=1: time every step and print, when the process exits,
// where each program's time went, by step (stderr).
class StepProfile {
 public:
  static StepProfile* Get() {
    static StepProfile* profile =
        std::getenv("KILN_HOST_PROFILE") != nullptr ? new StepProfile() : nullptr;
    return profile;
  }
  void Add(const std::string& program, const std::string& step, double seconds) {
    absl::MutexLock lock(&mu_);
    Entry& e = entries_[absl::StrCat(program, " ", step)];
    e.seconds += seconds;
    ++e.count;
  }

 private:
  struct Entry {
    double seconds = 0;
    int64_t count = 0;
  };
  StepProfile() { std::atexit([] { Get()->Print(); }); }
  void Print() {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "host profile: %.3f s in %zu steps\n", total, rows.size());
    for (size_t i = 0; i < rows.size() && i < 40; ++i) {
      std::fprintf(stderr, "  %6.2f%% %9.3f ms %7lld x  %s\n", 100 * rows[i].second.seconds / total,
                   rows[i].second.seconds * 1e3, static_cast<long long>(rows[i].second.count),
                   rows[i].first.c_str());
    }
    entries_.clear();
  }
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

using ir::Instruction;
using ir::Opcode;

// KILN_HOST_ARENA=0 in the environment: programs built after it is read
// allocate every array on its own (for comparisons).
bool ArenaEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_HOST_ARENA");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

// The loop that computes `nodes` (topological) in one pass and writes
// `outputs` (some of the nodes). A value that is not among the nodes is
// read as a loop input, from the program slot `slot_of` gives;
// `input_slots` receives those slots in input order.
std::shared_ptr<FusedGroup> PlanLoop(const std::vector<const Instruction*>& nodes,
                                     const std::vector<const Instruction*>& outputs,
                                     const std::function<int(const Instruction*)>& slot_of,
                                     std::vector<int>* input_slots) {
  auto group = std::make_shared<FusedGroup>();
  absl::flat_hash_map<const Instruction*, int> node_of;
  absl::flat_hash_map<const Instruction*, int> input_of;
  auto input = [&](const Instruction* o) {
    auto [in, inserted] = input_of.emplace(o, static_cast<int>(group->input_types.size()));
    if (inserted) {
      group->input_types.push_back(o->shape().type());
      group->input_is_scalar.push_back(o->shape().ElementCount() == 1);
      input_slots->push_back(slot_of(o));
    }
    return -1 - in->second;
  };
  for (const Instruction* m : nodes) {
    FusedNode node;
    node.op = m->opcode();
    node.out_type = m->shape().type();
    node.in_type = m->operand(0)->shape().type();
    node.direction = m->attrs().direction;
    for (const Instruction* o : m->operands()) {
      auto it = node_of.find(o);
      node.args.push_back(it != node_of.end() ? it->second : input(o));
    }
    const ir::Shape& in = m->operand(0)->shape();
    if (m->opcode() == Opcode::kBroadcast && in.ElementCount() != 1) {
      node.broadcast_size = in.ElementCount();
      node.broadcast_inner = 1;
      const std::vector<int64_t>& out_dims = m->shape().dims();
      for (size_t d = m->attrs().dimensions.back() + 1; d < out_dims.size(); ++d) {
        node.broadcast_inner *= out_dims[d];
      }
    }
    node_of[m] = static_cast<int>(group->nodes.size());
    group->nodes.push_back(std::move(node));
  }
  for (const Instruction* o : outputs) group->outputs.push_back(node_of.at(o));
  group->element_count = outputs[0]->shape().ElementCount();
  return group;
}

// The inputs (positions among `input_slots`) each result of a loop may
// take in place, from the slots the buffer assignment names for it
// (compiler/passes/buffer_assignment.h).
std::vector<std::vector<int>> InPlacePositions(const std::vector<std::vector<int>>& in_place_slots,
                                               const std::vector<int>& input_slots) {
  absl::flat_hash_map<int, int> position;
  for (size_t k = 0; k < input_slots.size(); ++k) {
    position.emplace(input_slots[k], static_cast<int>(k));
  }
  std::vector<std::vector<int>> in_place(in_place_slots.size());
  for (size_t j = 0; j < in_place_slots.size(); ++j) {
    for (int slot : in_place_slots[j]) {
      if (auto at = position.find(slot); at != position.end()) in_place[j].push_back(at->second);
    }
  }
  return in_place;
}

// Builds the loop that computes `nodes` and writes `outputs` (PlanLoop) as
// a kernel: a tuple of the outputs when `tuple`, else the one. Output j may
// take in place the inputs read from the slots `in_place_slots[j]` (the
// buffer assignment's, compiler/passes/buffer_assignment.h).
Kernel MakeLoopKernel(const std::vector<const Instruction*>& nodes,
                      const std::vector<const Instruction*>& outputs, bool tuple,
                      const std::function<int(const Instruction*)>& slot_of,
                      const std::vector<std::vector<int>>& in_place_slots,
                      std::vector<int>* input_slots) {
  std::shared_ptr<const FusedGroup> group = PlanLoop(nodes, outputs, slot_of, input_slots);
  std::vector<ir::Shape> out_shapes;
  for (const Instruction* o : outputs) out_shapes.push_back(o->shape());
  std::vector<std::vector<int>> in_place = InPlacePositions(in_place_slots, *input_slots);
  return [group, out_shapes, in_place = std::move(in_place), tuple](
             ExecState& st, const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(auto outs, LoopOutputs(st, in_place, ops, out_shapes));
    absl::InlinedVector<const uint8_t*, 8> inputs;
    for (const BufferPtr& b : ops) inputs.push_back(b->data());
    absl::InlinedVector<uint8_t*, 2> out_data;
    for (const BufferPtr& b : outs) out_data.push_back(b->data());
    RunFusedGroup(*group, inputs, out_data);
    if (!tuple) return outs[0];
    return HostBuffer::MakeTuple(std::vector<BufferPtr>(outs.begin(), outs.end()));
  };
}

// The kernel of `call`, a call of a reduction fusion: its loop and reduce
// in one pass (fused_reduce.h), result j of the loop taking in place the
// inputs read from the slots `in_place_slots[j]`. `input_slots` receives
// the loop's inputs' slots, then the initial value's.
Kernel MakeFusedReduceStep(const Instruction& call,
                           const std::vector<std::vector<int>>& in_place_slots,
                           std::vector<int>* input_slots) {
  const ir::Computation& callee = *call.called(0);
  const Instruction* reduce = passes::FusedReduce(callee);
  const Instruction* root = callee.root();
  const Instruction* value = reduce->operand(0);
  std::vector<const Instruction*> nodes;
  for (const auto& m : callee.instructions()) {
    if (m->opcode() != Opcode::kParameter && m.get() != reduce && m.get() != root) {
      nodes.push_back(m.get());
    }
  }
  FusedReduce spec;
  std::vector<const Instruction*> outputs;
  if (root != reduce) {
    for (int k = 0; k + 1 < root->operand_count(); ++k) {
      outputs.push_back(root->operand(k));
      spec.results.push_back(root->operand(k)->shape());
    }
  }
  auto at = std::find(outputs.begin(), outputs.end(), value);
  spec.value_output = static_cast<int>(at - outputs.begin());
  if (at == outputs.end()) outputs.push_back(value);
  auto slot_of = [&](const Instruction* param) {
    return call.operand(static_cast<int>(param->attrs().parameter_number))->index();
  };
  spec.group = PlanLoop(nodes, outputs, slot_of, input_slots);
  spec.in_place = InPlacePositions(in_place_slots, *input_slots);
  input_slots->push_back(slot_of(reduce->operand(1)));
  spec.op = *MatchScalarBinary(*reduce->called(0));
  spec.leading = passes::ReducesLeadingDims(*reduce);
  const int64_t count = value->shape().ElementCount();
  spec.length = spec.leading ? reduce->shape().ElementCount() : count / std::max<int64_t>(
                                                                    1, reduce->shape().ElementCount());
  spec.rows = spec.leading ? count / std::max<int64_t>(1, spec.length) : reduce->shape().ElementCount();
  spec.reduce_shape = reduce->shape();
  return MakeFusedReduceKernel(std::move(spec));
}

absl::StatusOr<Kernel> MakeKernel(const Instruction& instr,
                                  ProgramSource& programs) {
  switch (instr.opcode()) {
    case Opcode::kConstant: {
      ASSIGN_OR_RETURN(BufferPtr value,
                       Buffer::FromLiteral(instr.attrs().literal, nullptr));
      return Kernel([value](ExecState&, const std::vector<BufferPtr>&)
                        -> absl::StatusOr<BufferPtr> { return value; });
    }
    case Opcode::kIota: case Opcode::kBroadcast: case Opcode::kReshape:
    case Opcode::kTranspose: case Opcode::kSlice: case Opcode::kReverse:
    case Opcode::kPad: case Opcode::kConcatenate: case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice:
      return MakeDataKernel(instr);
    case Opcode::kReduce:
      return MakeReduceKernel(instr, programs);
    case Opcode::kReduceWindow: case Opcode::kSelectAndScatter:
      return MakeWindowKernel(instr, programs);
    case Opcode::kDot:
      return MakeDotKernel(instr);
    case Opcode::kConvolution:
      return MakeConvolutionKernel(instr);
    case Opcode::kGather: case Opcode::kScatter:
      return MakeGatherScatterKernel(instr, programs);
    case Opcode::kSort:
      return MakeSortKernel(instr, programs);
    case Opcode::kCholesky: case Opcode::kTriangularSolve:
      return MakeLinalgKernel(instr);
    default:
      return ir::IsCollective(instr.opcode()) ? MakeCollectiveKernel(instr)
                                              : MakeControlKernel(instr, programs);
  }
}

// A call that one library call runs (dot_fusion.h, convolution_fusion.h):
// what it fuses, for profiles, and the maker of its kernel.
struct LibraryFusion {
  const char* kind = nullptr;
  absl::StatusOr<Kernel> (*make)(const Instruction& call) = nullptr;
};

// The library fusion `instr` calls; none (a null kind) otherwise, and where
// kernels are wrapped (tpusim's rounding of matrix inputs: the call then
// runs its callee's instructions as steps, the product wrapped like any
// other).
LibraryFusion LibraryFusionOf(const Instruction& instr, const ProgramOptions& options) {
  if (instr.opcode() != Opcode::kCall || instr.called().size() != 1 || options.wrap_kernel) {
    return {};
  }
  if (passes::IsDotFusion(*instr.called(0))) return {"dot", MakeDotFusionKernel};
  if (passes::IsDotBiasFusion(*instr.called(0))) return {"dot", MakeDotBiasFusionKernel};
  if (passes::IsConvolutionFusion(*instr.called(0))) {
    return {"convolution", MakeConvolutionFusionKernel};
  }
  return {};
}

}  // namespace

std::optional<Opcode> MatchScalarBinary(const ir::Computation& c) {
  return passes::CommutativeReducerOp(c);
}

absl::StatusOr<std::shared_ptr<const Program>> Program::Build(
    const ir::Computation& comp, ProgramSource& programs, const ProgramOptions& options) {
  auto program = std::shared_ptr<Program>(new Program());
  program->name_ = comp.name();
  const auto& instrs = comp.instructions();
  const int n = static_cast<int>(instrs.size());
  program->num_slots_ = n;
  program->root_slot_ = comp.root()->index();
  for (const Instruction* p : comp.parameters()) {
    program->param_slots_.push_back(p->index());
  }
  // Where each value is released and which results may take an input's
  // buffer: the computation's buffer assignment.
  const passes::BufferAssignment buffers = passes::AssignBuffers(comp);
  // The slots result j of `instr` may take in place.
  auto in_place_slots = [&](const Instruction& instr) {
    std::vector<std::vector<int>> slots;
    for (const std::vector<int>& operands : buffers.in_place[instr.index()]) {
      std::vector<int>& result = slots.emplace_back();
      for (int q : operands) result.push_back(instr.operand(q)->index());
    }
    return slots;
  };
  std::vector<int> step_of(n, -1);
  for (int i = 0; i < n; ++i) {
    const Instruction& instr = *instrs[i];
    if (instr.opcode() == Opcode::kParameter) continue;
    step_of[i] = static_cast<int>(program->steps_.size());
    Step step;
    step.name = instr.name();
    step.what = absl::StrCat(ir::OpcodeName(instr.opcode()), " ", instr.shape().ToString(), " ",
                             instr.name());
    step.output = i;
    // Which instructions run as one loop is the fusion pass's choice
    // (compiler/passes/fusion.h): a call of a loop fusion runs its callee
    // as one loop, and a lone elementwise instruction or expandable
    // broadcast is a loop of one.
    const bool fused_call = instr.opcode() == Opcode::kCall && instr.called().size() == 1 &&
                            passes::IsLoopFusion(*instr.called(0));
    if (fused_call) {
      const ir::Computation& callee = *instr.called(0);
      const Instruction* root = callee.root();
      // A tuple root names the outputs; the kernel assembles it.
      const bool tuple = root->opcode() == Opcode::kTuple;
      std::vector<const Instruction*> nodes;
      for (const auto& m : callee.instructions()) {
        if (m->opcode() != Opcode::kParameter && !(tuple && m.get() == root)) {
          nodes.push_back(m.get());
        }
      }
      std::vector<const Instruction*> outputs;
      if (tuple) {
        for (const Instruction* o : root->operands()) outputs.push_back(o);
      } else {
        outputs.push_back(root);
      }
      step.what = absl::StrCat("fused ", ir::OpcodeName(outputs.back()->opcode()), " ",
                               instr.shape().ToString(), " ", instr.name());
      step.kernel = MakeLoopKernel(
          nodes, outputs, tuple,
          [&](const Instruction* param) {
            return instr.operand(static_cast<int>(param->attrs().parameter_number))->index();
          },
          in_place_slots(instr), &step.inputs);
      program->fused_instructions_ += static_cast<int>(nodes.size()) - 1;
    } else if (instr.opcode() == Opcode::kCall && instr.called().size() == 1 &&
               passes::IsReductionFusion(*instr.called(0))) {
      step.kernel = MakeFusedReduceStep(instr, in_place_slots(instr), &step.inputs);
      step.what = absl::StrCat("fused reduce ", instr.shape().ToString(), " ", instr.name());
      program->fused_instructions_ += instr.called(0)->instruction_count() -
                                      instr.called(0)->parameter_count() - 1;
    } else if (const LibraryFusion library = LibraryFusionOf(instr, options);
               library.kind != nullptr) {
      absl::StatusOr<Kernel> kernel = library.make(instr);
      if (!kernel.ok()) {
        return WithContext(kernel.status(), absl::StrCat("instruction ", instr.name()));
      }
      step.kernel = *std::move(kernel);
      step.what =
          absl::StrCat("fused ", library.kind, " ", instr.shape().ToString(), " ", instr.name());
      for (const Instruction* o : instr.operands()) step.inputs.push_back(o->index());
      program->fused_instructions_ += instr.called(0)->instruction_count() -
                                      instr.called(0)->parameter_count() - 1;
    } else if (ir::IsElementwise(instr.opcode()) || passes::IsExpandableBroadcast(instr)) {
      step.kernel = MakeLoopKernel(
          {&instr}, {&instr}, /*tuple=*/false, [](const Instruction* o) { return o->index(); },
          in_place_slots(instr), &step.inputs);
    } else {
      absl::StatusOr<Kernel> kernel = MakeKernel(instr, programs);
      if (kernel.ok() && options.wrap_kernel) {
        kernel = options.wrap_kernel(instr, *std::move(kernel));
      }
      if (!kernel.ok()) {
        return WithContext(kernel.status(),
                           absl::StrCat("instruction ", instr.name()));
      }
      step.kernel = *std::move(kernel);
      for (const Instruction* o : instr.operands()) step.inputs.push_back(o->index());
    }
    if (options.step_cost) step.cost = options.step_cost({&instr});
    program->steps_.push_back(std::move(step));
  }
  // Drop each value before its last reader runs, so memory is reused early
  // and that reader may take it in place.
  for (int i = 0; i < n; ++i) {
    if (step_of[i] >= 0) program->steps_[step_of[i]].release = buffers.released_by[i];
  }
  for (const Step& step : program->steps_) {
    program->max_inputs_ = std::max(program->max_inputs_, step.inputs.size());
  }
  if (options.arena && ArenaEnabled()) {
    program->arena_plan_ = ArenaPlan(comp, buffers, step_of, program->step_count());
  }
  if (logging::Logger().should_log(spdlog::level::debug)) {
    logging::Debug("program {}: {}; {} of them in an arena of {} bytes", comp.name(),
                   buffers.Summary(), program->arena_plan_.slice_count(),
                   program->arena_plan_.bytes());
  }
  return std::shared_ptr<const Program>(std::move(program));
}

absl::StatusOr<BufferPtr> Program::Run(ExecState& state,
                                       const std::vector<BufferPtr>& args) const {
  Slots slots(num_slots_);
  for (size_t i = 0; i < param_slots_.size() && i < args.size(); ++i) {
    slots[param_slots_[i]] = args[i];
  }
  return RunSlots(state, slots);
}

absl::StatusOr<BufferPtr> Program::Run(ExecState& state, absl::Span<BufferPtr> args) const {
  Slots slots(num_slots_);
  for (size_t i = 0; i < param_slots_.size() && i < args.size(); ++i) {
    slots[param_slots_[i]] = std::move(args[i]);
  }
  for (BufferPtr& arg : args) arg.reset();
  return RunSlots(state, slots);
}

absl::StatusOr<BufferPtr> Program::RunSlots(ExecState& state, Slots& slots) const {
  std::vector<BufferPtr> operands;
  operands.reserve(max_inputs_);
  ArenaRun arena(arena_plan_, arena_pool_, state.memory);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    operands.clear();
    for (int in : step.inputs) operands.push_back(slots[in]);
    // Values read for the last time are dropped before the kernel runs, so
    // that it may reuse one nobody else holds (see LoopOutputs).
    for (int r : step.release) slots[r].reset();
    OfferScope offer(arena.Begin(static_cast<int>(s)));
    StepProfile* profile = StepProfile::Get();
    const auto start = profile != nullptr ? std::chrono::steady_clock::now()
                                          : std::chrono::steady_clock::time_point();
    absl::StatusOr<BufferPtr> out = step.kernel(state, operands);
    if (profile != nullptr) {
      profile->Add(name_, step.what,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (!out.ok()) {
      return WithContext(out.status(), absl::StrCat("in ", name_, ", instruction ", step.name));
    }
    // Kernels stop early when cancelled; what they left is never read.
    if (Cancelled()) return absl::CancelledError("the execution was cancelled");
    slots[step.output] = *std::move(out);
    if (state.cost != nullptr) *state.cost += step.cost;
  }
  operands.clear();
  absl::StatusOr<BufferPtr> result = arena.Finish(std::move(slots[root_slot_]));
  if (arena.taken() > 0) arena_taken_.fetch_add(arena.taken(), std::memory_order_relaxed);
  return result;
}

absl::StatusOr<std::shared_ptr<const Program>> ProgramCache::Get(
    const ir::Computation* computation) {
  auto it = programs_.find(computation);
  if (it != programs_.end()) return it->second;
  ASSIGN_OR_RETURN(std::shared_ptr<const Program> p,
                   Program::Build(*computation, *this, options_));
  programs_[computation] = p;
  return p;
}

}  // namespace kiln::host
