#include "compiler/ir/literal.h"

#include "base/format.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace kiln::ir {

Literal::Literal(const Shape& shape) : shape_(shape) {
  if (shape.IsTuple()) {
    for (const Shape& s : shape.tuple_shapes()) elements_.emplace_back(s);
  } else if (shape.IsArray()) {
    bytes_.assign(static_cast<size_t>(shape.ByteSize()), 0);
  }
}

Literal Literal::Tuple(std::vector<Literal> elements) {
  std::vector<Shape> shapes;
  for (const Literal& l : elements) shapes.push_back(l.shape());
  Literal lit;
  lit.shape_ = Shape::Tuple(std::move(shapes));
  lit.elements_ = std::move(elements);
  return lit;
}

double Literal::GetAsDouble(int64_t i) const {
  return DispatchType(shape_.type(), [&](auto tag) -> double {
    using T = decltype(tag);
    if constexpr (kIsHalf<T>) return static_cast<float>(data<T>()[i]);
    else return static_cast<double>(data<T>()[i]);
  });
}

int64_t Literal::GetAsInt64(int64_t i) const {
  return DispatchType(shape_.type(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    return ConvertValue<int64_t>(data<T>()[i]);
  });
}

Literal Literal::FromBytes(const Shape& shape, std::vector<uint8_t> bytes) {
  Literal lit;
  lit.shape_ = shape;
  lit.bytes_ = std::move(bytes);
  return lit;
}

bool Literal::HoldsItsShape() const {
  if (shape_.IsTuple()) {
    if (elements_.size() != shape_.tuple_shapes().size()) return false;
    for (size_t i = 0; i < elements_.size(); ++i) {
      if (elements_[i].shape() != shape_.tuple_shape(i) || !elements_[i].HoldsItsShape()) {
        return false;
      }
    }
    return true;
  }
  return static_cast<int64_t>(bytes_.size()) == shape_.ByteSize();
}

void NormalizePredBytes(uint8_t* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) data[i] = data[i] != 0;
}

void Literal::SetFromDouble(int64_t i, double v) {
  DispatchType(shape_.type(), [&](auto tag) {
    using T = decltype(tag);
    data<T>()[i] = ConvertValue<T>(v);
  });
}

std::string FormatElement(const Literal& lit, int64_t i) {
  ElementType t = lit.shape().type();
  if (t == ElementType::kPred) return lit.data<bool>()[i] ? "true" : "false";
  if (t == ElementType::kF64) return FormatShortest(lit.data<double>()[i]);
  if (t == ElementType::kF32) return FormatShortest(lit.data<float>()[i]);
  if (IsFloatType(t)) {
    // bf16 and f16: the fewest significant digits that round back to the
    // same bits, then printed as that double's shortest form (so 40 prints
    // as "40", not "4e+01").
    double v = lit.GetAsDouble(i);
    if (std::isnan(v) || std::isinf(v)) return FormatShortest(v);
    char buf[64];
    double back = v;
    for (int p = 1; p <= 9; ++p) {
      std::snprintf(buf, sizeof(buf), "%.*g", p, v);
      back = std::strtod(buf, nullptr);
      Literal probe(Shape(t, {}));
      probe.SetFromDouble(0, back);
      if (std::memcmp(probe.bytes().data(),
                      lit.bytes().data() + i * ElementTypeSize(t),
                      ElementTypeSize(t)) == 0) {
        break;
      }
    }
    return FormatShortest(back);
  }
  if (IsUnsignedIntType(t)) {
    return DispatchType(t, [&](auto tag) -> std::string {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        return absl::StrCat(static_cast<uint64_t>(lit.data<T>()[i]));
      }
      return "";
    });
  }
  return absl::StrCat(lit.GetAsInt64(i));
}

namespace {
void AppendNested(const Literal& lit, int dim, int64_t* index,
                  std::string* out) {
  const Shape& s = lit.shape();
  if (dim == s.rank()) {
    out->append(FormatElement(lit, (*index)++));
    return;
  }
  out->append("{");
  for (int64_t i = 0; i < s.dim(dim); ++i) {
    if (i > 0) out->append(", ");
    AppendNested(lit, dim + 1, index, out);
  }
  out->append("}");
}
}  // namespace

std::string Literal::ToText() const {
  if (shape_.IsTuple()) {
    std::string out = "(";
    for (size_t i = 0; i < elements_.size(); ++i) {
      if (i > 0) out += ", ";
      out += elements_[i].ToText();
    }
    return out + ")";
  }
  if (shape_.IsToken()) return "";
  std::string out;
  int64_t index = 0;
  AppendNested(*this, 0, &index, &out);
  return out;
}

}  // namespace kiln::ir
