#include "compiler/passes/reduction_fusion.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::Instruction;
using ir::Opcode;

// At most this many instructions are visited to prove that an initial
// value does not depend on the loop; a reduce that needs more stays apart.
constexpr int kDependenceSearchBudget = 20000;

// Whether `value` is computed from `producer` (or may be: the search ran
// out of budget).
bool MayDependOn(const Instruction* value, const Instruction* producer) {
  std::vector<const Instruction*> work = {value};
  absl::flat_hash_set<const Instruction*> seen = {value};
  while (!work.empty()) {
    const Instruction* v = work.back();
    work.pop_back();
    if (v == producer || static_cast<int>(seen.size()) > kDependenceSearchBudget) return true;
    for (const Instruction* o : v->operands()) {
      if (seen.insert(o).second) work.push_back(o);
    }
  }
  return false;
}

// A reduce that may join its operand's loop, and that loop.
struct Candidate {
  Instruction* reduce = nullptr;
  Instruction* producer = nullptr;  // the call, or the lone instruction
  // The loop's computation, or null for a lone elementwise instruction.
  const Computation* loop = nullptr;
  // The element of a multi-output loop that is reduced, or -1.
  int element = -1;
};

// The reduce's operand's loop, when the reduce may join it.
std::optional<Candidate> Match(Instruction* reduce) {
  if (reduce->opcode() != Opcode::kReduce || reduce->operand_count() != 2 ||
      reduce->shape().IsTuple() || reduce->called().size() != 1 ||
      !reduce->operand(1)->shape().IsArray() ||
      reduce->operand(1)->shape().ElementCount() != 1 ||
      !CommutativeReducerOp(*reduce->called(0)).has_value() ||
      (!ReducesLeadingDims(*reduce) && !ReducesTrailingDims(*reduce))) {
    return std::nullopt;
  }
  Candidate c{.reduce = reduce};
  Instruction* value = reduce->operand(0);
  auto loop_call = [](const Instruction* i) {
    return i->opcode() == Opcode::kCall && i->called().size() == 1 &&
           IsLoopFusion(*i->called(0));
  };
  if (loop_call(value) && !value->shape().IsTuple()) {
    c.producer = value;
    c.loop = value->called(0);
  } else if (value->opcode() == Opcode::kGetTupleElement && loop_call(value->operand(0))) {
    c.producer = value->operand(0);
    c.loop = c.producer->called(0);
    c.element = static_cast<int>(value->attrs().tuple_index);
  } else if (ir::IsElementwise(value->opcode()) && value->shape().IsArray()) {
    c.producer = value;
  } else {
    return std::nullopt;
  }
  if (MayDependOn(reduce->operand(1), c.producer)) return std::nullopt;
  return c;
}

