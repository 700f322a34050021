#include "runtime/host/program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "runtime/host/cancel.h"
#include "runtime/host/elementwise.h"

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

// A broadcast that fused loops expand as they go: of a scalar, or of an
// operand whose dimensions are a contiguous run of the output's (a bias over
// channels, a vector over rows).
bool IsExpandableBroadcast(const Instruction& instr) {
  if (instr.opcode() != Opcode::kBroadcast) return false;
  const ir::Shape& in = instr.operand(0)->shape();
  if (in.ElementCount() == 1) return true;
  const std::vector<int64_t>& dims = instr.attrs().dimensions;
  if (dims.empty() || in.dims() == instr.shape().dims()) return false;
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] != dims[i - 1] + 1) return false;
  }
  return true;
}

bool IsFusible(const Instruction& instr) {
  return ir::IsElementwise(instr.opcode()) || IsExpandableBroadcast(instr);
}

// group_of[i] for a broadcast that every user's fused group expands itself
// (it has no step of its own).
constexpr int kInlined = -2;

// Builds the fused kernel for the instructions `members` (topological order;
// the last is the group's output). Operands whose group_of is kInlined are
// broadcasts expanded inside the group.
Kernel MakeFusedKernel(const std::vector<const Instruction*>& members,
                       const std::vector<int>& group_of, std::vector<int>* input_slots) {
  auto group = std::make_shared<FusedGroup>();
  absl::flat_hash_map<const Instruction*, int> node_of;
  absl::flat_hash_map<const Instruction*, int> input_of;
  auto input = [&](const Instruction* o) {
    auto [in, inserted] = input_of.emplace(o, static_cast<int>(group->input_types.size()));
    if (inserted) {
      group->input_types.push_back(o->shape().type());
      group->input_is_scalar.push_back(o->shape().ElementCount() == 1);
      input_slots->push_back(o->index());
    }
    return -1 - in->second;
  };
  auto add_node = [&](const Instruction* m, std::vector<int> args) {
    FusedNode node;
    node.op = m->opcode();
    node.out_type = m->shape().type();
    node.in_type = m->operand(0)->shape().type();
    node.direction = m->attrs().direction;
    node.args = std::move(args);
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
    return node_of[m];
  };
  for (const Instruction* m : members) {
    std::vector<int> args;
    for (const Instruction* o : m->operands()) {
      auto it = node_of.find(o);
      if (it != node_of.end()) {
        args.push_back(it->second);
      } else if (group_of[o->index()] == kInlined) {
        args.push_back(add_node(o, {input(o->operand(0))}));
      } else {
        args.push_back(input(o));
      }
    }
    add_node(m, std::move(args));
  }
  const ir::Shape out_shape = members.back()->shape();
  group->element_count = out_shape.ElementCount();
  return [group, out_shape](ExecState& st, const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    // An input that nothing else holds (Program::Run dropped its slot: this
    // is its last reader) and that has the output's shape takes the result
    // in place, saving an allocation and its page faults.
    BufferPtr out;
    for (size_t k = 0; k < ops.size(); ++k) {
      if (!group->input_is_scalar[k] && ops[k].use_count() == 1 &&
          ops[k]->shape() == out_shape) {
        out = ops[k];
        break;
      }
    }
    if (out == nullptr) {
      ASSIGN_OR_RETURN(out, st.Allocate(out_shape));
    }
    std::vector<const uint8_t*> inputs;
    inputs.reserve(ops.size());
    for (const BufferPtr& b : ops) inputs.push_back(b->data());
    RunFusedGroup(*group, inputs, out->data());
    return out;
  };
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

}  // namespace

