// The scalar binary ops that reducers, window reductions and scatter
// combiners apply on their fast paths (see MatchScalarBinary).
#ifndef KILN_RUNTIME_HOST_REDUCER_OPS_H_
#define KILN_RUNTIME_HOST_REDUCER_OPS_H_

#include <cmath>
#include <type_traits>

#include "compiler/ir/opcode.h"
#include "base/type_dispatch.h"

namespace kiln::host {

// Accumulator type of a storage type: half types accumulate in float.
template <typename T>
using Accumulator = std::conditional_t<ir::kIsHalf<T>, float, T>;

// op(a, b) for add, multiply, maximum, minimum, and, or; NaN propagates
// through maximum and minimum.
template <typename A>
inline A ApplyReducerOp(ir::Opcode op, A a, A b) {
  switch (op) {
    case ir::Opcode::kAdd:
      if constexpr (std::is_same_v<A, bool>) return a || b;
      else return static_cast<A>(a + b);
    case ir::Opcode::kMultiply:
      if constexpr (std::is_same_v<A, bool>) return a && b;
      else return static_cast<A>(a * b);
    // As elementwise maximum and minimum: NaN wins, and +0 is above -0.
    case ir::Opcode::kMaximum:
      if constexpr (std::is_floating_point_v<A>) {
        if (a != a || b != b) return a != a ? a : b;
        if (a == b) return std::signbit(a) ? b : a;
      }
      return a > b ? a : b;
    case ir::Opcode::kMinimum:
      if constexpr (std::is_floating_point_v<A>) {
        if (a != a || b != b) return a != a ? a : b;
        if (a == b) return std::signbit(a) ? a : b;
      }
      return a < b ? a : b;
    case ir::Opcode::kAnd:
      if constexpr (std::is_same_v<A, bool>) return a && b;
      else if constexpr (std::is_integral_v<A>) return static_cast<A>(a & b);
      else return a;
    case ir::Opcode::kOr:
      if constexpr (std::is_same_v<A, bool>) return a || b;
      else if constexpr (std::is_integral_v<A>) return static_cast<A>(a | b);
      else return a;
    default:
      return a;
  }
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_REDUCER_OPS_H_