// Builds the fused computation of `c`: the loop (parameters in the order of
// `*inputs`, which receives the values the call passes), the reduce, and a
// tuple root when `kept` (the loop's outputs read elsewhere, by output
// index) is not empty. Null when the producer is read in a way this pass
// does not rewrite.
std::unique_ptr<Computation> Outline(const Candidate& c, const std::vector<int>& kept,
                                     const std::string& name, std::vector<Instruction*>* inputs) {
  auto fused = std::make_unique<Computation>(name);
  absl::flat_hash_map<const Instruction*, Instruction*> copy_of;
  auto add_param = [&](const ir::Shape& shape, Instruction* passed) {
    const int64_t number = static_cast<int64_t>(inputs->size());
    inputs->push_back(passed);
    auto param = std::make_unique<Instruction>(Opcode::kParameter, shape,
                                               absl::StrCat("param_", number));
    param->mutable_attrs().parameter_number = number;
    return fused->AddInstruction(std::move(param));
  };
  auto copy = [&](const Instruction* instr, const std::vector<Instruction*>& operands) {
    auto n = std::make_unique<Instruction>(instr->opcode(), instr->shape(), instr->name());
    n->mutable_attrs() = instr->attrs();
    n->set_source_line(instr->source_line());
    for (Instruction* o : operands) n->AddOperand(o);
    for (ir::Computation* callee : instr->called()) n->AddCalled(callee);
    Instruction* added = fused->AddInstruction(std::move(n));
    copy_of[instr] = added;
    return added;
  };
  // The loop's outputs, by output index; the reduced value.
  std::vector<Instruction*> outputs;
  Instruction* value = nullptr;
  if (c.loop == nullptr) {
    std::vector<Instruction*> operands;
    for (Instruction* o : c.producer->operands()) {
      auto it = copy_of.find(o);
      if (it == copy_of.end()) it = copy_of.emplace(o, add_param(o->shape(), o)).first;
      operands.push_back(it->second);
    }
    value = copy(c.producer, operands);
    outputs.push_back(value);
  } else {
    // The loop's parameters keep their numbers: the call's operands.
    for (int k = 0; k < c.producer->operand_count(); ++k) {
      add_param(c.producer->operand(k)->shape(), c.producer->operand(k));
    }
    for (const auto& instr : c.loop->instructions()) {
      if (instr->opcode() == Opcode::kParameter) {
        const int64_t number = instr->attrs().parameter_number;
        if (number < 0 || number >= static_cast<int64_t>(inputs->size())) return nullptr;
        copy_of[instr.get()] = fused->parameter(static_cast<int>(number));
        continue;
      }
      if (instr.get() == c.loop->root() && instr->opcode() == Opcode::kTuple) continue;
      std::vector<Instruction*> operands;
      for (const Instruction* o : instr->operands()) operands.push_back(copy_of.at(o));
      copy(instr.get(), operands);
    }
    const Instruction* root = c.loop->root();
    if (root->opcode() == Opcode::kTuple) {
      for (const Instruction* o : root->operands()) outputs.push_back(copy_of.at(o));
    } else {
      outputs.push_back(copy_of.at(root));
    }
    value = outputs[c.element < 0 ? 0 : c.element];
  }
  Instruction* init = add_param(c.reduce->operand(1)->shape(), c.reduce->operand(1));
  Instruction* reduce = copy(c.reduce, {value, init});
  if (kept.empty()) {
    fused->set_root(reduce);
  } else {
    std::vector<ir::Shape> shapes;
    for (int k : kept) shapes.push_back(outputs[k]->shape());
    shapes.push_back(reduce->shape());
    auto tuple = std::make_unique<Instruction>(Opcode::kTuple, ir::Shape::Tuple(std::move(shapes)),
                                               "outputs");
    for (int k : kept) tuple->AddOperand(outputs[k]);
    tuple->AddOperand(reduce);
    fused->set_root(fused->AddInstruction(std::move(tuple)));
  }
  MakeInstructionNamesUnique(fused.get());
  if (!fused->Canonicalize().ok()) return nullptr;
  return fused;
}

