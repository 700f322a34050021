#include "compiler/passes/fusion.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/passes/convolution_fusion.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/dot_bias_fusion.h"
#include "compiler/passes/dot_fusion.h"
#include "compiler/passes/reduction_fusion.h"
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

}  // namespace

Users UsersOf(const Computation& comp) {
  Users users;
  for (const auto& instr : comp.instructions()) {
    for (const Instruction* o : instr->operands()) {
      auto& u = users[o];
      if (std::find(u.begin(), u.end(), instr.get()) == u.end()) u.push_back(instr.get());
    }
  }
  return users;
}

void Redirect(Computation* comp, Users& readers, Instruction* old, Instruction* replacement) {
  std::vector<Instruction*> moved = std::move(readers[old]);
  readers.erase(old);
  std::vector<Instruction*>& now = readers[replacement];
  for (Instruction* r : moved) {
    for (int k = 0; k < r->operand_count(); ++k) {
      if (r->operand(k) == old) r->ReplaceOperand(k, replacement);
    }
    if (std::find(now.begin(), now.end(), r) == now.end()) now.push_back(r);
  }
  if (comp->root() == old) comp->set_root(replacement);
}

absl::StatusOr<Instruction*> AddFusedCall(ir::Module* module, std::unique_ptr<Computation> callee,
                                          const std::vector<Instruction*>& inputs,
                                          int source_line, Rewriter& rewriter, Users* readers) {
  Computation* added_callee = module->AddComputation(std::move(callee));
  auto call = std::make_unique<Instruction>(Opcode::kCall, added_callee->root()->shape(), "");
  for (Instruction* in : inputs) call->AddOperand(in);
  call->AddCalled(added_callee);
  call->set_source_line(source_line);
  ASSIGN_OR_RETURN(Instruction * added, rewriter.Add(std::move(call), "fusion"));
  if (readers == nullptr) return added;
  for (Instruction* in : inputs) {
    std::vector<Instruction*>& r = (*readers)[in];
    if (std::find(r.begin(), r.end(), added) == r.end()) r.push_back(added);
  }
  return added;
}

bool IsFusedCallee(const Computation& c) {
  return IsLoopFusion(c) || IsReductionFusion(c) || IsDotFusion(c) || IsDotBiasFusion(c) ||
         IsConvolutionFusion(c);
}

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
  // Loops, conditions and branches run their instructions as steps even
  // when they have a loop's form; only a call runs its callee as one loop.
  absl::flat_hash_set<const Computation*> stepped;
  for (const Computation* c : reachable) {
    for (const auto& instr : c->instructions()) {
      if (instr->opcode() == Opcode::kCall) continue;
      for (const Computation* callee : instr->called()) stepped.insert(callee);
    }
  }
  absl::flat_hash_set<const Computation*> fusible;
  for (const Computation* c : reachable) {
    if (applied.contains(c)) continue;
    if (c != module.entry() && !stepped.contains(c) && IsFusedCallee(*c)) continue;
    fusible.insert(c);
  }
  return fusible;
}

