#include "runtime/arena_plan.h"

#include <random>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// No two blocks that are live at once share a byte, every offset is
// aligned and every block lies inside the arena.
void ExpectValid(const std::vector<ArenaBlock>& blocks, const ArenaPlan& plan, int64_t align) {
  ASSERT_EQ(plan.offsets.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % align, 0) << "block " << i;
    EXPECT_LE(plan.offsets[i] + blocks[i].bytes, plan.total_bytes) << "block " << i;
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      const bool live_together =
          blocks[i].first <= blocks[j].last && blocks[j].first <= blocks[i].last;
      const bool share_bytes = plan.offsets[i] < plan.offsets[j] + blocks[j].bytes &&
                               plan.offsets[j] < plan.offsets[i] + blocks[i].bytes;
      EXPECT_FALSE(live_together && share_bytes) << "blocks " << i << " and " << j;
    }
  }
}

TEST(ArenaPlanTest, ReusesTheBytesOfBuffersThatAreDead) {
  // a chain: each step reads the previous output only.
  const std::vector<ArenaBlock> blocks = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  const ArenaPlan plan = PlanArena(blocks, 256);
  ExpectValid(blocks, plan, 256);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3]);
  EXPECT_EQ(plan.total_bytes, 2048);  // two blocks of 1000 rounded to 1024
}

TEST(ArenaPlanTest, AnOutputNeverSharesBytesWithTheInputsOfItsStep) {
  // b is written at step 3, where a is read for the last time.
  const std::vector<ArenaBlock> blocks = {{512, 0, 3}, {512, 3, 5}};
  const ArenaPlan plan = PlanArena(blocks, 256);
  ExpectValid(blocks, plan, 256);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
}

TEST(ArenaPlanTest, FillsGapsLeftByEarlierBuffers) {
  // x and z live throughout; y dies early, and w fits where y was.
  const std::vector<ArenaBlock> blocks = {
      {256, 0, 9}, {256, 1, 2}, {256, 1, 9}, {256, 5, 9}};
  const ArenaPlan plan = PlanArena(blocks, 256);
  ExpectValid(blocks, plan, 256);
  EXPECT_EQ(plan.offsets[3], plan.offsets[1]);
  EXPECT_EQ(plan.total_bytes, 768);
}

TEST(ArenaPlanTest, EmptyBlocksAndNoBlocks) {
  EXPECT_EQ(PlanArena({}, 256).total_bytes, 0);
  const std::vector<ArenaBlock> blocks = {{0, 0, 5}, {100, 0, 5}, {0, 1, 1}};
  const ArenaPlan plan = PlanArena(blocks, 64);
  ExpectValid(blocks, plan, 64);
  EXPECT_EQ(plan.total_bytes, 128);
}

TEST(ArenaPlanTest, RandomProgramsNeverOverlapLiveBuffers) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<ArenaBlock> blocks;
    const int steps = 1 + static_cast<int>(rng() % 40);
    int64_t live_sum_bound = 0;
    for (int s = 0; s < steps; ++s) {
      const int first = s;
      const int last = s + static_cast<int>(rng() % 8);
      blocks.push_back({static_cast<int64_t>(rng() % 5000), first, last});
      live_sum_bound += blocks.back().bytes + 256;
    }
    const ArenaPlan plan = PlanArena(blocks, 256);
    ExpectValid(blocks, plan, 256);
    EXPECT_LE(plan.total_bytes, live_sum_bound);
  }
}

}  // namespace
}  // namespace kiln::runtime
