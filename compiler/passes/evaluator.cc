#include "compiler/passes/evaluator.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/element_rules.h"
#include "base/type_dispatch.h"

namespace kiln::passes {
namespace {

using ir::ComparisonDirection;
using ir::ElementType;
using ir::Literal;
using ir::Opcode;
using ir::Shape;

// The element rules are the host interpreter's (base/element_rules.h); the
// test evaluator_test.cc checks folding against the interpreter on edge
// values.
using namespace ::kiln::element_rules;

// A NaN with the quiet bit clear (the top bit of the significand).
template <typename C>
bool IsSignalingNan(C x) {
  if (x == x) return false;
  if constexpr (std::is_same_v<C, float>) {
    return (std::bit_cast<uint32_t>(x) & 0x00400000u) == 0;
  } else {
    return (std::bit_cast<uint64_t>(x) & 0x0008000000000000ull) == 0;
  }
}

template <typename T>
std::optional<T> UnaryValue(Opcode op, T a) {
  if constexpr (ir::kIsFloat<T>) {
    using C = Calc<T>;
    const C x = Ld(a);
    // Rounding a signaling NaN quiets it in a vector unit's instruction and
    // may not in the math library's function.
    if (op != Opcode::kAbs && op != Opcode::kNegate && IsSignalingNan(x)) {
      return std::nullopt;
    }
    switch (op) {
      case Opcode::kAbs: return St<T>(std::abs(x));
      case Opcode::kNegate: return St<T>(-x);
      case Opcode::kSign:
        return St<T>(x != x ? x : (x > 0 ? C(1) : (x < 0 ? C(-1) : x)));
      case Opcode::kFloor: return St<T>(std::floor(x));
      case Opcode::kCeil: return St<T>(std::ceil(x));
      case Opcode::kSqrt: return St<T>(std::sqrt(x));
      case Opcode::kRoundAfz: return St<T>(std::round(x));
      case Opcode::kRoundEven: return St<T>(std::nearbyint(x));
      default: return std::nullopt;
    }
  } else if constexpr (kIsInt<T>) {
    switch (op) {
      case Opcode::kAbs:
        if constexpr (std::is_signed_v<T>) return a < 0 ? WrapSub(T(0), a) : a;
        else return a;
      case Opcode::kNegate: return WrapSub(T(0), a);
      case Opcode::kSign: return static_cast<T>((a > 0) - (a < 0));
      case Opcode::kNot: return static_cast<T>(~a);
      case Opcode::kPopcnt:
        return static_cast<T>(std::popcount(static_cast<Unsigned<T>>(a)));
      case Opcode::kClz:
        return static_cast<T>(std::countl_zero(static_cast<Unsigned<T>>(a)));
      default: return std::nullopt;
    }
  } else {  // pred
    if (op == Opcode::kNot) return !a;
    return std::nullopt;
  }
}

template <typename T>
std::optional<T> BinaryValue(Opcode op, T a, T b) {
  if constexpr (ir::kIsFloat<T>) {
    using C = Calc<T>;
    const C x = Ld(a), y = Ld(b);
    // Which NaN an arithmetic instruction returns for two NaN operands
    // depends on the order it reads them in, which the compiler may swap.
    const bool two_nans = x != x && y != y;
    switch (op) {
      case Opcode::kAdd:
        if (two_nans) return std::nullopt;
        return St<T>(x + y);
      case Opcode::kSubtract:
        if (two_nans) return std::nullopt;
        return St<T>(x - y);
      case Opcode::kMultiply:
        if (two_nans) return std::nullopt;
        return St<T>(x * y);
      case Opcode::kDivide:
        if (two_nans) return std::nullopt;
        return St<T>(x / y);
      case Opcode::kRemainder:
        if (two_nans) return std::nullopt;
        return St<T>(static_cast<C>(std::fmod(x, y)));
      case Opcode::kMaximum: return St<T>(FMax(x, y));
      case Opcode::kMinimum: return St<T>(FMin(x, y));
      default: return std::nullopt;
    }
  } else if constexpr (kIsInt<T>) {
    switch (op) {
      case Opcode::kAdd: return WrapAdd(a, b);
      case Opcode::kSubtract: return WrapSub(a, b);
      case Opcode::kMultiply: return WrapMul(a, b);
      case Opcode::kDivide: return IntDiv(a, b);
      case Opcode::kRemainder: return IntRem(a, b);
      case Opcode::kPower: return IntPow(a, b);
      case Opcode::kMaximum: return a > b ? a : b;
      case Opcode::kMinimum: return a < b ? a : b;
      case Opcode::kAnd: return static_cast<T>(a & b);
      case Opcode::kOr: return static_cast<T>(a | b);
      case Opcode::kXor: return static_cast<T>(a ^ b);
      case Opcode::kShiftLeft: return ShiftLeft(a, b);
      case Opcode::kShiftRightLogical: return ShiftRightLogical(a, b);
      case Opcode::kShiftRightArithmetic: return ShiftRightArith(a, b);
      default: return std::nullopt;
    }
  } else {  // pred
    switch (op) {
      case Opcode::kAnd:
      case Opcode::kMinimum:
        return a && b;
      case Opcode::kOr:
      case Opcode::kMaximum:
        return a || b;
      case Opcode::kXor:
        return a != b;
      default:
        return std::nullopt;
    }
  }
}

template <typename T>
bool CompareValue(ComparisonDirection d, T a, T b) {
  const auto x = Ld(a), y = Ld(b);
  switch (d) {
    case ComparisonDirection::kEq: return x == y;
    case ComparisonDirection::kNe: return x != y;
    case ComparisonDirection::kLt: return x < y;
    case ComparisonDirection::kLe: return x <= y;
    case ComparisonDirection::kGt: return x > y;
    case ComparisonDirection::kGe: return x >= y;
  }
  return false;
}

// Element `i` of an operand that is either result-sized or one element
// broadcast over the result (a select predicate, clamp bounds).
template <typename T>
T At(const Literal& lit, int64_t i) {
  return lit.data<T>()[lit.element_count() == 1 ? 0 : i];
}

std::optional<Literal> EvaluateElementwise(
    const ir::Instruction& instr, const std::vector<const Literal*>& ops) {
  const Opcode op = instr.opcode();
  const Shape& shape = instr.shape();
  const int64_t n = shape.ElementCount();
  const ElementType in_type = ops[0]->shape().type();
  Literal out(shape);
  bool ok = true;
  switch (op) {
    case Opcode::kCopy:
    case Opcode::kBitcastConvert:
      return Literal::FromBytes(shape, ops[0]->bytes());
    case Opcode::kConvert:
      ir::DispatchType(in_type, [&](auto from_tag) {
        using From = decltype(from_tag);
        ir::DispatchType(shape.type(), [&](auto to_tag) {
          using To = decltype(to_tag);
          const From* a = ops[0]->data<From>();
          To* o = out.data<To>();
          for (int64_t i = 0; i < n; ++i) o[i] = ir::ConvertValue<To>(a[i]);
        });
      });
      return out;
    case Opcode::kIsFinite:
      ir::DispatchType(in_type, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (ir::kIsFloat<T>) {
          const T* a = ops[0]->data<T>();
          bool* o = out.data<bool>();
          for (int64_t i = 0; i < n; ++i) o[i] = std::isfinite(Ld(a[i]));
        } else {
          ok = false;
        }
      });
      break;
    case Opcode::kCompare:
      ir::DispatchType(in_type, [&](auto tag) {
        using T = decltype(tag);
        bool* o = out.data<bool>();
        for (int64_t i = 0; i < n; ++i) {
          o[i] = CompareValue<T>(instr.attrs().direction, At<T>(*ops[0], i),
                                 At<T>(*ops[1], i));
        }
      });
      break;
    case Opcode::kSelect:
      ir::DispatchType(shape.type(), [&](auto tag) {
        using T = decltype(tag);
        T* o = out.data<T>();
        for (int64_t i = 0; i < n; ++i) {
          o[i] = At<bool>(*ops[0], i) ? At<T>(*ops[1], i) : At<T>(*ops[2], i);
        }
      });
      break;
    case Opcode::kClamp:
      ir::DispatchType(shape.type(), [&](auto tag) {
        using T = decltype(tag);
        T* o = out.data<T>();
        for (int64_t i = 0; i < n; ++i) {
          o[i] = St<T>(Clamp(Ld(At<T>(*ops[0], i)), Ld(At<T>(*ops[1], i)), Ld(At<T>(*ops[2], i))));
        }
      });
      break;
    default:
      if (ir::OpcodeCategory(op) == ir::OpCategory::kUnary) {
        ir::DispatchType(shape.type(), [&](auto tag) {
          using T = decltype(tag);
          const T* a = ops[0]->data<T>();
          T* o = out.data<T>();
          for (int64_t i = 0; i < n && ok; ++i) {
            std::optional<T> v = UnaryValue<T>(op, a[i]);
            ok = v.has_value();
            if (ok) o[i] = *v;
          }
        });
      } else if (ir::OpcodeCategory(op) == ir::OpCategory::kBinary) {
        ir::DispatchType(shape.type(), [&](auto tag) {
          using T = decltype(tag);
          const T* a = ops[0]->data<T>();
          const T* b = ops[1]->data<T>();
          T* o = out.data<T>();
          for (int64_t i = 0; i < n && ok; ++i) {
            std::optional<T> v = BinaryValue<T>(op, a[i], b[i]);
            ok = v.has_value();
            if (ok) o[i] = *v;
          }
        });
      } else {
        ok = false;
      }
      break;
  }
  if (!ok) return std::nullopt;
  return out;
}

// Copies an array of `dims` element by element: destination element
// `idx` (row-major in `dst_strides`) from source element
// src_offset + sum(idx[d] * src_strides[d]). Strides are in elements and
// may be zero (broadcast) or negative (reverse).
void StridedCopy(const std::vector<int64_t>& dims, const uint8_t* src,
                 int64_t src_offset, const std::vector<int64_t>& src_strides,
                 uint8_t* dst, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides, int esize) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (n == 0) return;
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> idx(rank, 0);
  int64_t s = src_offset, t = dst_offset;
  for (int64_t k = 0; k < n; ++k) {
    std::memcpy(dst + t * esize, src + s * esize, esize);
    for (int j = rank - 1; j >= 0; --j) {
      if (++idx[j] < dims[j]) {
        s += src_strides[j];
        t += dst_strides[j];
        break;
      }
      s -= src_strides[j] * (dims[j] - 1);
      t -= dst_strides[j] * (dims[j] - 1);
      idx[j] = 0;
    }
  }
}

