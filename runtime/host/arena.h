// A program's arena: the arrays its steps write fresh, which the buffer
// assignment chooses (compiler/passes/buffer_assignment.h) and
// runtime/arena_plan.h places, in one block that the program keeps from
// run to run. A step's kernel is offered
// its planned arrays (ExecState::Allocate takes them by shape), so a
// training step allocates nothing, looks nothing up and charges the
// device's memory once per run instead of once per array.
//
// The plan is checked as it runs, not trusted: an array is offered only
// when nothing outside the arena holds it, and a planned array found still
// held after its planned life (a kernel kept it longer than the analysis
// knew, or a result of an earlier run holds it) keeps every array over its
// bytes from being offered until it is released. Offering less is only
// slower: the kernel then allocates as it would without an arena.
#ifndef KILN_RUNTIME_HOST_ARENA_H_
#define KILN_RUNTIME_HOST_ARENA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "compiler/ir/instruction.h"
#include "compiler/passes/buffer_assignment.h"
#include "runtime/host/host_buffer.h"
#include "runtime/memory.h"

namespace kiln::host {

// The arrays on offer to the kernel running on this thread, each taken at
// most once (ExecState::Allocate).
class Offer {
 public:
  static constexpr int kMaxArrays = 32;
  // The next array of `shape` not yet taken, planned for result `result`
  // of the step's tuple (or for its one array; any result when `result` is
  // -1); null when none, and for scratch (a result below -1).
  HostBufferPtr Take(const ir::Shape& shape, int result) {
    if (result < -1) return nullptr;
    for (int i = 0; i < count_; ++i) {
      if ((taken_ & (1u << i)) == 0 && (result < 0 || results_[i] < 0 || results_[i] == result) &&
          (*arrays_[i])->shape() == shape) {
        taken_ |= 1u << i;
        return *arrays_[i];
      }
    }
    return nullptr;
  }
  void Add(const HostBufferPtr* array, int result) {
    results_[count_] = result;
    arrays_[count_++] = array;
  }
  bool empty() const { return count_ == 0; }
  void Clear() {
    count_ = 0;
    taken_ = 0;
  }
  int taken_count() const { return __builtin_popcount(taken_); }

 private:
  const HostBufferPtr* arrays_[kMaxArrays] = {};
  int results_[kMaxArrays] = {};
  int count_ = 0;
  uint32_t taken_ = 0;
};

// The offer of the step running on this thread (null: none); a nested
// program's steps make their own and restore the caller's.
inline thread_local Offer* t_offer = nullptr;

class OfferScope {
 public:
  explicit OfferScope(Offer* offer) : saved_(t_offer) { t_offer = offer; }
  ~OfferScope() { t_offer = saved_; }
  OfferScope(const OfferScope&) = delete;
  OfferScope& operator=(const OfferScope&) = delete;

 private:
  Offer* saved_;
};

// What a program knows of its arena at compile time. Immutable.
class ArenaPlan {
 public:
  ArenaPlan() = default;
  // `assignment` is of `c`; `step_of` gives each instruction's step (-1:
  // none, a parameter); `steps` is how many.
  ArenaPlan(const ir::Computation& c, const passes::BufferAssignment& assignment,
            const std::vector<int>& step_of, int steps);

  bool empty() const { return slices_.empty(); }
  int64_t bytes() const { return bytes_; }
  int slice_count() const { return static_cast<int>(slices_.size()); }

 private:
  friend class ArenaRun;
  friend class Arena;
  struct Slice {
    ir::Shape shape;
    int result = -1;  // the element of the step's tuple; -1: its array
    int64_t offset = 0;
    int64_t end = 0;  // offset + bytes
  };
  std::vector<Slice> slices_;
  // Step s offers slices [first_[s], first_[s + 1]) (at most
  // Offer::kMaxArrays).
  std::vector<int> first_;
  // The slices whose planned life ends before step s runs (s == steps: at
  // the end of the run).
  std::vector<std::vector<int>> expire_;
  int64_t bytes_ = 0;
  // Host buffers' alignment (host_buffer.h).
  static constexpr int64_t kAlignment = 64;
};

// One block laid out by a plan, and its arrays. Used by one run at a time.
class Arena {
 public:
  static absl::StatusOr<std::unique_ptr<Arena>> Make(const ArenaPlan& plan);

 private:
  friend class ArenaRun;
  Arena() = default;
  HostBufferPtr block_;
  std::vector<HostBufferPtr> arrays_;  // per slice
  // Slices found held past their planned life, in this run or an earlier
  // (each once: held_flags_ marks them).
  std::vector<int> held_;
  std::vector<bool> held_flags_;
};

// A program's idle arenas.
class ArenaPool {
 public:
  std::unique_ptr<Arena> Take();
  void Give(std::unique_ptr<Arena> arena);

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Arena>> idle_ ABSL_GUARDED_BY(mu_);
};

// A run's use of an arena: takes one from the pool (or makes one), charges
// its bytes to `memory` for the run, offers each step its arrays, and gives
// it back. Inactive (offers nothing) when the plan is empty or the memory
// cannot be charged: the run then allocates as without an arena.
class ArenaRun {
 public:
  ArenaRun(const ArenaPlan& plan, ArenaPool& pool, runtime::MemoryTracker* memory);
  ~ArenaRun();
  ArenaRun(const ArenaRun&) = delete;
  ArenaRun& operator=(const ArenaRun&) = delete;

  // Before step `s` runs (after the values it reads for the last time are
  // dropped): checks the slices whose life has ended, and returns the
  // step's offer (null when it has none).
  Offer* Begin(int s);
  // After the last step, when the run succeeded: `result` is the run's.
  // An array of the arena in it (a step took a slice planned for another
  // of its results) is replaced by a copy, so that nothing of the arena
  // outlives the run.
  absl::StatusOr<HostBufferPtr> Finish(HostBufferPtr result);
  // How many arrays this run's kernels took from the arena.
  int taken() const { return taken_; }

 private:
  bool Free(int slice) const;
  void Expire(int s);
  void Hold(int slice);
  absl::StatusOr<HostBufferPtr> CopiedOut(HostBufferPtr value);

  const ArenaPlan& plan_;
  ArenaPool& pool_;
  runtime::MemoryTracker* memory_ = nullptr;
  std::unique_ptr<Arena> arena_;
  bool charged_ = false;
  bool finished_ = false;
  Offer offer_;
  int taken_ = 0;
};

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_ARENA_H_
