#include "runtime/arena_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace kiln::runtime {

ArenaPlan PlanArena(const std::vector<ArenaBlock>& blocks, int64_t alignment) {
  const auto round_up = [alignment](int64_t n) { return (n + alignment - 1) & ~(alignment - 1); };
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].first != blocks[b].first) return blocks[a].first < blocks[b].first;
    return blocks[a].bytes > blocks[b].bytes;
  });
  ArenaPlan plan;
  plan.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of live neighbours
  for (size_t i : order) {
    const ArenaBlock& block = blocks[i];
    taken.clear();
    for (size_t j : placed) {
      const ArenaBlock& other = blocks[j];
      if (other.first <= block.last && block.first <= other.last && other.bytes > 0) {
        taken.emplace_back(plan.offsets[j], plan.offsets[j] + other.bytes);
      }
    }
    std::sort(taken.begin(), taken.end());
    // The first gap, from the bottom, that holds the block.
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (block.bytes > 0 && offset + block.bytes <= begin) break;
      offset = std::max(offset, round_up(end));
    }
    plan.offsets[i] = offset;
    plan.total_bytes = std::max(plan.total_bytes, offset + block.bytes);
    placed.push_back(i);
  }
  plan.total_bytes = round_up(plan.total_bytes);
  return plan;
}

}  // namespace kiln::runtime
