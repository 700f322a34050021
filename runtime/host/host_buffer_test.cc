#include "runtime/host/host_buffer.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/memory.h"

namespace kiln::host {
namespace {

// Every array's storage is 64-byte aligned, in the buffer (up to 64 bytes)
// or not, so that a kernel library picks the same code for a value
// wherever its buffer landed.
TEST(HostBufferTest, ArraysAre64ByteAlignedInlineOrNot) {
  std::vector<HostBufferPtr> held;  // kept, so that each lands elsewhere
  for (int64_t n : {1, 3, 15, 16, 17, 1000}) {
    for (int i = 0; i < 8; ++i) {
      absl::StatusOr<HostBufferPtr> b =
          HostBuffer::Allocate(ir::Shape(ir::ElementType::kF32, {n}), nullptr);
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->data()) % 64, 0u) << "f32[" << n << "]";
      held.push_back(*std::move(b));
    }
  }
}

// A small array lives in its buffer: written and read there, and charged
// to the tracker as any other.
TEST(HostBufferTest, SmallArraysKeepTheirValuesAndCharges) {
  runtime::MemoryTracker tracker(1 << 20);
  {
    absl::StatusOr<HostBufferPtr> b =
        HostBuffer::Allocate(ir::Shape(ir::ElementType::kF32, {16}), &tracker);
    ASSERT_TRUE(b.ok()) << b.status();
    float* v = (*b)->as<float>();
    for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i) * 0.5f;
    const ir::Literal lit = (*b)->ToLiteral();
    for (int i = 0; i < 16; ++i) EXPECT_EQ(lit.GetAsDouble(i), i * 0.5);
    EXPECT_EQ(tracker.Stats().live_buffers, 1);
    EXPECT_GT(tracker.Stats().bytes_in_use, 0);
  }
  EXPECT_EQ(tracker.Stats().bytes_in_use, 0);
  EXPECT_EQ(tracker.Stats().live_buffers, 0);
}

}  // namespace
}  // namespace kiln::host
