// A stable merge sort that stays inside its array whatever the comparator
// does. std::stable_sort trusts its comparator to be a strict weak order
// and may read past the array when it is not (a NaN under `<`, a comparator
// computation that calls rng): a program's comparator is client input.
#ifndef KILN_RUNTIME_HOST_MERGE_SORT_H_
#define KILN_RUNTIME_HOST_MERGE_SORT_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kiln::host {

// Sorts `items` stably by `less`. With a comparator that is not a strict
// weak order the result is still a permutation of `items` (in an
// unspecified order), and every access stays in bounds. `stop` is asked
// about every 2^16 elements merged; when it says true the sort ends early
// (items then hold a permutation of themselves) and returns false.
template <typename T, typename Less, typename Stop>
bool MergeSort(std::vector<T>& items, Less less, Stop stop) {
  constexpr int64_t kPollEvery = int64_t{1} << 16;
  const int64_t n = static_cast<int64_t>(items.size());
  if (n < 2) return true;
  std::vector<T> scratch(items.size());
  std::vector<T>* from = &items;
  std::vector<T>* to = &scratch;
  int64_t merged = 0;
  bool stopped = false;
  for (int64_t width = 1; width < n && !stopped; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      if (merged >= kPollEvery) {
        merged = 0;
        if (stop()) {
          stopped = true;
          break;
        }
      }
      const int64_t mid = std::min(lo + width, n);
      const int64_t hi = std::min(lo + 2 * width, n);
      int64_t i = lo, j = mid, k = lo;
      // Stability: the left run wins unless the right element is less.
      while (i < mid && j < hi) (*to)[k++] = less((*from)[j], (*from)[i]) ? (*from)[j++] : (*from)[i++];
      while (i < mid) (*to)[k++] = (*from)[i++];
      while (j < hi) (*to)[k++] = (*from)[j++];
      merged += hi - lo;
    }
    if (!stopped) std::swap(from, to);
  }
  if (from != &items) items.swap(scratch);
  return !stopped;
}

template <typename T, typename Less>
void MergeSort(std::vector<T>& items, Less less) {
  MergeSort(items, less, [] { return false; });
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_MERGE_SORT_H_
