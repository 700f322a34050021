#include "runtime/memory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/buffer.h"

namespace kiln::runtime {
namespace {

// A buffer that only carries a shape, to be charged.
class ShapeOnly : public Buffer {
 public:
  explicit ShapeOnly(ir::Shape shape) : Buffer(shape, shape.ByteSize(), shape.ByteSize()) {}
  int tuple_size() const override { return 0; }
  BufferPtr tuple_element(int) const override { return nullptr; }
};

TEST(MemoryTrackerTest, CountsUsePeakAndLiveBuffers) {
  MemoryTracker memory(1000);
  ShapeOnly a(ir::Shape(ir::ElementType::kF32, {100}));
  ShapeOnly b(ir::Shape(ir::ElementType::kF32, {50}));
  ShapeOnly c(ir::Shape(ir::ElementType::kF32, {10}));
  ASSERT_TRUE(memory.Reserve(&a, 400).ok());
  ASSERT_TRUE(memory.Reserve(&b, 200).ok());
  memory.Release(&a, 400);
  ASSERT_TRUE(memory.Reserve(&c, 40).ok());
  MemoryStats stats = memory.Stats();
  EXPECT_EQ(stats.capacity_bytes, 1000);
  EXPECT_EQ(stats.bytes_in_use, 240);
  EXPECT_EQ(stats.peak_bytes_in_use, 600);  // a and b together, before a went
  EXPECT_EQ(stats.live_buffers, 2);
  memory.Release(&b, 200);
  memory.Release(&c, 40);
  EXPECT_EQ(memory.Stats().bytes_in_use, 0);
  EXPECT_EQ(memory.Stats().peak_bytes_in_use, 600);
}

TEST(MemoryTrackerTest, RefusalNamesTheLargestBuffers) {
  MemoryTracker memory(1000);
  ShapeOnly big(ir::Shape(ir::ElementType::kF32, {200}));
  ShapeOnly more(ir::Shape(ir::ElementType::kF32, {60}));
  ASSERT_TRUE(memory.Reserve(&big, 800).ok());
  absl::Status refused = memory.Reserve(&more, 240);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("largest: f32[200] (800 bytes)"));
  EXPECT_EQ(memory.Stats().bytes_in_use, 800);
  memory.Release(&big, 800);
}

TEST(MemoryAccountTest, AChargeIsMadeToTheParentToo) {
  auto all = std::make_shared<MemoryAccount>("all", 1000, "--all");
  MemoryAccount one("one", 800, "--one", all);
  MemoryAccount two("two", 800, "--two", all);
  ASSERT_TRUE(one.Charge(600, "x").ok());
  EXPECT_EQ(all->bytes_in_use(), 600);
  // Within its own limit but not within the parent's: neither is charged.
  absl::Status refused = two.Charge(500, "y");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("--all"));
  EXPECT_EQ(two.bytes_in_use(), 0);
  EXPECT_EQ(all->bytes_in_use(), 600);
  // Its own limit comes first.
  EXPECT_THAT(one.Charge(300, "z").message(), ::testing::HasSubstr("--one"));
  one.Uncharge(600);
  EXPECT_EQ(all->bytes_in_use(), 0);
}

TEST(MemoryChargeTest, HoldsWhatItGrewByUntilResetMovedOrDestroyed) {
  auto account = std::make_shared<MemoryAccount>("a", 100, "--a");
  {
    MemoryCharge charge(account);
    ASSERT_TRUE(charge.Grow(40, "x").ok());
    ASSERT_TRUE(charge.Grow(50, "x").ok());
    absl::Status over = charge.Grow(20, "the value");
    EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(over.message(), ::testing::HasSubstr("the value"));
    EXPECT_EQ(charge.bytes(), 90);
    EXPECT_EQ(account->bytes_in_use(), 90);
    MemoryCharge moved = std::move(charge);
    EXPECT_EQ(charge.bytes(), 0);  // NOLINT: a moved-from charge holds nothing
    EXPECT_EQ(account->bytes_in_use(), 90);
    moved.Reset();
    EXPECT_EQ(account->bytes_in_use(), 0);
    ASSERT_TRUE(moved.Grow(10, "x").ok());
  }
  EXPECT_EQ(account->bytes_in_use(), 0);
  MemoryCharge none;  // no account: charges nothing
  EXPECT_TRUE(none.Grow(1 << 30, "x").ok());
  EXPECT_EQ(none.bytes(), 0);
}

}  // namespace
}  // namespace kiln::runtime
