#include "runtime/host/merge_sort.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace kiln::host {
namespace {

TEST(MergeSortTest, SortsStablyLikeStdStableSort) {
  std::mt19937 rng(7);
  for (int n : {0, 1, 2, 3, 17, 64, 1000}) {
    std::vector<std::pair<int, int>> items(n);
    for (int i = 0; i < n; ++i) items[i] = {static_cast<int>(rng() % 10), i};
    auto expected = items;
    auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
    std::stable_sort(expected.begin(), expected.end(), by_key);
    MergeSort(items, by_key);
    EXPECT_EQ(items, expected) << n;
  }
}

// A comparator that is not a strict weak order (random answers, NaN under
// `<`, `<=`) still yields a permutation, and never reads outside the array
// (AddressSanitizer builds check the latter).
TEST(MergeSortTest, AnyComparatorGivesAPermutation) {
  std::mt19937 rng(11);
  for (int n : {2, 5, 33, 1000}) {
    std::vector<int> items(n);
    std::iota(items.begin(), items.end(), 0);
    MergeSort(items, [&](int, int) { return rng() % 2 == 0; });
    std::vector<int> sorted = items;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < n; ++i) EXPECT_EQ(sorted[i], i);

    std::vector<float> values(n);
    for (int i = 0; i < n; ++i) values[i] = i % 3 == 0 ? NAN : static_cast<float>(n - i);
    std::vector<float> copy = values;
    MergeSort(copy, [](float a, float b) { return a < b; });
    int nans = 0;
    for (float v : copy) nans += std::isnan(v);
    EXPECT_EQ(nans, (n + 2) / 3);
    MergeSort(copy, [](float a, float b) { return a <= b; });
    EXPECT_EQ(copy.size(), values.size());
  }
}

// A sort told to stop ends early, says so, and leaves a permutation.
TEST(MergeSortTest, AStoppedSortLeavesAPermutation) {
  const int n = 1 << 18;
  std::vector<int> items(n);
  for (int i = 0; i < n; ++i) items[i] = (i * 7919) % n;
  int asked = 0;
  EXPECT_FALSE(MergeSort(items, [](int a, int b) { return a < b; }, [&] { return ++asked == 2; }));
  EXPECT_EQ(asked, 2);
  std::vector<int> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_FALSE(std::is_sorted(items.begin(), items.end()));
  // Never told to stop: the whole sort, and true.
  EXPECT_TRUE(MergeSort(items, [](int a, int b) { return a < b; }, [] { return false; }));
  EXPECT_TRUE(std::is_sorted(items.begin(), items.end()));
}

}  // namespace
}  // namespace kiln::host