std::optional<Opcode> MatchScalarBinary(const ir::Computation& c) {
  if (c.parameter_count() != 2 || c.instruction_count() != 3) return std::nullopt;
  const Instruction* root = c.root();
  if (root->operand_count() != 2 || !root->shape().IsScalar()) return std::nullopt;
  const Instruction* p0 = c.parameter(0);
  const Instruction* p1 = c.parameter(1);
  const Opcode op = root->opcode();
  const bool commutative = op == Opcode::kAdd || op == Opcode::kMultiply ||
                           op == Opcode::kMaximum || op == Opcode::kMinimum ||
                           op == Opcode::kAnd || op == Opcode::kOr;
  if (!commutative) return std::nullopt;
  if ((root->operand(0) == p0 && root->operand(1) == p1) ||
      (root->operand(0) == p1 && root->operand(1) == p0)) {
    return op;
  }
  return std::nullopt;
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
  // Users per instruction, to find single-use chains.
  std::vector<std::vector<const Instruction*>> users(n);
  for (const auto& instr : instrs) {
    for (const Instruction* o : instr->operands()) {
      auto& u = users[o->index()];
      if (std::find(u.begin(), u.end(), instr.get()) == u.end()) {
        u.push_back(instr.get());
      }
    }
  }
  // group_of[i]: the instruction whose fused step computes i (itself when it
  // is a group's output), or -1 when i is not fused.
  std::vector<int> group_of(n, -1);
  for (int i = n - 1; i >= 0; --i) {
    const Instruction& instr = *instrs[i];
    if (!IsFusible(instr)) continue;
    group_of[i] = i;
    if (IsExpandableBroadcast(instr) && &instr != comp.root() && !users[i].empty() &&
        std::all_of(users[i].begin(), users[i].end(), [&](const Instruction* u) {
          return group_of[u->index()] >= 0 && ir::IsElementwise(u->opcode());
        })) {
      // Cheaper to expand in each user's loop than to write out and read.
      group_of[i] = kInlined;
      continue;
    }
    if (users[i].size() == 1 && &instr != comp.root()) {
      const Instruction* user = users[i][0];
      if (group_of[user->index()] >= 0 &&
          user->shape().dims() == instr.shape().dims()) {
        group_of[i] = group_of[user->index()];
      }
    }
  }
  std::vector<std::vector<const Instruction*>> members(n);
  for (int i = 0; i < n; ++i) {
    if (group_of[i] >= 0) members[group_of[i]].push_back(instrs[i].get());
  }
  for (int i = 0; i < n; ++i) {
    const Instruction& instr = *instrs[i];
    if (instr.opcode() == Opcode::kParameter || group_of[i] == kInlined) continue;
    if (group_of[i] >= 0 && group_of[i] != i) continue;  // inside a group
    Step step;
    step.name = instr.name();
    step.what = absl::StrCat(group_of[i] == i ? "fused " : "", ir::OpcodeName(instr.opcode()),
                             " ", instr.shape().ToString(), " ", instr.name());
    step.output = i;
    if (group_of[i] == i) {
      step.kernel = MakeFusedKernel(members[i], group_of, &step.inputs);
      program->fused_instructions_ += static_cast<int>(members[i].size()) - 1;
      if (options.step_cost) step.cost = options.step_cost(members[i]);
    } else {
      absl::StatusOr<Kernel> kernel = MakeKernel(instr, programs);
      if (kernel.ok() && options.wrap_kernel) {
        kernel = options.wrap_kernel(instr, *std::move(kernel));
      }
      if (options.step_cost) step.cost = options.step_cost({&instr});
      if (!kernel.ok()) {
        return WithContext(kernel.status(),
                           absl::StrCat("instruction ", instr.name()));
      }
      step.kernel = *std::move(kernel);
      for (const Instruction* o : instr.operands()) step.inputs.push_back(o->index());
    }
    program->steps_.push_back(std::move(step));
  }
  // Drop each value after its last reader so memory is reused early.
  std::vector<int> last_reader(n, -1);
  for (int s = 0; s < static_cast<int>(program->steps_.size()); ++s) {
    for (int in : program->steps_[s].inputs) last_reader[in] = s;
  }
  for (int slot = 0; slot < n; ++slot) {
    if (last_reader[slot] >= 0 && slot != program->root_slot_) {
      program->steps_[last_reader[slot]].release.push_back(slot);
    }
  }
  return std::shared_ptr<const Program>(std::move(program));
}

absl::StatusOr<BufferPtr> Program::Run(ExecState& state,
                                       const std::vector<BufferPtr>& args) const {
  std::vector<BufferPtr> slots(num_slots_);
  for (size_t i = 0; i < param_slots_.size() && i < args.size(); ++i) {
    slots[param_slots_[i]] = args[i];
  }
  return RunSlots(state, std::move(slots));
}

absl::StatusOr<BufferPtr> Program::Run(ExecState& state, std::vector<BufferPtr>&& args) const {
  std::vector<BufferPtr> slots(num_slots_);
  for (size_t i = 0; i < param_slots_.size() && i < args.size(); ++i) {
    slots[param_slots_[i]] = std::move(args[i]);
  }
  args.clear();
  return RunSlots(state, std::move(slots));
}

absl::StatusOr<BufferPtr> Program::RunSlots(ExecState& state, std::vector<BufferPtr> slots) const {
  std::vector<BufferPtr> operands;
  for (const Step& step : steps_) {
    operands.clear();
    for (int in : step.inputs) operands.push_back(slots[in]);
    // Values read for the last time are dropped before the kernel runs, so
    // that it may reuse one nobody else holds (see MakeFusedKernel).
    for (int r : step.release) slots[r].reset();
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
  return slots[root_slot_];
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
