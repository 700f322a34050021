// Static memory planning: places buffers whose lifetimes are known in
// advance (the intermediates of a straight-line program) in one block of
// memory, sharing bytes between buffers that are never live together.
#ifndef KILN_RUNTIME_ARENA_PLAN_H_
#define KILN_RUNTIME_ARENA_PLAN_H_

#include <cstdint>
#include <vector>

namespace kiln::runtime {

// A buffer of `bytes` written at step `first` and last read at step `last`
// (first <= last): it is live over the closed range [first, last], so a
// step's output never shares bytes with that step's inputs.
struct ArenaBlock {
  int64_t bytes = 0;
  int first = 0;
  int last = 0;
};

struct ArenaPlan {
  std::vector<int64_t> offsets;  // one per block, multiples of the alignment
  int64_t total_bytes = 0;       // the arena's size
};

// Places every block at the lowest aligned offset where it overlaps no
// block live at the same time, in order of first use (largest first among
// equals). `alignment` is a power of two.
ArenaPlan PlanArena(const std::vector<ArenaBlock>& blocks, int64_t alignment);

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_ARENA_PLAN_H_
