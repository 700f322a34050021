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

}  // namespace
}  // namespace kiln::runtime