namespace {

// One group: the members computed inside it (topological) and the ones
// written out (read outside the group, or the computation's root).
struct Group {
  std::vector<Instruction*> members;
  absl::flat_hash_set<const Instruction*> member_set;
  std::vector<Instruction*> outputs;
  bool merged = false;  // taken into another group
};


// Plans the groups of `comp`: each fusible instruction joins the group of
// its only user when that user is elementwise, fused and of its
// dimensions; a broadcast whose users are all fused elementwise
// instructions is expanded by each of them (`inlined`). Every fusible
// instruction that is not inlined gets a group, one instruction or more.
std::vector<Group> PlanGroups(const Computation& comp, Users& users,
                              absl::flat_hash_set<const Instruction*>* inlined) {
  const auto& instrs = comp.instructions();
  absl::flat_hash_map<const Instruction*, Instruction*> group_of;
  for (auto it = instrs.rbegin(); it != instrs.rend(); ++it) {
    Instruction* instr = it->get();
    const bool elementwise = ir::IsElementwise(instr->opcode());
    if (!elementwise && !IsExpandableBroadcast(*instr)) continue;
    if (instr->shape().IsTuple()) continue;
    const std::vector<Instruction*>& uses = users[instr];
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
    if (inserted) groups.emplace_back();
    Group& group = groups[slot->second];
    group.members.push_back(instr.get());
    group.member_set.insert(instr.get());
  }
  return groups;
}

// At most this many instructions are visited to prove one merge safe; a
// merge that needs more is not made.
constexpr int kMergeSearchBudget = 20000;

// Whether the union of `a` and `b` is convex once every other group is one
// call: no value outside it is computed from a member and read by a member
// (the fused call would then need its own result). `group_index` and
// `groups` give the other groups, which a path enters through any member
// and leaves through any member's operands; such a path may lead to values
// anywhere before the union, so the walk is bounded by size alone.
bool UnionIsConvex(const Group& a, const Group& b,
                   const absl::flat_hash_map<const Instruction*, int>& group_index,
                   const std::vector<Group>& groups) {
  auto inside = [&](const Instruction* i) {
    return a.member_set.contains(i) || b.member_set.contains(i);
  };
  std::vector<const Instruction*> work;
  absl::flat_hash_set<const Instruction*> seen;
  absl::flat_hash_set<int> entered;
  // Queues the operands of `members` that are outside the union; false
  // when `check` and one is inside it.
  auto read_by = [&](const std::vector<Instruction*>& members, bool check) {
    for (const Instruction* m : members) {
      for (const Instruction* o : m->operands()) {
        if (inside(o)) {
          if (check) return false;
          continue;
        }
        if (seen.insert(o).second) work.push_back(o);
      }
    }
    return true;
  };
  read_by(a.members, false);
  read_by(b.members, false);
  // Backwards from the values read from outside: reaching a member means
  // the value depends on the union.
  while (!work.empty()) {
    const Instruction* v = work.back();
    work.pop_back();
    if (static_cast<int>(seen.size()) > kMergeSearchBudget) return false;
    if (auto g = group_index.find(v); g != group_index.end()) {
      if (entered.insert(g->second).second && !read_by(groups[g->second].members, true)) {
        return false;
      }
      continue;
    }
    for (const Instruction* o : v->operands()) {
      if (inside(o)) return false;
      if (seen.insert(o).second) work.push_back(o);
    }
  }
  return true;
}

// Multi-output fusion: a group whose output other instructions read as
// well joins the group of an elementwise user of the same dimensions when
// the union stays convex; the joined group writes both results in one pass
// (a momentum and the weights it updates; a pre-activation and its relu).
void MergeProducers(const Computation& comp, Users& users, std::vector<Group>& groups) {
  absl::flat_hash_map<const Instruction*, int> position;
  for (const auto& instr : comp.instructions()) {
    position[instr.get()] = static_cast<int>(position.size());
  }
  absl::flat_hash_map<const Instruction*, int> group_index;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    for (const Instruction* m : groups[g].members) group_index[m] = g;
  }
  for (int p = 0; p < static_cast<int>(groups.size()); ++p) {
    Group& producer = groups[p];
    const Instruction* out = producer.members.back();
    if (out == comp.root() || users[out].size() < 2) continue;
    for (const Instruction* u : users[out]) {
      auto it = group_index.find(u);
      if (it == group_index.end() || it->second == p || !ir::IsElementwise(u->opcode())) {
        continue;
      }
      Group& consumer = groups[it->second];
      if (consumer.members.back()->shape().dims() != out->shape().dims() ||
          !UnionIsConvex(producer, consumer, group_index, groups)) {
        continue;
      }
      std::vector<Instruction*> members = producer.members;
      members.insert(members.end(), consumer.members.begin(), consumer.members.end());
      std::sort(members.begin(), members.end(), [&](const Instruction* x, const Instruction* y) {
        return position.at(x) < position.at(y);
      });
      consumer.members = std::move(members);
      for (Instruction* m : producer.members) {
        consumer.member_set.insert(m);
        group_index[m] = it->second;
      }
      producer.merged = true;
      break;
    }
  }
}

// The members that `groups` must write out: read outside their group, or
// the root.
void FindOutputs(const Computation& comp, Users& users, std::vector<Group>& groups) {
  for (Group& g : groups) {
    for (Instruction* m : g.members) {
      const std::vector<Instruction*>& uses = users[m];
      if (m == comp.root() || std::any_of(uses.begin(), uses.end(), [&](const Instruction* u) {
            return !g.member_set.contains(u);
          })) {
        g.outputs.push_back(m);
      }
    }
  }
}

