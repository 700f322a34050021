// A compiled computation for the CPU: a list of steps over numbered value
// slots, each step a kernel prepared at compile time.
#ifndef KILN_RUNTIME_HOST_PROGRAM_H_
#define KILN_RUNTIME_HOST_PROGRAM_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/instruction.h"
#include "runtime/host/kernel.h"

namespace kiln::host {

// What another backend adds to these programs (tpusim runs them too).
struct ProgramOptions {
  // Replaces the kernel of an instruction that is not an elementwise loop
  // (e.g. to round a dot's inputs); null: the kernels as they are.
  std::function<absl::StatusOr<Kernel>(const ir::Instruction&, Kernel)> wrap_kernel;
  // The simulated cost of a step that computes `members` (the step's one
  // instruction); null: no costs.
  std::function<runtime::CostCounters(const std::vector<const ir::Instruction*>& members)>
      step_cost;
  // Whether steps write into the program's arena (arena.h). A simulated
  // device that charges each array its padded footprint turns it off.
  bool arena = true;
};

// Immutable after Build; Run may be called from many threads at once.
class Program {
 public:
  // Builds the steps of `computation`, one per instruction; called
  // computations come from `programs`. A call of a loop fusion
  // (compiler/passes/fusion.h) runs as one elementwise loop. Errors name
  // the instruction the CPU cannot run.
  static absl::StatusOr<std::shared_ptr<const Program>> Build(
      const ir::Computation& computation, ProgramSource& programs,
      const ProgramOptions& options = {});

  // Runs with one buffer per parameter (shapes already checked).
  absl::StatusOr<BufferPtr> Run(ExecState& state,
                                const std::vector<BufferPtr>& args) const;
  // The same, taking the arguments over (they are left null): an argument
  // nobody else holds may then take a result in place once it is read for
  // the last time.
  absl::StatusOr<BufferPtr> Run(ExecState& state, absl::Span<BufferPtr> args) const;
  absl::StatusOr<BufferPtr> Run(ExecState& state, std::vector<BufferPtr>&& args) const {
    return Run(state, absl::MakeSpan(args));
  }

  int step_count() const { return static_cast<int>(steps_.size()); }
  // The arena its steps' arrays are planned in (arena.h): its bytes (0:
  // none), how many arrays, and how many runs' kernels have taken so far.
  int64_t arena_bytes() const { return arena_plan_.bytes(); }
  int arena_arrays() const { return arena_plan_.slice_count(); }
  int64_t arena_arrays_taken() const { return arena_taken_.load(std::memory_order_relaxed); }
  // How many instructions beyond one per step the loop fusions compute.
  int fused_instruction_count() const { return fused_instructions_; }

 private:
  struct Step {
    std::string name;  // instruction name, for errors
    std::string what;  // opcode and shape, for profiles (KILN_HOST_PROFILE)
    Kernel kernel;
    std::vector<int> inputs;
    int output;
    std::vector<int> release;  // slots whose last reader is this step
    runtime::CostCounters cost;  // added to ExecState::cost when it runs
  };
  // A short program's slots live on the stack.
  using Slots = absl::InlinedVector<BufferPtr, 8>;
  absl::StatusOr<BufferPtr> RunSlots(ExecState& state, Slots& slots) const;

  std::vector<Step> steps_;
  int num_slots_ = 0;
  std::vector<int> param_slots_;
  int root_slot_ = 0;
  size_t max_inputs_ = 0;  // the most inputs of one step
  int fused_instructions_ = 0;
  std::string name_;
  ArenaPlan arena_plan_;
  mutable ArenaPool arena_pool_;
  mutable std::atomic<int64_t> arena_taken_{0};
};

// Compiles each computation once and hands them out by pointer.
class ProgramCache : public ProgramSource {
 public:
  explicit ProgramCache(ProgramOptions options = {}) : options_(std::move(options)) {}
  absl::StatusOr<std::shared_ptr<const Program>> Get(
      const ir::Computation* computation) override;

 private:
  absl::flat_hash_map<const ir::Computation*, std::shared_ptr<const Program>>
      programs_;
  ProgramOptions options_;
};

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_PROGRAM_H_
