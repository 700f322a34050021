#include "compiler/ir/shape.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::ir {

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape s(ElementType::kTuple, {});
  s.tuple_shapes_ = std::move(elements);
  return s;
}

int64_t Shape::ElementCount() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::ByteSize() const {
  if (IsTuple()) {
    // Saturates rather than wraps on a shape ValidateShape would refuse.
    int64_t total = 0;
    for (const Shape& s : tuple_shapes_) {
      const int64_t bytes = s.ByteSize();
      if (bytes > std::numeric_limits<int64_t>::max() - total) {
        return std::numeric_limits<int64_t>::max();
      }
      total += bytes;
    }
    return total;
  }
  return ElementCount() * ElementTypeSize(type_);
}

bool Shape::operator==(const Shape& other) const {
  return type_ == other.type_ && dims_ == other.dims_ &&
         tuple_shapes_ == other.tuple_shapes_;
}

std::string Shape::ToString() const {
  if (IsTuple()) {
    std::vector<std::string> parts;
    for (const Shape& s : tuple_shapes_) parts.push_back(s.ToString());
    return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
  }
  return absl::StrCat(ElementTypeName(type_), "[", absl::StrJoin(dims_, ","),
                      "]");
}

namespace {

// `bytes` receives the shape's byte size once it is known to be valid.
absl::Status ValidateShapeAt(const Shape& shape, int depth, int64_t* bytes) {
  *bytes = 0;
  if (shape.IsTuple()) {
    if (depth >= kMaxTupleDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("tuples nested more than ", kMaxTupleDepth, " deep"));
    }
    int64_t total = 0;
    for (const Shape& s : shape.tuple_shapes()) {
      int64_t element = 0;
      absl::Status st = ValidateShapeAt(s, depth + 1, &element);
      if (!st.ok()) return st;
      // Each term is at most kMaxShapeBytes: the sum cannot overflow first.
      total += element;
      if (total > kMaxShapeBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a tuple of ", shape.tuple_shapes().size(), " elements holds more than the limit of ",
            kMaxShapeBytes, " bytes"));
      }
    }
    *bytes = total;
    return absl::OkStatus();
  }
  if (shape.rank() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", shape.rank(), " exceeds the limit of ", kMaxRank));
  }
  if (shape.IsToken()) {
    if (shape.rank() != 0) return absl::InvalidArgumentError("token with dims");
    return absl::OkStatus();
  }
  int64_t n = 1;
  for (int64_t d : shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in ", shape.ToString()));
    }
    if (d != 0 && n > kMaxElements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "element count of ", shape.ToString(), " overflows the limit of ",
          kMaxElements, " elements"));
    }
    n *= d;
  }
  // At most 2^40 elements of at most 16 bytes: within kMaxShapeBytes.
  *bytes = n * ElementTypeSize(shape.type());
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateShape(const Shape& shape) {
  int64_t bytes = 0;
  return ValidateShapeAt(shape, 0, &bytes);
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

namespace {

void AppendArrays(const Shape& shape, std::vector<Shape>* out) {
  if (shape.IsTuple()) {
    for (const Shape& element : shape.tuple_shapes()) AppendArrays(element, out);
  } else if (shape.IsArray()) {
    out->push_back(shape);
  }
}

}  // namespace

std::vector<Shape> FlattenedArrays(const Shape& shape) {
  std::vector<Shape> out;
  AppendArrays(shape, &out);
  return out;
}

}  // namespace kiln::ir