std::optional<Literal> EvaluateDataMovement(
    const ir::Instruction& instr, const std::vector<const Literal*>& ops) {
  const Shape& shape = instr.shape();
  const ir::Attributes& at = instr.attrs();
  const int esize = ir::ElementTypeSize(shape.type());
  const std::vector<int64_t> out_strides = ir::RowMajorStrides(shape.dims());
  Literal out(shape);
  switch (instr.opcode()) {
    case Opcode::kReshape:
      return Literal::FromBytes(shape, ops[0]->bytes());
    case Opcode::kIota: {
      const int64_t dim = at.iota_dimension;
      const int64_t stride = out_strides[dim], size = shape.dim(dim);
      const int64_t n = shape.ElementCount();
      ir::DispatchType(shape.type(), [&](auto tag) {
        using T = decltype(tag);
        T* o = out.data<T>();
        for (int64_t i = 0; i < n; ++i) {
          o[i] = ir::ConvertValue<T>((i / stride) % size);
        }
      });
      return out;
    }
    case Opcode::kConcatenate: {
      const int64_t dim = at.dimensions[0];
      int64_t start = 0;
      for (const Literal* op : ops) {
        const std::vector<int64_t>& dims = op->shape().dims();
        StridedCopy(dims, op->bytes().data(), 0, ir::RowMajorStrides(dims),
                    out.mutable_bytes().data(), start * out_strides[dim],
                    out_strides, esize);
        start += dims[dim];
      }
      return out;
    }
    default:
      break;
  }
  // The rest read one operand with per-dimension strides.
  const Shape& in = ops[0]->shape();
  const std::vector<int64_t> in_strides = ir::RowMajorStrides(in.dims());
  std::vector<int64_t> src_strides(shape.rank(), 0);
  int64_t src_offset = 0;
  switch (instr.opcode()) {
    case Opcode::kBroadcast:
      for (int i = 0; i < in.rank(); ++i) {
        src_strides[at.dimensions[i]] = in_strides[i];
      }
      break;
    case Opcode::kTranspose:
      for (int i = 0; i < shape.rank(); ++i) {
        src_strides[i] = in_strides[at.dimensions[i]];
      }
      break;
    case Opcode::kSlice:
      for (int i = 0; i < shape.rank(); ++i) {
        src_offset += at.slice[i].start * in_strides[i];
        src_strides[i] = at.slice[i].stride * in_strides[i];
      }
      break;
    case Opcode::kReverse:
      src_strides = in_strides;
      for (int64_t d : at.dimensions) {
        if (shape.dim(d) == 0) continue;
        src_offset += (shape.dim(d) - 1) * in_strides[d];
        src_strides[d] = -in_strides[d];
      }
      break;
    default:
      return std::nullopt;
  }
  StridedCopy(shape.dims(), ops[0]->bytes().data(), src_offset, src_strides,
              out.mutable_bytes().data(), 0, out_strides, esize);
  return out;
}

}  // namespace

