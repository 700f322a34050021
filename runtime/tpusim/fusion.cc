#include "runtime/tpusim/fusion.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

namespace kiln::tpusim {
namespace {

using ir::Instruction;
using ir::Opcode;

bool IsLoopOp(Opcode op) {
  switch (op) {
    case Opcode::kBroadcast: case Opcode::kReshape: case Opcode::kTranspose:
    case Opcode::kSlice: case Opcode::kDynamicSlice: case Opcode::kPad:
    case Opcode::kConcatenate: case Opcode::kReverse: case Opcode::kIota:
    case Opcode::kConstant: case Opcode::kReducePrecision:
      return true;
    default:
      return ir::IsElementwise(op);
  }
}

bool IsMatrixOp(Opcode op) { return op == Opcode::kDot || op == Opcode::kConvolution; }

bool IsReduction(Opcode op) { return op == Opcode::kReduce || op == Opcode::kReduceWindow; }

// What a region may hold one of at most.
bool IsHeavy(Opcode op) { return IsMatrixOp(op) || IsReduction(op); }

// Recomputed wherever it is read rather than stored once.
bool IsDuplicable(Opcode op) {
  return op == Opcode::kBroadcast || op == Opcode::kIota || op == Opcode::kConstant;
}

// What fuses into a dot's or a convolution's operands.
bool IsLayoutOp(Opcode op) {
  switch (op) {
    case Opcode::kBroadcast: case Opcode::kReshape: case Opcode::kTranspose:
    case Opcode::kConvert: case Opcode::kPad: case Opcode::kSlice:
    case Opcode::kConstant: case Opcode::kIota:
      return true;
    default:
      return false;
  }
}

// Reachability questions the multi-output fusion may ask per computation.
constexpr int kMaxDependencyWalks = 20000;

}  // namespace

bool IsFreeOp(Opcode op) {
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

FusionPlan::FusionPlan(const ir::Module& module) {
  // The computations that run as programs: the entry and what control flow
  // calls. A reduction's or a sort's computation is part of that op's work.
  if (module.entry() == nullptr) return;
  std::vector<const ir::Computation*> work{module.entry()};
  absl::flat_hash_set<const ir::Computation*> seen{module.entry()};
  while (!work.empty()) {
    const ir::Computation* computation = work.back();
    work.pop_back();
    Plan(*computation);
    for (const auto& instr : computation->instructions()) {
      const Opcode op = instr->opcode();
      if (op != Opcode::kWhile && op != Opcode::kCall && op != Opcode::kConditional) continue;
      for (const ir::Computation* callee : instr->called()) {
        if (seen.insert(callee).second) work.push_back(callee);
      }
    }
  }
}

const FusedRegion* FusionPlan::RegionRootedAt(const Instruction* instr) const {
  auto it = root_of_.find(instr);
  return it == root_of_.end() ? nullptr : it->second;
}

void FusionPlan::Plan(const ir::Computation& computation) {
  const auto& instrs = computation.instructions();
  absl::flat_hash_map<const Instruction*, int> position;
  absl::flat_hash_map<const Instruction*, std::vector<const Instruction*>> users;
  for (int i = 0; i < static_cast<int>(instrs.size()); ++i) {
    const Instruction* instr = instrs[i].get();
    position[instr] = i;
    absl::flat_hash_set<const Instruction*> seen;
    for (const Instruction* op : instr->operands()) {
      if (seen.insert(op).second) users[op].push_back(instr);
    }
  }
  // Instructions some region computes for itself alone.
  absl::flat_hash_set<const Instruction*> claimed;
  std::vector<FusedRegion*> reductions;
  // The region that computes each instruction once.
  absl::flat_hash_map<const Instruction*, const FusedRegion*> region_of;
  // Duplicable instructions and the regions that recompute them.
  absl::flat_hash_map<const Instruction*, absl::flat_hash_set<const FusedRegion*>> copies;

  // Users before operands: a region grows from its root towards its inputs.
  for (auto it = instrs.rbegin(); it != instrs.rend(); ++it) {
    const Instruction* root = it->get();
    const Opcode op = root->opcode();
    if (claimed.contains(root) || op == Opcode::kParameter) continue;
    if (IsDuplicable(op)) {
      // Every reader recomputes it: nothing of its own to price.
      auto copy = copies.find(root);
      const std::vector<const Instruction*>& readers = users[root];
      const bool all_recompute =
          !readers.empty() && root != computation.root() && copy != copies.end() &&
          std::all_of(readers.begin(), readers.end(), [&](const Instruction* u) {
            auto r = region_of.find(u);
            return r != region_of.end() && copy->second.contains(r->second);
          });
      if (all_recompute || op == Opcode::kConstant) continue;
    } else if (IsFreeOp(op)) {
      continue;
    }
    auto region = std::make_unique<FusedRegion>();
    absl::flat_hash_set<const Instruction*> inside{root};
    // Members on the operand side of the region's dot or convolution.
    absl::flat_hash_set<const Instruction*> matrix_side;
    bool heavy = IsHeavy(op);
    const bool fuses = IsLoopOp(op) || heavy;
    std::vector<const Instruction*> members{root};
    // Members recomputed here whose value other regions read too.
    absl::flat_hash_set<const Instruction*> recomputed;
    if (IsMatrixOp(op)) matrix_side.insert(root);
    // Candidates are retried until none joins: a producer may become
    // joinable once another of its users has joined.
    for (bool grew = fuses; grew;) {
      grew = false;
      for (size_t m = 0; m < members.size(); ++m) {
        const Instruction* member = members[m];
        if (recomputed.contains(member)) continue;
        const bool into_matrix = matrix_side.contains(member);
        for (const Instruction* p : member->operands()) {
          const Opcode pop = p->opcode();
          if (inside.contains(p) || claimed.contains(p) || pop == Opcode::kParameter) continue;
          const bool loop = IsLoopOp(pop);
          if (into_matrix ? !IsLayoutOp(pop) : !(loop || (IsMatrixOp(pop) && !heavy))) continue;
          const std::vector<const Instruction*>& readers = users[p];
          const bool all_inside =
              p != computation.root() &&
              std::all_of(readers.begin(), readers.end(), [&](const Instruction* u) {
                // A recomputed member's other copies read p too.
                return inside.contains(u) && !recomputed.contains(u);
              });
          if (!all_inside && !IsDuplicable(pop)) continue;
          inside.insert(p);
          members.push_back(p);
          if (into_matrix || IsMatrixOp(pop)) matrix_side.insert(p);
          if (IsMatrixOp(pop)) heavy = true;
          if (all_inside) {
            claimed.insert(p);
          } else {
            recomputed.insert(p);
            region->duplicated.push_back(p);
          }
          grew = true;
        }
      }
    }
    std::sort(members.begin(), members.end(), [&](const Instruction* a, const Instruction* b) {
      return position[a] < position[b];
    });
    region->members = std::move(members);
    for (const Instruction* d : region->duplicated) copies[d].insert(region.get());
    for (const Instruction* m : region->members) {
      if (!recomputed.contains(m)) region_of[m] = region.get();
    }
    root_of_[root] = region.get();
    if (op == Opcode::kReduce) reductions.push_back(region.get());
    regions_.push_back(std::move(region));
  }
  ShareSiblingReads(reductions);
}

void FusionPlan::ShareSiblingReads(const std::vector<FusedRegion*>& reductions) {
  // The inputs each reduction reads from outside itself.
  absl::flat_hash_map<const Instruction*, std::vector<FusedRegion*>> readers;
  absl::flat_hash_map<const FusedRegion*, std::vector<const Instruction*>> inputs_of;
  std::vector<const Instruction*> inputs;
  for (FusedRegion* r : reductions) {
    const absl::flat_hash_set<const Instruction*> inside(r->members.begin(), r->members.end());
    absl::flat_hash_set<const Instruction*> seen;
    for (const Instruction* m : r->members) {
      for (const Instruction* o : m->operands()) {
        if (inside.contains(o) || !o->shape().IsArray() || !seen.insert(o).second) continue;
        if (readers[o].empty()) inputs.push_back(o);
        readers[o].push_back(r);
        inputs_of[r].push_back(o);
      }
    }
  }
  // Whether `to` reads `from`'s value, directly or through others. Each
  // question walks the graph; a budget of walks bounds the planning work
  // (past it, nothing more is fused).
  int budget = kMaxDependencyWalks;
  auto depends = [&budget](const Instruction* to, const Instruction* from) {
    --budget;
    std::vector<const Instruction*> work{to};
    absl::flat_hash_set<const Instruction*> seen{to};
    while (!work.empty()) {
      const Instruction* i = work.back();
      work.pop_back();
      if (i == from) return true;
      for (const Instruction* o : i->operands()) {
        if (seen.insert(o).second) work.push_back(o);
      }
    }
    return false;
  };
  // A reduction joins at most one fused pass, so that passes decided one
  // input at a time cannot chain into one that waits for itself.
  absl::flat_hash_set<const FusedRegion*> fused;
  // A reduction of an elementwise region's result runs in that region's
  // pass (multi-output fusion of producer and consumer) unless it also
  // reads something computed from that result elsewhere.
  for (const Instruction* input : inputs) {
    if (!root_of_.contains(input) || !IsLoopOp(input->opcode())) continue;
    for (FusedRegion* r : readers[input]) {
      if (budget <= 0 || fused.contains(r)) continue;
      const std::vector<const Instruction*>& others = inputs_of[r];
      const bool cycle = std::any_of(others.begin(), others.end(), [&](const Instruction* y) {
        return y != input && depends(y, input);
      });
      if (cycle) continue;
      r->shared_reads.push_back(input);
      fused.insert(r);
    }
  }
  // Reductions that read the same input and do not depend on each other
  // read it in one pass: the first pays for the read.
  for (const Instruction* input : inputs) {
    std::vector<FusedRegion*> group;
    for (FusedRegion* r : readers[input]) {
      if (budget <= 0 || fused.contains(r)) continue;
      const Instruction* root = r->members.back();
      const bool independent =
          std::none_of(group.begin(), group.end(), [&](const FusedRegion* other) {
            const Instruction* o = other->members.back();
            return depends(root, o) || depends(o, root);
          });
      if (independent) group.push_back(r);
    }
    if (group.size() < 2) continue;
    for (FusedRegion* r : group) fused.insert(r);
    for (size_t i = 1; i < group.size(); ++i) group[i]->shared_reads.push_back(input);
  }
}

}  // namespace kiln::tpusim
