#include "runtime/host/strided_copy.h"

#include <numeric>

#include "gtest/gtest.h"

namespace kiln::host {
namespace {

TEST(StridedCopyTest, TransposeBroadcastReverse) {
  std::vector<int32_t> src(6);
  std::iota(src.begin(), src.end(), 0);  // [[0,1,2],[3,4,5]]
  std::vector<int32_t> dst(6, -1);
  // Transpose to [3,2]: read with strides {1,3}.
  StridedCopy({3, 2}, reinterpret_cast<uint8_t*>(src.data()), 0, {1, 3},
              reinterpret_cast<uint8_t*>(dst.data()), 0, {2, 1}, 4);
  EXPECT_EQ(dst, (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  // Broadcast row 1 into two rows (stride 0 on the first dim).
  StridedCopy({2, 3}, reinterpret_cast<uint8_t*>(src.data()), 3, {0, 1},
              reinterpret_cast<uint8_t*>(dst.data()), 0, {3, 1}, 4);
  EXPECT_EQ(dst, (std::vector<int32_t>{3, 4, 5, 3, 4, 5}));
  // Reverse the columns.
  StridedCopy({2, 3}, reinterpret_cast<uint8_t*>(src.data()), 2, {3, -1},
              reinterpret_cast<uint8_t*>(dst.data()), 0, {3, 1}, 4);
  EXPECT_EQ(dst, (std::vector<int32_t>{2, 1, 0, 5, 4, 3}));
}

TEST(StridedCopyTest, EmptyBoxCopiesNothing) {
  std::vector<int8_t> src{1, 2}, dst{7, 7};
  StridedCopy({0, 2}, reinterpret_cast<uint8_t*>(src.data()), 0, {2, 1},
              reinterpret_cast<uint8_t*>(dst.data()), 0, {2, 1}, 1);
  EXPECT_EQ(dst, (std::vector<int8_t>{7, 7}));
}

}  // namespace
}  // namespace kiln::host
