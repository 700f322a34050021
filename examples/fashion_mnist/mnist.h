// Fashion-MNIST in idx format (as Debian's dataset-fashion-mnist installs
// it, gzip-compressed or not).
#ifndef KILN_EXAMPLES_FASHION_MNIST_MNIST_H_
#define KILN_EXAMPLES_FASHION_MNIST_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::examples {

inline constexpr char kDefaultDataDir[] = "/usr/share/datasets/fashion-mnist";

// The training set's pixel mean and deviation, on the [0, 1] scale: images
// are standardized as (pixel / 255 - kPixelMean) / kPixelStd.
inline constexpr float kPixelMean = 0.2860f;
inline constexpr float kPixelStd = 0.3530f;

struct Dataset {
  int64_t count = 0;
  int rows = 28, cols = 28;
  std::vector<float> images;    // count * rows * cols, scaled to [0, 1] and standardized
  std::vector<uint8_t> pixels;  // the same images as the file stores them, 0..255
  std::vector<int32_t> labels;  // count, 0..9
};

// Reads `prefix`-images-idx3-ubyte[.gz] and `prefix`-labels-idx1-ubyte[.gz]
// from `dir` ("train" or "t10k"). At most `limit` examples when limit > 0.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& prefix,
                                         int64_t limit = 0);

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_FASHION_MNIST_MNIST_H_
