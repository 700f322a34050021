#include "compiler/passes/fusion.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::Instruction;
using ir::Opcode;

// Ops whose callees run once per call, as a sequence of instructions: the
// only computations fusion rewrites. Every other caller (reduce, sort,
// map, scatter, all-reduce, ...) applies its callee to scalars.
bool RunsCalleeAsSequence(Opcode op) {
  return op == Opcode::kWhile || op == Opcode::kConditional || op == Opcode::kCall;
}

// The computations to fuse in: reachable from the entry only through
// sequential callers, and not already one loop.
absl::flat_hash_set<const Computation*> FusibleComputations(const ir::Module& module) {
  const std::vector<const Computation*> reachable = module.PostOrder();
  absl::flat_hash_set<const Computation*> applied;
  std::vector<const Computation*> work;
  for (const Computation* c : reachable) {
    for (const auto& instr : c->instructions()) {
      if (RunsCalleeAsSequence(instr->opcode())) continue;
      for (const Computation* callee : instr->called()) {
        if (applied.insert(callee).second) work.push_back(callee);
      }
    }
  }
  // What an applied computation calls is applied too.
  while (!work.empty()) {
    const Computation* c = work.back();
    work.pop_back();
    for (const auto& instr : c->instructions()) {
      for (const Computation* callee : instr->called()) {
        if (applied.insert(callee).second) work.push_back(callee);
      }
    }
  }
  absl::flat_hash_set<const Computation*> fusible;
  for (const Computation* c : reachable) {
    if (applied.contains(c)) continue;
    if (c != module.entry() && IsLoopFusion(*c)) continue;
    fusible.insert(c);
  }
  return fusible;
}

// One group: its output, the members computed inside it (topological,
// output last), and the broadcasts it expands itself.
struct Group {
  Instruction* output = nullptr;
  std::vector<Instruction*> members;
  absl::flat_hash_set<const Instruction*> member_set;
};

// Plans the groups of `comp`: each fusible instruction joins the group of
// its only user when that user is elementwise, fused and of its
// dimensions; a broadcast whose users are all fused elementwise
// instructions is expanded by each of them (`inlined`).
std::vector<Group> PlanGroups(const Computation& comp,
                              absl::flat_hash_set<const Instruction*>* inlined) {
  const auto& instrs = comp.instructions();
  absl::flat_hash_map<const Instruction*, std::vector<const Instruction*>> users;
  for (const auto& instr : instrs) {
    for (const Instruction* o : instr->operands()) {
      auto& u = users[o];
      if (std::find(u.begin(), u.end(), instr.get()) == u.end()) u.push_back(instr.get());
    }
  }
  absl::flat_hash_map<const Instruction*, Instruction*> group_of;
  for (auto it = instrs.rbegin(); it != instrs.rend(); ++it) {
    Instruction* instr = it->get();
    const bool elementwise = ir::IsElementwise(instr->opcode());
    if (!elementwise && !IsExpandableBroadcast(*instr)) continue;
    if (instr->shape().IsTuple()) continue;
    const std::vector<const Instruction*>& uses = users[instr];
    const bool is_root = instr == comp.root();
    if (!elementwise && !is_root && !uses.empty() &&
        std::all_of(uses.begin(), uses.end(), [&](const Instruction* u) {
          return group_of.contains(u) && ir::IsElementwise(u->opcode());
        })) {
      inlined->insert(instr);
      continue;
    }
    group_of[instr] = instr;
    if (uses.size() == 1 && !is_root && elementwise) {
      const Instruction* user = uses[0];
      auto g = group_of.find(user);
      if (g != group_of.end() && ir::IsElementwise(user->opcode()) &&
          user->shape().dims() == instr->shape().dims()) {
        group_of[instr] = g->second;
      }
    }
  }
  absl::flat_hash_map<const Instruction*, int> index_of;
  std::vector<Group> groups;
  for (const auto& instr : instrs) {
    auto g = group_of.find(instr.get());
    if (g == group_of.end()) continue;
    auto [slot, inserted] = index_of.emplace(g->second, static_cast<int>(groups.size()));
    if (inserted) groups.push_back(Group{g->second, {}, {}});
    Group& group = groups[slot->second];
    group.members.push_back(instr.get());
    group.member_set.insert(instr.get());
  }
  // A group of one instruction that expands no broadcast gains nothing.
  std::vector<Group> kept;
  for (Group& g : groups) {
    bool expands = false;
    for (const Instruction* o : g.output->operands()) expands = expands || inlined->contains(o);
    if (g.members.size() > 1 || expands) kept.push_back(std::move(g));
  }
  return kept;
}

