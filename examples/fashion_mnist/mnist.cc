#include "examples/fashion_mnist/mnist.h"

#include <zlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::examples {
namespace {

// Reads a whole file through zlib (which also reads uncompressed files).
absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("cannot decompress ", path));
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t pos) {
  return (uint32_t(uint8_t(s[pos])) << 24) | (uint32_t(uint8_t(s[pos + 1])) << 16) |
         (uint32_t(uint8_t(s[pos + 2])) << 8) | uint32_t(uint8_t(s[pos + 3]));
}

std::string Find(const std::string& dir, const std::string& name) {
  const std::string plain = absl::StrCat(dir, "/", name);
  if (std::filesystem::exists(plain)) return plain;
  return plain + ".gz";
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& prefix,
                                         int64_t limit) {
  const std::string image_path = Find(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = Find(dir, prefix + "-labels-idx1-ubyte");
  ASSIGN_OR_RETURN(std::string images, ReadMaybeGzip(image_path));
  ASSIGN_OR_RETURN(std::string labels, ReadMaybeGzip(label_path));
  if (images.size() < 16 || BigEndian32(images, 0) != 0x803) {
    return absl::DataLossError(absl::StrCat(image_path, " is not an idx3 image file"));
  }
  if (labels.size() < 8 || BigEndian32(labels, 0) != 0x801) {
    return absl::DataLossError(absl::StrCat(label_path, " is not an idx1 label file"));
  }
  Dataset d;
  d.count = BigEndian32(images, 4);
  d.rows = static_cast<int>(BigEndian32(images, 8));
  d.cols = static_cast<int>(BigEndian32(images, 12));
  const int64_t pixels = int64_t{d.rows} * d.cols;
  if (BigEndian32(labels, 4) != d.count || images.size() != 16 + size_t(d.count * pixels) ||
      labels.size() != 8 + size_t(d.count)) {
    return absl::DataLossError(absl::StrCat(prefix, " image and label files do not match"));
  }
  if (limit > 0 && limit < d.count) d.count = limit;
  d.pixels.assign(images.begin() + 16, images.begin() + 16 + d.count * pixels);
  d.images.resize(d.count * pixels);
  for (int64_t i = 0; i < d.count * pixels; ++i) {
    d.images[i] = (d.pixels[i] / 255.0f - kPixelMean) / kPixelStd;
  }
  d.labels.resize(d.count);
  for (int64_t i = 0; i < d.count; ++i) {
    d.labels[i] = uint8_t(labels[8 + i]);
    if (d.labels[i] > 9) return absl::DataLossError("label out of range");
  }
  return d;
}

}  // namespace kiln::examples