bool IsEvaluable(Opcode opcode) {
  switch (opcode) {
    case Opcode::kAbs: case Opcode::kNegate: case Opcode::kSign:
    case Opcode::kNot: case Opcode::kPopcnt: case Opcode::kClz:
    case Opcode::kFloor: case Opcode::kCeil: case Opcode::kSqrt:
    case Opcode::kRoundAfz: case Opcode::kRoundEven: case Opcode::kIsFinite:
    case Opcode::kCopy: case Opcode::kConvert: case Opcode::kBitcastConvert:
    case Opcode::kAdd: case Opcode::kSubtract: case Opcode::kMultiply:
    case Opcode::kDivide: case Opcode::kRemainder: case Opcode::kMaximum:
    case Opcode::kMinimum: case Opcode::kAnd: case Opcode::kOr:
    case Opcode::kXor: case Opcode::kShiftLeft:
    case Opcode::kShiftRightLogical: case Opcode::kShiftRightArithmetic:
    case Opcode::kPower: case Opcode::kCompare: case Opcode::kSelect:
    case Opcode::kClamp: case Opcode::kBroadcast: case Opcode::kReshape:
    case Opcode::kTranspose: case Opcode::kIota: case Opcode::kSlice:
    case Opcode::kReverse: case Opcode::kConcatenate:
      return true;
    default:
      return false;
  }
}

std::optional<Literal> Evaluate(const ir::Instruction& instr,
                                const std::vector<const Literal*>& operands) {
  if (!IsEvaluable(instr.opcode()) || !instr.shape().IsArray() ||
      static_cast<int>(operands.size()) != instr.operand_count()) {
    return std::nullopt;
  }
  for (int i = 0; i < instr.operand_count(); ++i) {
    const Literal* op = operands[i];
    if (op == nullptr || op->shape() != instr.operand(i)->shape() ||
        !op->shape().IsArray() || !op->HoldsItsShape()) {
      return std::nullopt;
    }
  }
  if (ir::IsElementwise(instr.opcode())) {
    return EvaluateElementwise(instr, operands);
  }
  return EvaluateDataMovement(instr, operands);
}

}  // namespace kiln::passes