// Builds the computation `name` computing `group`; `inputs` receives the
// values it reads, in parameter order. Several outputs make a tuple root.
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
  if (group.outputs.size() == 1) {
    fused->set_root(copy_of.at(group.outputs[0]));
  } else {
    std::vector<ir::Shape> shapes;
    for (const Instruction* o : group.outputs) shapes.push_back(o->shape());
    auto tuple = std::make_unique<Instruction>(Opcode::kTuple, ir::Shape::Tuple(std::move(shapes)),
                                               "outputs");
    for (const Instruction* o : group.outputs) tuple->AddOperand(copy_of.at(o));
    fused->set_root(fused->AddInstruction(std::move(tuple)));
  }
  MakeInstructionNamesUnique(fused.get());
  return fused;
}

// Fuses `comp`; new computations get names not in `comp_names`.
absl::StatusOr<bool> FuseComputation(ir::Module* module, Computation* comp,
                                     const LoopFusionOptions& options,
                                     absl::flat_hash_set<std::string>& comp_names) {
  RETURN_IF_ERROR(comp->Canonicalize());
  Users users = UsersOf(*comp);
  absl::flat_hash_set<const Instruction*> inlined;
  std::vector<Group> groups = PlanGroups(*comp, users, &inlined);
  if (options.multi_output) MergeProducers(*comp, users, groups);
  FindOutputs(*comp, users, groups);
  // Adds the calls and their elements under unique names (the rewriter's
  // sweep is not used: one call replaces several instructions).
  Rewriter rewriter(comp);
  // What replaces each output: the call, or an element of its tuple.
  absl::flat_hash_map<const Instruction*, Instruction*> replacement;
  for (const Group& g : groups) {
    if (g.merged) continue;
    // A group of one instruction that expands no broadcast gains nothing.
    bool expands = false;
    for (const Instruction* m : g.members) {
      for (const Instruction* o : m->operands()) expands = expands || inlined.contains(o);
    }
    if (g.members.size() < 2 && !expands) continue;
    const std::string name = FreeComputationName("fused_computation", comp_names);
    std::vector<Instruction*> inputs;
    std::unique_ptr<Computation> fused = Outline(g, inlined, name, &inputs);
    RETURN_IF_ERROR(fused->Canonicalize());
    // Only what a backend will run as one loop is outlined.
    if (!IsLoopFusion(*fused)) continue;
    comp_names.insert(name);
    ASSIGN_OR_RETURN(Instruction * added,
                     AddFusedCall(module, std::move(fused), inputs,
                                  g.outputs.back()->source_line(), rewriter));
    if (g.outputs.size() == 1) {
      replacement[g.outputs[0]] = added;
      continue;
    }
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      auto element = std::make_unique<Instruction>(Opcode::kGetTupleElement,
                                                    g.outputs[k]->shape(), "");
      element->AddOperand(added);
      element->mutable_attrs().tuple_index = static_cast<int64_t>(k);
      ASSIGN_OR_RETURN(replacement[g.outputs[k]],
                       rewriter.Add(std::move(element), g.outputs[k]->name()));
    }
  }
  if (replacement.empty()) return false;
  // Every reader of an output, the new calls included, reads its
  // replacement; the fused instructions stay behind without users.
  for (const auto& instr : comp->instructions()) {
    for (int k = 0; k < instr->operand_count(); ++k) {
      auto it = replacement.find(instr->operand(k));
      if (it != replacement.end() && it->second != instr.get()) instr->ReplaceOperand(k, it->second);
    }
  }
  if (auto it = replacement.find(comp->root()); it != replacement.end()) {
    comp->set_root(it->second);
  }
  RETURN_IF_ERROR(comp->Canonicalize());
  return true;
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