// Builds the computation `name` computing `group` (operands already
// redirected by the rewriter); `inputs` receives the values it reads, in
// parameter order.
std::unique_ptr<Computation> Outline(const Group& group,
                                     const absl::flat_hash_set<const Instruction*>& inlined,
                                     const std::string& name,
                                     std::vector<Instruction*>* inputs) {
  auto fused = std::make_unique<Computation>(name);
  absl::flat_hash_map<const Instruction*, Instruction*> copy_of;
  auto param_for = [&](Instruction* value) {
    auto it = copy_of.find(value);
    if (it != copy_of.end()) return it->second;
    const int64_t number = static_cast<int64_t>(inputs->size());
    inputs->push_back(value);
    auto param = std::make_unique<Instruction>(Opcode::kParameter, value->shape(),
                                               absl::StrCat("param_", number));
    param->mutable_attrs().parameter_number = number;
    Instruction* added = fused->AddInstruction(std::move(param));
    copy_of[value] = added;
    return added;
  };
  auto copy = [&](const Instruction* instr, std::vector<Instruction*> operands) {
    auto c = std::make_unique<Instruction>(instr->opcode(), instr->shape(), instr->name());
    c->mutable_attrs() = instr->attrs();
    c->set_source_line(instr->source_line());
    for (Instruction* o : operands) c->AddOperand(o);
    Instruction* added = fused->AddInstruction(std::move(c));
    copy_of[instr] = added;
    return added;
  };
  for (const Instruction* m : group.members) {
    std::vector<Instruction*> operands;
    for (Instruction* o : m->operands()) {
      auto it = copy_of.find(o);
      if (it != copy_of.end() && (group.member_set.contains(o) || inlined.contains(o))) {
        operands.push_back(it->second);
      } else if (inlined.contains(o)) {
        operands.push_back(copy(o, {param_for(o->operand(0))}));
      } else {
        operands.push_back(param_for(o));
      }
    }
    copy(m, std::move(operands));
  }
  fused->set_root(copy_of.at(group.output));
  // Parameter names may meet the copies' names.
  absl::flat_hash_set<std::string> taken;
  for (const auto& instr : fused->instructions()) {
    std::string name = instr->name();
    for (int n = 1; taken.contains(name); ++n) name = absl::StrCat(instr->name(), ".", n);
    taken.insert(name);
    instr->set_name(std::move(name));
  }
  return fused;
}

}  // namespace

bool IsExpandableBroadcast(const Instruction& instr) {
  if (instr.opcode() != Opcode::kBroadcast || instr.shape().IsTuple()) return false;
  const ir::Shape& in = instr.operand(0)->shape();
  if (in.IsTuple()) return false;
  if (in.ElementCount() == 1) return true;
  const std::vector<int64_t>& dims = instr.attrs().dimensions;
  if (dims.empty() || in.dims() == instr.shape().dims()) return false;
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] != dims[i - 1] + 1) return false;
  }
  return true;
}

bool IsLoopFusion(const Computation& c) {
  const Instruction* root = c.root();
  if (root == nullptr || root->shape().IsTuple() || root->opcode() == Opcode::kParameter) {
    return false;
  }
  const std::vector<int64_t>& dims = root->shape().dims();
  for (const auto& instr : c.instructions()) {
    if (instr->opcode() == Opcode::kParameter) {
      if (!instr->shape().IsArray()) return false;
      continue;
    }
    if (instr->shape().IsTuple() || instr->shape().dims() != dims) return false;
    if (ir::IsElementwise(instr->opcode())) {
      for (const Instruction* o : instr->operands()) {
        const bool scalar_input =
            o->opcode() == Opcode::kParameter && o->shape().ElementCount() == 1;
        if (o->shape().IsTuple() || (o->shape().dims() != dims && !scalar_input)) return false;
      }
    } else if (!IsExpandableBroadcast(*instr) ||
               instr->operand(0)->opcode() != Opcode::kParameter) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<bool> LoopFusion::Run(ir::Module* module) {
  if (module->entry() == nullptr) return false;
  const absl::flat_hash_set<const Computation*> fusible = FusibleComputations(*module);
  absl::flat_hash_set<std::string> names;
  for (const auto& c : module->computations()) names.insert(c->name());
  bool changed = false;
  // Computations added below are loop fusions already: only the ones
  // present now are visited.
  std::vector<Computation*> targets;
  for (const auto& c : module->computations()) {
    if (fusible.contains(c.get())) targets.push_back(c.get());
  }
  for (Computation* comp : targets) {
    absl::flat_hash_set<const Instruction*> inlined;
    const std::vector<Group> groups = PlanGroups(*comp, &inlined);
    if (groups.empty()) continue;
    absl::flat_hash_map<const Instruction*, const Group*> group_at;
    for (const Group& g : groups) group_at[g.output] = &g;
    Rewriter rewriter(comp);
    ASSIGN_OR_RETURN(bool comp_changed,
                     rewriter.Run([&](Instruction* instr) -> absl::StatusOr<Instruction*> {
                       auto g = group_at.find(instr);
                       if (g == group_at.end()) return nullptr;
                       std::string name = "fused_computation";
                       for (int n = 1; names.contains(name); ++n) {
                         name = absl::StrCat("fused_computation.", n);
                       }
                       std::vector<Instruction*> inputs;
                       std::unique_ptr<Computation> fused =
                           Outline(*g->second, inlined, name, &inputs);
                       RETURN_IF_ERROR(fused->Canonicalize());
                       // Only what a backend will run as one loop is outlined.
                       if (!IsLoopFusion(*fused)) return nullptr;
                       names.insert(name);
                       Computation* callee = module->AddComputation(std::move(fused));
                       auto call =
                           std::make_unique<Instruction>(Opcode::kCall, instr->shape(), "");
                       for (Instruction* in : inputs) call->AddOperand(in);
                       call->AddCalled(callee);
                       call->set_source_line(instr->source_line());
                       return rewriter.Add(std::move(call), "fusion");
                     }));
    changed = changed || comp_changed;
  }
  // The fused instructions stay behind without users.
  if (changed) RETURN_IF_ERROR(Dce().Run(module).status());
  return changed;
}

}  // namespace kiln::passes