// Fuses `c` into one call in `comp` (added at the end: the caller puts the
// computation back in order); false when its producer is read in a way
// this pass does not rewrite.
absl::StatusOr<bool> FuseOne(ir::Module* module, Computation* comp, const Candidate& c,
                             Users& readers, Rewriter& rewriter,
                             absl::flat_hash_set<std::string>& comp_names) {
  // Which of the loop's outputs other instructions read.
  const int num_outputs = c.loop == nullptr || c.loop->root()->opcode() != Opcode::kTuple
                              ? 1
                              : c.loop->root()->operand_count();
  std::vector<bool> read(num_outputs, false);
  const bool multi = c.element >= 0;
  if (c.producer == comp->root()) return false;
  const std::vector<Instruction*> producer_readers = readers[c.producer];
  for (const Instruction* u : producer_readers) {
    if (!multi) {
      if (u != c.reduce) read[0] = true;
      continue;
    }
    // The producer of a multi-output loop is read through its elements.
    const int64_t k = u->attrs().tuple_index;
    if (u->opcode() != Opcode::kGetTupleElement || k < 0 || k >= num_outputs) return false;
    const std::vector<Instruction*>& element_readers = readers[u];
    if (u == comp->root() ||
        std::any_of(element_readers.begin(), element_readers.end(),
                    [&](const Instruction* r) { return r != c.reduce; })) {
      read[k] = true;
    }
  }
  std::vector<int> kept;
  absl::flat_hash_map<int64_t, int> position;  // output index -> element of the call
  for (int k = 0; k < num_outputs; ++k) {
    if (!read[k]) continue;
    position[k] = static_cast<int>(kept.size());
    kept.push_back(k);
  }
  const std::string name = FreeComputationName("fused_reduction", comp_names);
  std::vector<Instruction*> inputs;
  std::unique_ptr<Computation> fused = Outline(c, kept, name, &inputs);
  if (fused == nullptr || !IsReductionFusion(*fused)) return false;
  comp_names.insert(name);
  ASSIGN_OR_RETURN(Instruction * added, AddFusedCall(module, std::move(fused), inputs,
                                                     c.reduce->source_line(), rewriter, &readers));
  auto element = [&](int index, const Instruction* like) -> absl::StatusOr<Instruction*> {
    auto e = std::make_unique<Instruction>(Opcode::kGetTupleElement, like->shape(), "");
    e->AddOperand(added);
    e->mutable_attrs().tuple_index = index;
    ASSIGN_OR_RETURN(Instruction * got, rewriter.Add(std::move(e), like->name()));
    readers[added].push_back(got);
    return got;
  };
  // What replaces each value the call computes now.
  std::vector<std::pair<Instruction*, Instruction*>> replacement;
  if (kept.empty()) {
    replacement.emplace_back(c.reduce, added);
  } else {
    ASSIGN_OR_RETURN(Instruction * total, element(static_cast<int>(kept.size()), c.reduce));
    replacement.emplace_back(c.reduce, total);
    if (!multi) {
      ASSIGN_OR_RETURN(Instruction * value, element(0, c.producer));
      replacement.emplace_back(c.producer, value);
    } else {
      for (Instruction* u : producer_readers) {
        auto it = position.find(u->attrs().tuple_index);
        if (it == position.end()) continue;  // read by the reduce alone
        ASSIGN_OR_RETURN(Instruction * value, element(it->second, u));
        replacement.emplace_back(u, value);
      }
    }
  }
  // The replaced instructions stay behind without readers for DCE.
  for (const auto& [old, now] : replacement) Redirect(comp, readers, old, now);
  return true;
}

absl::StatusOr<bool> FuseReductions(ir::Module* module, Computation* comp,
                                    absl::flat_hash_set<std::string>& comp_names) {
  RETURN_IF_ERROR(comp->Canonicalize());
  std::vector<Instruction*> reduces;
  for (const auto& instr : comp->instructions()) {
    if (instr->opcode() == Opcode::kReduce) reduces.push_back(instr.get());
  }
  if (reduces.empty()) return false;
  // One at a time, each matched on the graph the ones before left: the
  // initial value's independence from the loop then keeps the graph
  // acyclic, and a loop that already fed a reduce is no longer a loop call.
  // The readers are kept up to date as they go, and the computation is put
  // back in order once, at the end.
  Users readers = UsersOf(*comp);
  Rewriter rewriter(comp);
  bool changed = false;
  for (Instruction* reduce : reduces) {
    std::optional<Candidate> c = Match(reduce);
    if (!c.has_value()) continue;
    ASSIGN_OR_RETURN(bool fused, FuseOne(module, comp, *c, readers, rewriter, comp_names));
    changed = changed || fused;
  }
  if (changed) RETURN_IF_ERROR(comp->Canonicalize());
  return changed;
}

}  // namespace

std::optional<Opcode> CommutativeReducerOp(const Computation& reducer) {
  if (reducer.parameter_count() != 2 || reducer.instruction_count() != 3) return std::nullopt;
  const Instruction* root = reducer.root();
  if (root == nullptr || root->operand_count() != 2 || !root->shape().IsArray() ||
      root->shape().rank() != 0) {
    return std::nullopt;
  }
  const Opcode op = root->opcode();
  if (op != Opcode::kAdd && op != Opcode::kMultiply && op != Opcode::kMaximum &&
      op != Opcode::kMinimum && op != Opcode::kAnd && op != Opcode::kOr) {
    return std::nullopt;
  }
  const Instruction* p0 = reducer.parameter(0);
  const Instruction* p1 = reducer.parameter(1);
  if ((root->operand(0) == p0 && root->operand(1) == p1) ||
      (root->operand(0) == p1 && root->operand(1) == p0)) {
    return op;
  }
  return std::nullopt;
}

