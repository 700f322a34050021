// Element types and shapes of the IR: an array shape is an element type with
// static dimensions (row-major); a tuple shape holds element shapes.
#ifndef KILN_COMPILER_IR_SHAPE_H_
#define KILN_COMPILER_IR_SHAPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "base/element_type.h"

namespace kiln::ir {

// Element types are base vocabulary (base/element_type.h); the IR names
// them as its own.
using ::kiln::ElementType;
using ::kiln::ElementTypeFromName;
using ::kiln::ElementTypeName;
using ::kiln::ElementTypeSize;
using ::kiln::IsArrayType;
using ::kiln::IsFloatType;
using ::kiln::IsIntegralType;
using ::kiln::IsSignedIntType;
using ::kiln::IsUnsignedIntType;

// Largest element count an array may have; larger shapes are rejected by
// shape inference and the verifier (keeps byte sizes well inside int64).
inline constexpr int64_t kMaxElements = int64_t{1} << 40;
// Largest byte size a shape may have, a tuple's elements together: a tuple
// of many arrays each within kMaxElements must not add up past int64.
inline constexpr int64_t kMaxShapeBytes = int64_t{1} << 44;
// Largest rank and tuple nesting a shape may have. Code walks shapes
// dimension by dimension and tuples recursively: client input must not
// choose how deep.
inline constexpr int kMaxRank = 64;
inline constexpr int kMaxTupleDepth = 32;

class Shape {
 public:
  Shape() = default;
  Shape(ElementType type, std::vector<int64_t> dims)
      : type_(type), dims_(std::move(dims)) {}
  static Shape Tuple(std::vector<Shape> elements);
  static Shape Token() { return Shape(ElementType::kToken, {}); }
  static Shape Scalar(ElementType type) { return Shape(type, {}); }

  ElementType type() const { return type_; }
  void set_type(ElementType type) { type_ = type; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& mutable_dims() { return dims_; }
  int64_t dim(int i) const { return dims_[i]; }
  int rank() const { return static_cast<int>(dims_.size()); }
  const std::vector<Shape>& tuple_shapes() const { return tuple_shapes_; }
  const Shape& tuple_shape(int i) const { return tuple_shapes_[i]; }

  bool IsTuple() const { return type_ == ElementType::kTuple; }
  bool IsToken() const { return type_ == ElementType::kToken; }
  bool IsArray() const { return IsArrayType(type_); }
  bool IsScalar() const { return IsArray() && dims_.empty(); }

  // Number of elements of an array shape (1 for scalars).
  int64_t ElementCount() const;
  // Bytes of an array's data; for tuples, the sum over leaves.
  int64_t ByteSize() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

  // "f32[2,3]", "(f32[], s32[4])", "token[]".
  std::string ToString() const;

 private:
  ElementType type_ = ElementType::kF32;
  std::vector<int64_t> dims_;
  std::vector<Shape> tuple_shapes_;
};

// Checks dims are non-negative, the element count is below kMaxElements,
// the byte size (a tuple's elements together) at most kMaxShapeBytes, the
// rank at most kMaxRank and tuples nested at most kMaxTupleDepth deep.
absl::Status ValidateShape(const Shape& shape);

// Row-major strides (in elements) of `dims`.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims);

// The arrays of `shape`, tuples flattened depth-first and tokens left out:
// the outputs an execution returns for a result of that shape.
std::vector<Shape> FlattenedArrays(const Shape& shape);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_SHAPE_H_
