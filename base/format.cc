#include "base/format.h"

#include <charconv>
#include <cmath>

namespace kiln {
namespace {

template <typename T>
std::string Shortest(T v) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string FormatShortest(double v) { return Shortest(v); }
std::string FormatShortest(float v) { return Shortest(v); }

}  // namespace kiln
