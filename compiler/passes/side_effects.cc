#include "compiler/passes/side_effects.h"

#include <utility>
#include <vector>

namespace kiln::passes {
namespace {

bool HoldsToken(const ir::Shape& shape) {
  if (shape.IsToken()) return true;
  for (const ir::Shape& element : shape.tuple_shapes()) {
    if (HoldsToken(element)) return true;
  }
  return false;
}

}  // namespace

bool IsEffectfulOp(const ir::Instruction& instr) {
  switch (instr.opcode()) {
    case ir::Opcode::kRng:
    case ir::Opcode::kInfeed:
    case ir::Opcode::kOutfeed:
    case ir::Opcode::kAfterAll:
    case ir::Opcode::kCustomCall:
      return true;
    default:
      return ir::IsCollective(instr.opcode()) || HoldsToken(instr.shape());
  }
}

SideEffects::SideEffects(const ir::Module& module) {
  // Callees before callers, without recursion: a computation is decided
  // once every computation it calls is. A computation met again while still
  // open (a call cycle, which verified modules do not have) counts as
  // effectful.
  enum class State { kOpen, kDone };
  absl::flat_hash_map<const ir::Computation*, State> state;
  for (const auto& start : module.computations()) {
    if (state.contains(start.get())) continue;
    std::vector<std::pair<const ir::Computation*, bool>> stack{
        {start.get(), false}};
    while (!stack.empty()) {
      auto [comp, expanded] = stack.back();
      stack.pop_back();
      if (!expanded) {
        if (state.contains(comp)) continue;
        state[comp] = State::kOpen;
        stack.push_back({comp, true});
        for (const auto& instr : comp->instructions()) {
          for (const ir::Computation* callee : instr->called()) {
            if (!state.contains(callee)) stack.push_back({callee, false});
          }
        }
        continue;
      }
      bool effectful = false;
      for (const auto& instr : comp->instructions()) {
        if (IsEffectfulOp(*instr)) effectful = true;
        for (const ir::Computation* callee : instr->called()) {
          auto it = effectful_.find(callee);
          if (it == effectful_.end() || it->second) effectful = true;
        }
      }
      effectful_[comp] = effectful;
      state[comp] = State::kDone;
    }
  }
}

bool SideEffects::HasSideEffect(const ir::Computation& computation) const {
  auto it = effectful_.find(&computation);
  return it == effectful_.end() || it->second;
}

bool SideEffects::HasSideEffect(const ir::Instruction& instr) const {
  if (IsEffectfulOp(instr)) return true;
  for (const ir::Computation* callee : instr.called()) {
    if (HasSideEffect(*callee)) return true;
  }
  return false;
}

bool SideEffects::DependsOnSideEffect(const ir::Instruction& instr) {
  // Post-order over operands with an explicit stack: graphs can be deeper
  // than the call stack.
  std::vector<std::pair<const ir::Instruction*, bool>> stack{{&instr, false}};
  while (!stack.empty()) {
    auto [node, expanded] = stack.back();
    stack.pop_back();
    if (depends_.contains(node)) continue;
    if (!expanded) {
      stack.push_back({node, true});
      for (const ir::Instruction* op : node->operands()) {
        if (!depends_.contains(op)) stack.push_back({op, false});
      }
      continue;
    }
    bool depends = HasSideEffect(*node);
    for (const ir::Instruction* op : node->operands()) {
      auto it = depends_.find(op);
      depends = depends || it == depends_.end() || it->second;
    }
    depends_[node] = depends;
  }
  return depends_.at(&instr);
}

}  // namespace kiln::passes
