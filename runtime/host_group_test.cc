#include "runtime/host_group.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;

TEST(LocalGroupStoreTest, GetWaitsForTheKeyAndGivesUpAtItsDeadline) {
  LocalGroupStore store(4, 16);
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(30));
    ASSERT_TRUE(store.Set("a", "value").ok());
  });
  absl::StatusOr<std::string> a = store.Get("a", absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "value");
  EXPECT_EQ(store.Get("b", absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(LocalGroupStoreTest, RefusesValuesAndKeysPastItsLimits) {
  LocalGroupStore store(2, 4);
  EXPECT_EQ(store.Set("a", "12345").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Set("a", "1").ok());
  ASSERT_TRUE(store.Set("b", "2").ok());
  ASSERT_TRUE(store.Set("a", "3").ok());  // an existing key is replaced
  EXPECT_EQ(store.Set("c", "4").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*store.Get("a", absl::Milliseconds(10)), "3");
}

HostGroupSpec Spec(const std::string& id, int rank, int size, absl::Duration timeout) {
  HostGroupSpec spec;
  spec.id = id;
  spec.rank = rank;
  for (int r = 0; r < size; ++r) spec.members.push_back("server-" + std::to_string(r));
  spec.timeout = timeout;
  return spec;
}

// Forms a group of `size` members on threads of this process.
std::vector<std::unique_ptr<HostGroup>> Form(const std::string& id, int size,
                                             absl::Duration timeout) {
  auto store = std::make_shared<LocalGroupStore>(64, 1 << 16);
  std::vector<std::unique_ptr<HostGroup>> groups(size);
  std::vector<absl::Status> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<HostGroup>> g = HostGroup::Create(Spec(id, r, size, timeout), store);
      if (g.ok()) {
        groups[r] = *std::move(g);
      } else {
        errors[r] = g.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_TRUE(errors[r].ok()) << errors[r];
  return groups;
}

TEST(HostGroupTest, AllGatherGivesEveryMemberEveryonesBytesOfAnySize) {
  if (!HostGroupsSupported()) GTEST_SKIP() << "built without Gloo";
  std::vector<std::unique_ptr<HostGroup>> groups = Form("g1", 3, absl::Seconds(20));
  ASSERT_EQ(groups.size(), 3u);
  for (const auto& g : groups) ASSERT_NE(g, nullptr);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<std::string>> got(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        // Member r sends r * round + 1 bytes of its own letter; member 1
        // sends nothing in round 1.
        const int n = (round == 1 && r == 1) ? 0 : r * round + 1 + r * 100000;
        absl::StatusOr<std::vector<std::string>> all =
            groups[r]->AllGather(std::string(n, static_cast<char>('a' + r)));
        ASSERT_TRUE(all.ok()) << all.status();
        got[r] = *all;
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      ASSERT_EQ(got[r].size(), 3u);
      for (int from = 0; from < 3; ++from) {
        const int n = (round == 1 && from == 1) ? 0 : from * round + 1 + from * 100000;
        EXPECT_EQ(got[r][from], std::string(n, static_cast<char>('a' + from)))
            << "member " << r << " from " << from << " round " << round;
      }
    }
  }
}

TEST(HostGroupTest, AMemberThatNeverJoinsIsNamedWithinTheTimeout) {
  if (!HostGroupsSupported()) GTEST_SKIP() << "built without Gloo";
  auto store = std::make_shared<LocalGroupStore>(64, 1 << 16);
  const absl::Time start = absl::Now();
  // Member 1 of 2 never comes.
  absl::StatusOr<std::unique_ptr<HostGroup>> g =
      HostGroup::Create(Spec("g2", 0, 2, absl::Milliseconds(500)), store);
  EXPECT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("member 1 (server-1)"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(HostGroupTest, AJoinStopsWhenCancelled) {
  if (!HostGroupsSupported()) GTEST_SKIP() << "built without Gloo";
  auto store = std::make_shared<LocalGroupStore>(64, 1 << 16);
  const absl::Time start = absl::Now();
  // Member 1 never comes; the join is cancelled after 300 ms, long before
  // its timeout.
  absl::StatusOr<std::unique_ptr<HostGroup>> g = HostGroup::Create(
      Spec("g5", 0, 2, absl::Seconds(60)), store,
      [start] { return absl::Now() - start > absl::Milliseconds(300); });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kCancelled) << g.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(HostGroupTest, AMemberThatLeavesBreaksTheGroupForTheOthers) {
  if (!HostGroupsSupported()) GTEST_SKIP() << "built without Gloo";
  std::vector<std::unique_ptr<HostGroup>> groups = Form("g3", 3, absl::Seconds(2));
  for (const auto& g : groups) ASSERT_NE(g, nullptr);
  groups[2].reset();  // its connections close
  const absl::Time start = absl::Now();
  std::vector<absl::Status> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { errors[r] = groups[r]->AllGather("x").status(); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(errors[r].ok());
    EXPECT_THAT(std::string(errors[r].message()), HasSubstr("group g3"));
    // Broken for good: the next exchange fails at once.
    absl::Status again = groups[r]->AllGather("y").status();
    EXPECT_THAT(std::string(again.message()), HasSubstr("is broken (form a new group)"));
  }
}

// A member whose execution failed breaks its group without taking part in
// the exchange the others are waiting in: its connections close, and their
// exchange fails at once rather than at the timeout (a minute here).
TEST(HostGroupTest, AMemberThatBreaksTheGroupFailsTheOthersExchangeAtOnce) {
  if (!HostGroupsSupported()) GTEST_SKIP() << "built without Gloo";
  std::vector<std::unique_ptr<HostGroup>> groups = Form("g6", 3, absl::Seconds(60));
  for (const auto& g : groups) ASSERT_NE(g, nullptr);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      float value = 1;
      errors[r] = groups[r]->AllReduce(&value, 1, sizeof(float),
                                       [](void* out, const void* a, const void* b, size_t) {
                                         *static_cast<float*>(out) = *static_cast<const float*>(a) +
                                                                     *static_cast<const float*>(b);
                                       });
    });
  }
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(groups[2]->Break(absl::AbortedError("its program failed")).code(),
            absl::StatusCode::kAborted);
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(errors[r].ok());
    EXPECT_THAT(std::string(errors[r].message()), HasSubstr("group g6"));
  }
  // The first failure is the one it keeps.
  EXPECT_THAT(std::string(groups[2]->Break(absl::InternalError("later")).message()),
              HasSubstr("its program failed"));
}

TEST(HostGroupTest, ARankOutsideTheMembersIsRefused) {
  auto store = std::make_shared<LocalGroupStore>(4, 16);
  EXPECT_EQ(HostGroup::Create(Spec("g4", 2, 2, absl::Seconds(1)), store).status().code(),
            HostGroupsSupported() ? absl::StatusCode::kInvalidArgument
                                  : absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::runtime
