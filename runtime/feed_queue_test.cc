#include "runtime/feed_queue.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

ir::Literal Scalar(float v) { return ir::Literal::Scalar<float>(ir::ElementType::kF32, v); }

TEST(FeedQueueTest, HoldsExactlyItsCapacityInOrder) {
  FeedQueue queue(2);
  ASSERT_TRUE(queue.Push(Scalar(1), absl::Milliseconds(10)).ok());
  ASSERT_TRUE(queue.Push(Scalar(2), absl::Milliseconds(10)).ok());
  EXPECT_EQ(queue.size(), 2u);
  // Full: a third value waits for room and gives up at its deadline.
  absl::Status full = queue.Push(Scalar(3), absl::Milliseconds(20));
  EXPECT_EQ(full.code(), absl::StatusCode::kDeadlineExceeded) << full;
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.Pop(absl::Milliseconds(10))->data<float>()[0], 1.0f);
  EXPECT_EQ(queue.Pop(absl::Milliseconds(10))->data<float>()[0], 2.0f);
  EXPECT_EQ(queue.Pop(absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(FeedQueueTest, AFailureReachesOnlyCallersThatBeganBeforeIt) {
  FeedQueue queue(4);
  const uint64_t before = queue.failures();
  ASSERT_TRUE(queue.Push(Scalar(1), absl::Milliseconds(10)).ok());
  queue.Fail(absl::InvalidArgumentError("the program failed"), /*drop_values=*/false);
  // A reader from before gets what is queued, then the failure at once.
  EXPECT_EQ(queue.Pop(absl::Seconds(10), nullptr, before)->data<float>()[0], 1.0f);
  auto after = queue.Pop(absl::Seconds(10), nullptr, before);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(queue.Push(Scalar(2), absl::Seconds(10), nullptr, before).code(),
            absl::StatusCode::kInvalidArgument);
  // Callers that begin afterwards, and the program (no `since`), go on.
  const uint64_t now = queue.failures();
  EXPECT_TRUE(queue.Push(Scalar(3), absl::Milliseconds(10), nullptr, now).ok());
  EXPECT_EQ(queue.Pop(absl::Milliseconds(10))->data<float>()[0], 3.0f);
  queue.Fail(absl::InternalError("again"), /*drop_values=*/true);
  EXPECT_EQ(queue.failures(), now + 1);
}

TEST(FeedQueueTest, QueuedValuesAreChargedToTheAccountUntilTheyLeave) {
  auto account = std::make_shared<MemoryAccount>("session s (host memory)", 12, "--quota");
  FeedQueue queue(8, account);
  ASSERT_TRUE(queue.Push(Scalar(1), absl::Milliseconds(10)).ok());
  ASSERT_TRUE(queue.Push(Scalar(2), absl::Milliseconds(10)).ok());
  EXPECT_EQ(account->bytes_in_use(), 8);
  // A value the caller charged already in part is charged only the rest.
  MemoryCharge part(account);
  ASSERT_TRUE(part.Grow(2, "x").ok());
  ASSERT_TRUE(queue.Push(Scalar(3), absl::Milliseconds(10), nullptr, std::nullopt,
                         std::move(part)).ok());
  EXPECT_EQ(account->bytes_in_use(), 12);
  // Past the quota: refused, naming it, and nothing queued.
  absl::Status over = queue.Push(Scalar(4), absl::Milliseconds(10));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(over.message(), ::testing::HasSubstr("--quota"));
  EXPECT_EQ(queue.size(), 3u);
  // A popped value's charge ends, or passes to the caller that asks for it.
  ASSERT_TRUE(queue.Pop(absl::Milliseconds(10)).ok());
  EXPECT_EQ(account->bytes_in_use(), 8);
  MemoryCharge taken;
  ASSERT_TRUE(queue.Pop(absl::Milliseconds(10), nullptr, std::nullopt, &taken).ok());
  EXPECT_EQ(taken.bytes(), 4);
  EXPECT_EQ(account->bytes_in_use(), 8);
  taken.Reset();
  EXPECT_EQ(account->bytes_in_use(), 4);
  // Dropped values are uncharged.
  queue.Abort();
  EXPECT_EQ(account->bytes_in_use(), 0);
  ASSERT_TRUE(queue.Push(Scalar(5), absl::Milliseconds(10)).ok());
  queue.Fail(absl::InternalError("failed"), /*drop_values=*/true);
  EXPECT_EQ(account->bytes_in_use(), 0);
}

}  // namespace
}  // namespace kiln::runtime