bool IsLoopBody(const Computation& c, const std::vector<int64_t>& dims,
                const absl::flat_hash_set<const Instruction*>& skip) {
  for (const auto& instr : c.instructions()) {
    if (instr->opcode() == Opcode::kParameter) {
      if (!instr->shape().IsArray()) return false;
      continue;
    }
    if (skip.contains(instr.get())) continue;
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

bool IsLoopFusion(const Computation& c) {
  const Instruction* root = c.root();
  if (root == nullptr || root->opcode() == Opcode::kParameter) return false;
  // The outputs: the root, or the elements of a tuple root (distinct
  // instructions of the loop).
  std::vector<const Instruction*> outputs;
  absl::flat_hash_set<const Instruction*> skip;
  if (root->opcode() == Opcode::kTuple) {
    if (root->operand_count() == 0) return false;
    for (const Instruction* o : root->operands()) {
      if (o->opcode() == Opcode::kParameter || o->opcode() == Opcode::kTuple ||
          std::find(outputs.begin(), outputs.end(), o) != outputs.end()) {
        return false;
      }
      outputs.push_back(o);
    }
    skip.insert(root);
  } else {
    outputs.push_back(root);
  }
  if (outputs[0]->shape().IsTuple()) return false;
  return IsLoopBody(c, outputs[0]->shape().dims(), skip);
}

void MakeInstructionNamesUnique(Computation* c) {
  absl::flat_hash_set<std::string> taken;
  for (const auto& instr : c->instructions()) {
    std::string name = instr->name();
    for (int n = 1; taken.contains(name); ++n) name = absl::StrCat(instr->name(), ".", n);
    taken.insert(name);
    instr->set_name(std::move(name));
  }
}

std::unique_ptr<Instruction> NewInstruction(Opcode op, const ir::Shape& shape,
                                            const std::string& name,
                                            const std::vector<Instruction*>& operands) {
  auto n = std::make_unique<Instruction>(op, shape, name);
  for (Instruction* o : operands) n->AddOperand(o);
  return n;
}

std::vector<Instruction*> AddParameters(Computation* c,
                                        const std::vector<const Instruction*>& passed) {
  std::vector<Instruction*> params;
  for (size_t k = 0; k < passed.size(); ++k) {
    auto p = NewInstruction(Opcode::kParameter, passed[k]->shape(), absl::StrCat("param_", k));
    p->mutable_attrs().parameter_number = static_cast<int64_t>(k);
    params.push_back(c->AddInstruction(std::move(p)));
  }
  return params;
}

absl::StatusOr<bool> OutlineAdds(
    ir::Module* module, Computation* comp, absl::flat_hash_set<std::string>& names,
    absl::string_view base,
    absl::FunctionRef<std::optional<OutlinedAdd>(Instruction* add, Users& readers,
                                                 const std::string& name)>
        outline) {
  std::vector<Instruction*> adds;
  for (const auto& instr : comp->instructions()) {
    if (instr->opcode() == Opcode::kAdd) adds.push_back(instr.get());
  }
  if (adds.empty()) return false;
  Users readers = UsersOf(*comp);
  Rewriter rewriter(comp);
  bool changed = false;
  for (Instruction* add : adds) {
    const std::string name = FreeComputationName(base, names);
    std::optional<OutlinedAdd> outlined = outline(add, readers, name);
    if (!outlined.has_value()) continue;
    names.insert(name);
    ASSIGN_OR_RETURN(Instruction * added,
                     AddFusedCall(module, std::move(outlined->callee), outlined->inputs,
                                  add->source_line(), rewriter, &readers));
    Redirect(comp, readers, outlined->replaced != nullptr ? outlined->replaced : add, added);
    changed = true;
  }
  if (changed) RETURN_IF_ERROR(comp->Canonicalize());
  return changed;
}

std::string FreeComputationName(absl::string_view base,
                                const absl::flat_hash_set<std::string>& names) {
  std::string name(base);
  for (int n = 1; names.contains(name); ++n) name = absl::StrCat(base, ".", n);
  return name;
}

absl::StatusOr<bool> FuseEachComputation(
    ir::Module* module,
    absl::FunctionRef<absl::StatusOr<bool>(Computation*, absl::flat_hash_set<std::string>&)>
        fuse) {
  if (module->entry() == nullptr) return false;
  const absl::flat_hash_set<const Computation*> fusible = FusibleComputations(*module);
  absl::flat_hash_set<std::string> names;
  for (const auto& c : module->computations()) names.insert(c->name());
  // Computations added below are fused callees already: only the ones
  // present now are visited.
  std::vector<Computation*> targets;
  for (const auto& c : module->computations()) {
    if (fusible.contains(c.get())) targets.push_back(c.get());
  }
  bool changed = false;
  for (Computation* comp : targets) {
    ASSIGN_OR_RETURN(bool comp_changed, fuse(comp, names));
    changed = changed || comp_changed;
  }
  // The fused instructions stay behind without users.
  if (changed) RETURN_IF_ERROR(Dce().Run(module).status());
  return changed;
}

absl::StatusOr<bool> LoopFusion::Run(ir::Module* module) {
  return FuseEachComputation(module, [&](Computation* comp, absl::flat_hash_set<std::string>& names) {
    return FuseComputation(module, comp, options_, names);
  });
}

}  // namespace kiln::passes