namespace {

// The reduced dimensions of `reduce`, sorted, when they are distinct and
// within its operand's rank.
std::optional<std::vector<int64_t>> ReducedDims(const Instruction& reduce) {
  if (reduce.operand_count() < 1 || !reduce.operand(0)->shape().IsArray()) return std::nullopt;
  std::vector<int64_t> dims = reduce.attrs().dimensions;
  std::sort(dims.begin(), dims.end());
  const int64_t rank = reduce.operand(0)->shape().rank();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= rank || (i > 0 && dims[i] == dims[i - 1])) return std::nullopt;
  }
  return dims;
}

}  // namespace

bool ReducesLeadingDims(const Instruction& reduce) {
  std::optional<std::vector<int64_t>> dims = ReducedDims(reduce);
  if (!dims.has_value() || dims->empty()) return false;
  const int64_t rank = reduce.operand(0)->shape().rank();
  if (static_cast<int64_t>(dims->size()) >= rank) return false;
  for (size_t i = 0; i < dims->size(); ++i) {
    if ((*dims)[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

bool ReducesTrailingDims(const Instruction& reduce) {
  std::optional<std::vector<int64_t>> dims = ReducedDims(reduce);
  if (!dims.has_value() || dims->empty()) return false;
  const int64_t rank = reduce.operand(0)->shape().rank();
  const int64_t first = rank - static_cast<int64_t>(dims->size());
  for (size_t i = 0; i < dims->size(); ++i) {
    if ((*dims)[i] != first + static_cast<int64_t>(i)) return false;
  }
  return true;
}

const Instruction* FusedReduce(const Computation& c) {
  const Instruction* root = c.root();
  if (root == nullptr) return nullptr;
  if (root->opcode() == Opcode::kTuple) {
    return root->operand_count() == 0 ? nullptr : root->operand(root->operand_count() - 1);
  }
  return root;
}

bool IsReductionFusion(const Computation& c) {
  const Instruction* reduce = FusedReduce(c);
  if (reduce == nullptr || reduce->opcode() != Opcode::kReduce || reduce->operand_count() != 2 ||
      reduce->shape().IsTuple() || reduce->called().size() != 1 ||
      !CommutativeReducerOp(*reduce->called(0)).has_value() ||
      (!ReducesLeadingDims(*reduce) && !ReducesTrailingDims(*reduce))) {
    return false;
  }
  const Instruction* value = reduce->operand(0);
  const Instruction* init = reduce->operand(1);
  if (value->opcode() == Opcode::kParameter || value->shape().IsTuple() ||
      init->opcode() != Opcode::kParameter || !init->shape().IsArray() ||
      init->shape().ElementCount() != 1 || init->shape().type() != value->shape().type()) {
    return false;
  }
  absl::flat_hash_set<const Instruction*> skip = {reduce};
  const Instruction* root = c.root();
  // A tuple root holds at least one of the loop's values before the reduce.
  if (root != reduce && root->operand_count() < 2) return false;
  if (root != reduce) {
    skip.insert(root);
    for (int k = 0; k + 1 < root->operand_count(); ++k) {
      const Instruction* o = root->operand(k);
      if (o->opcode() == Opcode::kParameter || o->opcode() == Opcode::kTuple ||
          o->opcode() == Opcode::kReduce || o->shape().IsTuple()) {
        return false;
      }
      for (int j = 0; j < k; ++j) {
        if (root->operand(j) == o) return false;
      }
    }
  }
  // Only the root reads the reduce.
  for (const auto& instr : c.instructions()) {
    if (instr.get() == root) continue;
    for (const Instruction* o : instr->operands()) {
      if (o == reduce) return false;
    }
  }
  return IsLoopBody(c, value->shape().dims(), skip);
}

absl::StatusOr<bool> ReductionFusion::Run(ir::Module* module) {
  return FuseEachComputation(module, [&](Computation* comp, absl::flat_hash_set<std::string>& names) {
    return FuseReductions(module, comp, names);
  });
}

}  // namespace kiln::passes
