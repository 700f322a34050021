// A host value of some shape: raw little-endian row-major bytes for arrays,
// element literals for tuples. Used for constants, inputs and outputs.
#ifndef KILN_COMPILER_IR_LITERAL_H_
#define KILN_COMPILER_IR_LITERAL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/shape.h"
#include "base/type_dispatch.h"

namespace kiln::ir {

class Literal {
 public:
  Literal() = default;
  // A zero-filled array literal of `shape` (or tuple of such).
  explicit Literal(const Shape& shape);
  static Literal Tuple(std::vector<Literal> elements);
  // An array literal that takes over `bytes`, which must hold exactly
  // shape.ByteSize() bytes (checked by the caller).
  static Literal FromBytes(const Shape& shape, std::vector<uint8_t> bytes);

  template <typename T>
  static Literal FromVector(ElementType type, std::vector<int64_t> dims,
                            const std::vector<T>& values) {
    Literal lit(Shape(type, std::move(dims)));
    DispatchType(type, [&](auto tag) {
      using N = decltype(tag);
      N* out = lit.data<N>();
      for (size_t i = 0; i < values.size() && i < size_t(lit.element_count());
           ++i) {
        out[i] = ConvertValue<N>(values[i]);
      }
    });
    return lit;
  }
  template <typename T>
  static Literal Scalar(ElementType type, T value) {
    return FromVector<T>(type, {}, {value});
  }

  const Shape& shape() const { return shape_; }
  int64_t element_count() const { return shape_.ElementCount(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& mutable_bytes() { return bytes_; }
  template <typename T> T* data() { return reinterpret_cast<T*>(bytes_.data()); }
  template <typename T> const T* data() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }
  const std::vector<Literal>& tuple_elements() const { return elements_; }
  std::vector<Literal>& mutable_tuple_elements() { return elements_; }

  // True when the bytes (and tuple elements, recursively) match the shape:
  // a default-constructed literal, or one mutated by hand, may not.
  bool HoldsItsShape() const;

  // Element `i` (row-major) converted to double / int64.
  double GetAsDouble(int64_t i) const;
  int64_t GetAsInt64(int64_t i) const;
  void SetFromDouble(int64_t i, double v);

  bool operator==(const Literal& other) const {
    return shape_ == other.shape_ && bytes_ == other.bytes_ &&
           elements_ == other.elements_;
  }

  // The HLO text form of the value, e.g. "{ {1, 2}, {3, 4} }"; scalars bare.
  // Floats print with enough digits to round-trip exactly.
  std::string ToText() const;

 private:
  Shape shape_;
  std::vector<uint8_t> bytes_;
  std::vector<Literal> elements_;
};

// Makes every byte of a pred array 0 or 1 (nonzero is true, as in NumPy):
// bytes from outside (the wire, a file) may hold any value, and reading
// another value as a bool is undefined.
void NormalizePredBytes(uint8_t* data, int64_t n);

// Formats one element for text: shortest form that round-trips ("inf",
// "-inf", "nan", "true"/"false" for pred).
std::string FormatElement(const Literal& lit, int64_t i);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_LITERAL_H_
