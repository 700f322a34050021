// Which instructions do more than compute their result: what DCE must keep
// and CSE must not merge.
#ifndef KILN_COMPILER_PASSES_SIDE_EFFECTS_H_
#define KILN_COMPILER_PASSES_SIDE_EFFECTS_H_

#include "absl/container/flat_hash_map.h"
#include "compiler/ir/instruction.h"

namespace kiln::passes {

// Whether `instr` is effectful by its op alone: rng (each draw advances the
// generator the later draws read), infeed and outfeed, after-all and
// anything else whose result holds a token, all-reduce (a rendezvous with
// the other replicas) and custom-call (unknown code).
bool IsEffectfulOp(const ir::Instruction& instr);

// The effects of a module's instructions, callees included. Not
// thread-safe; the module is borrowed and must outlive the analysis, which
// describes the module as it was when constructed (rewrites that only
// replace pure instructions keep it true).
class SideEffects {
 public:
  explicit SideEffects(const ir::Module& module);

  // Whether running `instr` has an effect: an effectful op, or a call,
  // while, conditional, reduce... whose called computations hold one.
  bool HasSideEffect(const ir::Instruction& instr) const;
  // Whether `computation` holds an instruction with a side effect.
  bool HasSideEffect(const ir::Computation& computation) const;

  // Whether `instr` or anything it reads, transitively, has a side effect:
  // such a value cannot be dropped without dropping the effect too.
  // Remembers answers across calls.
  bool DependsOnSideEffect(const ir::Instruction& instr);

 private:
  absl::flat_hash_map<const ir::Computation*, bool> effectful_;
  absl::flat_hash_map<const ir::Instruction*, bool> depends_;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_SIDE_EFFECTS_H_
