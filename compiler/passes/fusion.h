// Loop fusion: elementwise instructions that can run as one pass over
// memory become a call of a computation that holds them.
#ifndef KILN_COMPILER_PASSES_FUSION_H_
#define KILN_COMPILER_PASSES_FUSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "compiler/passes/pass.h"
#include "compiler/passes/rewriter.h"

namespace kiln::passes {

// Groups an elementwise instruction with the elementwise producers that
// only it reads and that have its dimensions, and with the broadcasts it
// can expand as it goes (of a scalar, or of an operand whose dimensions
// are a contiguous run of the output's, as a bias's are). Each group of
// two or more becomes a call of a new computation `fused_computation.N`
// whose instructions form a loop fusion (IsLoopFusion). A broadcast read
// only by fused instructions is copied into every group that reads it
// rather than written out. Fuses in the entry, loop bodies and conditions,
// conditional branches and called computations; never in a computation
// that another op applies per element or per window (reduce, sort, map,
// scatter, all-reduce: their callers run them on scalars). Results are
// unchanged, bit for bit.
//
// A group whose output is also read elsewhere joins the group of an
// elementwise user of the same dimensions when nothing outside the two is
// computed from one and read by the other; the joined loop then writes
// several results (a tuple root, read through get-tuple-element): SGD's
// velocity and weights, or a pre-activation and its relu, in one pass.
struct LoopFusionOptions {
  bool multi_output = true;
};

class LoopFusion : public Pass {
 public:
  explicit LoopFusion(LoopFusionOptions options = {}) : options_(options) {}
  absl::string_view name() const override { return "loop-fusion"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;

 private:
  LoopFusionOptions options_;
};

// Whether `instr` is a broadcast that a fused loop expands as it goes.
bool IsExpandableBroadcast(const ir::Instruction& instr);

// Whether `c` can run as one elementwise loop: its root is an array, or a
// tuple of distinct instructions of the loop (its outputs); every other
// instruction other than a parameter has the outputs' dimensions and is
// either elementwise over operands of those dimensions (or over parameters
// of one element) or an expandable broadcast of a parameter. What LoopFusion outlines has this form; a backend checks it
// again before running a call as one loop, since modules come from clients.
bool IsLoopFusion(const ir::Computation& c);

// Whether the instructions of `c` other than its parameters and `skip` form
// a loop of dimensions `dims`: each is elementwise over operands of those
// dimensions (or over parameters of one element) or an expandable
// broadcast of a parameter, and every parameter is an array.
bool IsLoopBody(const ir::Computation& c, const std::vector<int64_t>& dims,
                const absl::flat_hash_set<const ir::Instruction*>& skip);

// The distinct readers of each instruction of a computation, in order.
using Users = absl::flat_hash_map<const ir::Instruction*, std::vector<ir::Instruction*>>;
Users UsersOf(const ir::Computation& comp);

// Every reader of `old` reads `replacement` instead (the root too);
// `readers` follows: `old` has none left, `replacement` gains them.
void Redirect(ir::Computation* comp, Users& readers, ir::Instruction* old,
              ir::Instruction* replacement);

// Adds `callee` (an outlined computation) to `module` and a call of it on
// `inputs` to `rewriter`'s computation, at `source_line`; `readers`, when
// given, gains the call as a reader of each input. The call has the
// callee's root shape.
absl::StatusOr<ir::Instruction*> AddFusedCall(ir::Module* module,
                                              std::unique_ptr<ir::Computation> callee,
                                              const std::vector<ir::Instruction*>& inputs,
                                              int source_line, Rewriter& rewriter,
                                              Users* readers = nullptr);

// A new instruction of `op` and `shape`, named `name`, reading `operands`.
std::unique_ptr<ir::Instruction> NewInstruction(ir::Opcode op, const ir::Shape& shape,
                                                const std::string& name,
                                                const std::vector<ir::Instruction*>& operands = {});

// Adds to `c` one parameter of each shape of `passed`, numbered in order
// and named "param_N"; returns them.
std::vector<ir::Instruction*> AddParameters(ir::Computation* c,
                                            const std::vector<const ir::Instruction*>& passed);

// What a pass outlines in place of an add: the computation, and the values
// its call passes; `replaced`, when not null, is the instruction the call
// stands for instead of the add (an activation the callee applies to the
// add's result, its one reader).
struct OutlinedAdd {
  std::unique_ptr<ir::Computation> callee;
  std::vector<ir::Instruction*> inputs;
  ir::Instruction* replaced = nullptr;
};

// Replaces each add of `comp` for which `outline(add, readers, name)` gives
// a computation (to be named `name`, free among `names`, from `base`) by a
// call of it where the add (or what the outline names as `replaced`) was;
// what it read stays behind for DCE when nothing else reads it, and
// `readers` follows. Whether any changed.
absl::StatusOr<bool> OutlineAdds(
    ir::Module* module, ir::Computation* comp, absl::flat_hash_set<std::string>& names,
    absl::string_view base,
    absl::FunctionRef<std::optional<OutlinedAdd>(ir::Instruction* add, Users& readers,
                                                 const std::string& name)>
        outline);

// Gives the instructions of `c` distinct names, adding ".1", ".2"... to a
// name met before (an outlined computation's parameters may meet the
// names of the instructions copied into it).
void MakeInstructionNamesUnique(ir::Computation* c);

// `base`, or "base.N" for the first N from 1 that is not in `names`.
std::string FreeComputationName(absl::string_view base,
                                const absl::flat_hash_set<std::string>& names);

// Runs `fuse` on each computation FusibleComputations gives now (not on
// the ones fusing adds), with the names of the module's computations to
// keep new names apart; then DCE when any changed. Whether any changed.
absl::StatusOr<bool> FuseEachComputation(
    ir::Module* module,
    absl::FunctionRef<absl::StatusOr<bool>(ir::Computation*, absl::flat_hash_set<std::string>&)>
        fuse);

// Whether `c` has the form of a fused call's callee, one a backend runs as
// one loop or library call: IsLoopFusion, IsReductionFusion, IsDotFusion,
// IsDotBiasFusion or IsConvolutionFusion.
bool IsFusedCallee(const ir::Computation& c);

// The computations of `module` that fusion passes rewrite: reachable from
// the entry only through sequential callers (loops, conditions, branches,
// calls), and not already one fused call's callee (IsFusedCallee).
absl::flat_hash_set<const ir::Computation*> FusibleComputations(const ir::Module& module);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_FUSION_H_
