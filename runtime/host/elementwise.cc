#include "runtime/host/elementwise.h"

#include "absl/container/inlined_vector.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include <omp.h>

#include "base/element_rules.h"
#include "base/type_dispatch.h"
#include "runtime/host/cancel.h"
#include "runtime/host/threads.h"
#include "runtime/host/vector_loops.h"

namespace kiln::host {
namespace {

using ir::ComparisonDirection;
using ir::ElementType;
using ir::kIsFloat;
using ir::kIsHalf;
using ir::Opcode;

using namespace ::kiln::element_rules;

template <typename T>
void UnaryLoop(Opcode op, const T* a, T* out, int64_t n) {
  using C = Calc<T>;
  if constexpr (kIsFloat<T>) {
    switch (op) {
#define KILN_FLOAT_UNARY(code, expr)                   \
  case Opcode::code:                                   \
    for (int64_t i = 0; i < n; ++i) {                  \
      C x = Ld(a[i]);                                  \
      out[i] = St<T>(static_cast<C>(expr));            \
    }                                                  \
    return;
      KILN_FLOAT_UNARY(kAbs, std::abs(x))
      KILN_FLOAT_UNARY(kCbrt, std::cbrt(x))
      KILN_FLOAT_UNARY(kCeil, std::ceil(x))
      KILN_FLOAT_UNARY(kCos, std::cos(x))
      KILN_FLOAT_UNARY(kExp, std::exp(x))
      KILN_FLOAT_UNARY(kExpm1, std::expm1(x))
      KILN_FLOAT_UNARY(kErf, std::erf(x))
      KILN_FLOAT_UNARY(kFloor, std::floor(x))
      KILN_FLOAT_UNARY(kLog, std::log(x))
      KILN_FLOAT_UNARY(kLog1p, std::log1p(x))
      KILN_FLOAT_UNARY(kLogistic, C(1) / (C(1) + std::exp(-x)))
      KILN_FLOAT_UNARY(kNegate, -x)
      KILN_FLOAT_UNARY(kRoundAfz, std::round(x))
      KILN_FLOAT_UNARY(kRoundEven, std::nearbyint(x))
      KILN_FLOAT_UNARY(kRsqrt, C(1) / std::sqrt(x))
      KILN_FLOAT_UNARY(kSign, (x != x ? x : (x > 0 ? C(1) : (x < 0 ? C(-1) : x))))
      KILN_FLOAT_UNARY(kSin, std::sin(x))
      KILN_FLOAT_UNARY(kSqrt, std::sqrt(x))
      KILN_FLOAT_UNARY(kTan, std::tan(x))
      KILN_FLOAT_UNARY(kTanh, std::tanh(x))
      KILN_FLOAT_UNARY(kAcos, std::acos(x))
      KILN_FLOAT_UNARY(kAcosh, std::acosh(x))
      KILN_FLOAT_UNARY(kAsin, std::asin(x))
      KILN_FLOAT_UNARY(kAsinh, std::asinh(x))
      KILN_FLOAT_UNARY(kAtanh, std::atanh(x))
      KILN_FLOAT_UNARY(kCosh, std::cosh(x))
      KILN_FLOAT_UNARY(kSinh, std::sinh(x))
#undef KILN_FLOAT_UNARY
      default:
        break;
    }
  } else if constexpr (kIsInt<T>) {
    switch (op) {
      case Opcode::kAbs:
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (std::is_signed_v<T>) {
            out[i] = a[i] < 0 ? WrapSub(T(0), a[i]) : a[i];
          } else {
            out[i] = a[i];
          }
        }
        return;
      case Opcode::kNegate:
        for (int64_t i = 0; i < n; ++i) out[i] = WrapSub(T(0), a[i]);
        return;
      case Opcode::kSign:
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>((a[i] > 0) - (a[i] < 0));
        return;
      case Opcode::kNot:
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(~a[i]);
        return;
      case Opcode::kPopcnt:
        for (int64_t i = 0; i < n; ++i) {
          out[i] = static_cast<T>(std::popcount(static_cast<Unsigned<T>>(a[i])));
        }
        return;
      case Opcode::kClz:
        for (int64_t i = 0; i < n; ++i) {
          out[i] = static_cast<T>(std::countl_zero(static_cast<Unsigned<T>>(a[i])));
        }
        return;
      default:
        break;
    }
  } else {  // pred
    if (op == Opcode::kNot) {
      for (int64_t i = 0; i < n; ++i) out[i] = !a[i];
      return;
    }
  }
  if (op == Opcode::kCopy) {
    std::memcpy(out, a, n * sizeof(T));
  }
}

template <typename T>
void BinaryLoop(Opcode op, const T* a, const T* b, T* out, int64_t n) {
  using C = Calc<T>;
  if constexpr (kIsFloat<T>) {
    switch (op) {
#define KILN_FLOAT_BINARY(code, expr)           \
  case Opcode::code:                            \
    for (int64_t i = 0; i < n; ++i) {           \
      C x = Ld(a[i]), y = Ld(b[i]);             \
      out[i] = St<T>(static_cast<C>(expr));     \
    }                                           \
    return;
      KILN_FLOAT_BINARY(kAdd, x + y)
      KILN_FLOAT_BINARY(kSubtract, x - y)
      KILN_FLOAT_BINARY(kMultiply, x * y)
      KILN_FLOAT_BINARY(kDivide, x / y)
      KILN_FLOAT_BINARY(kRemainder, std::fmod(x, y))
      KILN_FLOAT_BINARY(kPower, std::pow(x, y))
      KILN_FLOAT_BINARY(kAtan2, std::atan2(x, y))
      KILN_FLOAT_BINARY(kMaximum, FMax(x, y))
      KILN_FLOAT_BINARY(kMinimum, FMin(x, y))
#undef KILN_FLOAT_BINARY
      default:
        return;
    }
  } else if constexpr (kIsInt<T>) {
    switch (op) {
#define KILN_INT_BINARY(code, expr)                     \
  case Opcode::code:                                    \
    for (int64_t i = 0; i < n; ++i) out[i] = (expr);    \
    return;
      KILN_INT_BINARY(kAdd, WrapAdd(a[i], b[i]))
      KILN_INT_BINARY(kSubtract, WrapSub(a[i], b[i]))
      KILN_INT_BINARY(kMultiply, WrapMul(a[i], b[i]))
      KILN_INT_BINARY(kDivide, IntDiv(a[i], b[i]))
      KILN_INT_BINARY(kRemainder, IntRem(a[i], b[i]))
      KILN_INT_BINARY(kPower, IntPow(a[i], b[i]))
      KILN_INT_BINARY(kMaximum, a[i] > b[i] ? a[i] : b[i])
      KILN_INT_BINARY(kMinimum, a[i] < b[i] ? a[i] : b[i])
      KILN_INT_BINARY(kAnd, static_cast<T>(a[i] & b[i]))
      KILN_INT_BINARY(kOr, static_cast<T>(a[i] | b[i]))
      KILN_INT_BINARY(kXor, static_cast<T>(a[i] ^ b[i]))
      KILN_INT_BINARY(kShiftLeft, ShiftLeft(a[i], b[i]))
      KILN_INT_BINARY(kShiftRightLogical, ShiftRightLogical(a[i], b[i]))
      KILN_INT_BINARY(kShiftRightArithmetic, ShiftRightArith(a[i], b[i]))
#undef KILN_INT_BINARY
      default:
        return;
    }
  } else {  // pred
    switch (op) {
      case Opcode::kAnd: case Opcode::kMinimum:
        for (int64_t i = 0; i < n; ++i) out[i] = a[i] && b[i];
        return;
      case Opcode::kOr: case Opcode::kMaximum:
        for (int64_t i = 0; i < n; ++i) out[i] = a[i] || b[i];
        return;
      case Opcode::kXor:
        for (int64_t i = 0; i < n; ++i) out[i] = a[i] != b[i];
        return;
      default:
        return;
    }
  }
}

template <typename T>
void CompareLoop(ComparisonDirection d, const T* a, const T* b, bool* out,
                 int64_t n) {
  switch (d) {
#define KILN_CMP(code, op)                                                   \
  case ComparisonDirection::code:                                           \
    for (int64_t i = 0; i < n; ++i) out[i] = Ld(a[i]) op Ld(b[i]);           \
    return;
    KILN_CMP(kEq, ==)
    KILN_CMP(kNe, !=)
    KILN_CMP(kLt, <)
    KILN_CMP(kLe, <=)
    KILN_CMP(kGt, >)
    KILN_CMP(kGe, >=)
#undef KILN_CMP
  }
}

template <typename To>
void ConvertLoop(ElementType from, const uint8_t* in, To* out, int64_t n) {
  ir::DispatchType(from, [&](auto tag) {
    using From = decltype(tag);
    const From* a = reinterpret_cast<const From*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = ir::ConvertValue<To>(a[i]);
  });
}

// The f32 ops that have loops built for the CPU's vector unit.
bool RunVectorNode(const FusedNode& node, absl::Span<const uint8_t* const> args,
                   uint8_t* out, int64_t n) {
  auto f32 = [&](int k) { return reinterpret_cast<const float*>(args[k]); };
  float* o = reinterpret_cast<float*>(out);
  switch (ir::OpcodeCategory(node.op)) {
    case ir::OpCategory::kUnary:
      if (node.op == Opcode::kConvert) {
        return node.out_type == ElementType::kF32 &&
               vec::ConvertToF32(node.in_type, args[0], o, n);
      }
      return node.out_type == ElementType::kF32 && node.in_type == ElementType::kF32 &&
             vec::UnaryF32(node.op, f32(0), o, n);
    case ir::OpCategory::kBinary:
      if (node.op == Opcode::kCompare) {
        return node.in_type == ElementType::kF32 &&
               vec::CompareF32(node.direction, f32(0), f32(1), reinterpret_cast<bool*>(out), n);
      }
      return node.out_type == ElementType::kF32 && vec::BinaryF32(node.op, f32(0), f32(1), o, n);
    case ir::OpCategory::kTernary:
      if (node.op != Opcode::kSelect || node.out_type != ElementType::kF32) return false;
      vec::SelectF32(reinterpret_cast<const bool*>(args[0]), f32(1), f32(2), o, n);
      return true;
    default:
      return false;
  }
}

void RunNode(const FusedNode& node, absl::Span<const uint8_t* const> args,
             uint8_t* out, int64_t n) {
  const Opcode op = node.op;
  if (RunVectorNode(node, args, out, n)) return;
  switch (ir::OpcodeCategory(op)) {
    case ir::OpCategory::kUnary:
      if (op == Opcode::kConvert) {
        ir::DispatchType(node.out_type, [&](auto tag) {
          using T = decltype(tag);
          ConvertLoop<T>(node.in_type, args[0], reinterpret_cast<T*>(out), n);
        });
        return;
      }
      if (op == Opcode::kBitcastConvert || op == Opcode::kCopy) {
        std::memcpy(out, args[0], n * ir::ElementTypeSize(node.out_type));
        return;
      }
      if (op == Opcode::kIsFinite) {
        ir::DispatchType(node.in_type, [&](auto tag) {
          using T = decltype(tag);
          const T* a = reinterpret_cast<const T*>(args[0]);
          bool* o = reinterpret_cast<bool*>(out);
          if constexpr (kIsFloat<T>) {
            for (int64_t i = 0; i < n; ++i) o[i] = std::isfinite(Ld(a[i]));
          }
        });
        return;
      }
      ir::DispatchType(node.out_type, [&](auto tag) {
        using T = decltype(tag);
        UnaryLoop<T>(op, reinterpret_cast<const T*>(args[0]),
                     reinterpret_cast<T*>(out), n);
      });
      return;
    case ir::OpCategory::kBinary:
      if (op == Opcode::kCompare) {
        ir::DispatchType(node.in_type, [&](auto tag) {
          using T = decltype(tag);
          CompareLoop<T>(node.direction, reinterpret_cast<const T*>(args[0]),
                         reinterpret_cast<const T*>(args[1]),
                         reinterpret_cast<bool*>(out), n);
        });
        return;
      }
      ir::DispatchType(node.out_type, [&](auto tag) {
        using T = decltype(tag);
        BinaryLoop<T>(op, reinterpret_cast<const T*>(args[0]),
                      reinterpret_cast<const T*>(args[1]),
                      reinterpret_cast<T*>(out), n);
      });
      return;
    case ir::OpCategory::kTernary:
      ir::DispatchType(node.out_type, [&](auto tag) {
        using T = decltype(tag);
        T* o = reinterpret_cast<T*>(out);
        if (op == Opcode::kSelect) {
          const bool* p = reinterpret_cast<const bool*>(args[0]);
          const T* t = reinterpret_cast<const T*>(args[1]);
          const T* f = reinterpret_cast<const T*>(args[2]);
          for (int64_t i = 0; i < n; ++i) o[i] = p[i] ? t[i] : f[i];
        } else {  // clamp(lo, x, hi)
          const T* lo = reinterpret_cast<const T*>(args[0]);
          const T* x = reinterpret_cast<const T*>(args[1]);
          const T* hi = reinterpret_cast<const T*>(args[2]);
          for (int64_t i = 0; i < n; ++i) o[i] = St<T>(Clamp(Ld(lo[i]), Ld(x[i]), Ld(hi[i])));
        }
      });
      return;
    case ir::OpCategory::kOther:
      // Broadcast of a scalar: its (already expanded) operand is the value.
      // Broadcasts of larger inputs are expanded by ExpandBroadcast.
      std::memcpy(out, args[0], n * ir::ElementTypeSize(node.out_type));
      return;
  }
}

// Elements [start, start + n) of the broadcast `node` of `input` into `out`.
template <typename T>
void ExpandBroadcastOf(const FusedNode& node, const T* input, T* out, int64_t start, int64_t n) {
  const int64_t inner = node.broadcast_inner, size = node.broadcast_size;
  int64_t q = (start / inner) % size, r = start % inner;
  int64_t e = 0;
  if (inner == 1) {
    // The input repeated (a bias along the last dimension): the rest of the
    // current period, one whole period, then copies of what is already
    // written, doubling, so a short input costs a few calls, not one per
    // period.
    const int64_t head = std::min(n, size - q);
    std::memcpy(out, input + q, head * sizeof(T));
    e = head;
    if (e == n) return;
    const int64_t period_start = e;
    const int64_t whole = std::min(n - e, size);
    std::memcpy(out + e, input, whole * sizeof(T));
    e += whole;
    while (e < n) {
      // out[period_start, e) holds whole periods, so it continues itself.
      const int64_t run = std::min(n - e, e - period_start);
      std::memcpy(out + e, out + period_start, run * sizeof(T));
      e += run;
    }
    return;
  }
  while (e < n) {
    // A run of one input element repeated.
    const int64_t run = std::min(n - e, inner - r);
    std::fill(out + e, out + e + run, input[q]);
    e += run;
    r = 0;
    if (++q == size) q = 0;
  }
}

void ExpandBroadcast(const FusedNode& node, const uint8_t* input, uint8_t* out, int64_t start,
                     int64_t n) {
  switch (ir::ElementTypeSize(node.out_type)) {
    case 1:
      return ExpandBroadcastOf(node, input, out, start, n);
    case 2:
      return ExpandBroadcastOf(node, reinterpret_cast<const uint16_t*>(input),
                               reinterpret_cast<uint16_t*>(out), start, n);
    case 4:
      return ExpandBroadcastOf(node, reinterpret_cast<const uint32_t*>(input),
                               reinterpret_cast<uint32_t*>(out), start, n);
    default:
      return ExpandBroadcastOf(node, reinterpret_cast<const uint64_t*>(input),
                               reinterpret_cast<uint64_t*>(out), start, n);
  }
}

}  // namespace

namespace {

// `count` copies of the `size`-byte value at `value` from `dst` on, by
// doubling copies (a call of memcpy per element would cost more than the
// loop it feeds when groups run on chunks of a few thousand elements).
void FillRepeated(uint8_t* dst, const uint8_t* value, int size, int64_t count) {
  if (count <= 0) return;
  std::memcpy(dst, value, size);
  const int64_t total = count * size;
  for (int64_t filled = size; filled < total;) {
    const int64_t n = std::min(filled, total - filled);
    std::memcpy(dst + filled, dst, n);
    filled += n;
  }
}

// Runs elements [begin, end) of `group` with scratch of its own, writing
// output k's element e at outs[k] + (e - begin); `poll` says whether to
// check for cancellation (only the thread that runs the execution has its
// cancel check).
void RunFusedRange(const FusedGroup& group, absl::Span<const uint8_t* const> inputs,
                   absl::Span<uint8_t* const> outs, int64_t block, int64_t begin,
                   int64_t end, bool poll) {
  const int num_nodes = static_cast<int>(group.nodes.size());
  const int num_inputs = static_cast<int>(inputs.size());
  // Scratch: one block per node (8 bytes per element covers every type),
  // plus one per scalar input holding the broadcast value; on the stack
  // when small (a group on a few elements, as an eager op is).
  // Left uninitialized: every node writes its block before it is read.
  // Larger scratch is this thread's, kept from call to call: groups run
  // on chunks (reduction fusions) call this once per chunk, and
  // fresh memory each time costs more than the chunk's loop.
  const int64_t scratch_bytes = (num_nodes + num_inputs) * block * 8;
  alignas(64) uint8_t local[kLocalScratchBytes];
  uint8_t* scratch = local;
  if (scratch_bytes > kLocalScratchBytes) {
    thread_local std::unique_ptr<uint8_t[]> kept;
    thread_local int64_t kept_bytes = 0;
    if (kept_bytes < scratch_bytes) {
      kept.reset(new uint8_t[scratch_bytes]);
      kept_bytes = scratch_bytes;
    }
    scratch = kept.get();
  }
  auto node_block = [&](int i) { return scratch + i * block * 8; };
  auto input_block = [&](int k) { return scratch + (num_nodes + k) * block * 8; };
  for (int k = 0; k < num_inputs; ++k) {
    if (!group.input_is_scalar[k]) continue;
    const int size = ir::ElementTypeSize(group.input_types[k]);
    uint8_t* dst = input_block(k);
    FillRepeated(dst, inputs[k], size, block);
  }
  // output_of[i]: the output node i writes, or -1.
  absl::InlinedVector<int, 16> output_of(num_nodes, -1);
  if (group.outputs.empty()) {
    output_of[num_nodes - 1] = 0;
  } else {
    for (size_t k = 0; k < group.outputs.size(); ++k) {
      output_of[group.outputs[k]] = static_cast<int>(k);
    }
  }
  // Where each node's values are: its scratch block, its output, or, for a
  // broadcast of a scalar input inside the group, the input's expanded
  // block (nothing to run).
  absl::InlinedVector<const uint8_t*, 16> values(num_nodes);
  absl::InlinedVector<bool, 16> aliased(num_nodes, false);
  for (int i = 0; i < num_nodes; ++i) {
    const FusedNode& node = group.nodes[i];
    values[i] = node_block(i);
    if (node.op == ir::Opcode::kBroadcast && node.broadcast_size == 0 && output_of[i] < 0 &&
        node.args[0] < 0 && group.input_is_scalar[-1 - node.args[0]]) {
      values[i] = input_block(-1 - node.args[0]);
      aliased[i] = true;
    }
  }
  absl::InlinedVector<const uint8_t*, 4> args;
  for (int64_t start = begin; start < end; start += block) {
    // A check every 64 blocks: well under a millisecond of work.
    if (poll && start > begin && (start - begin) % (64 * block) == 0 && Cancelled()) return;
    const int64_t n = std::min(block, end - start);
    for (int i = 0; i < num_nodes; ++i) {
      const FusedNode& node = group.nodes[i];
      if (aliased[i]) continue;
      const int size = ir::ElementTypeSize(node.out_type);
      uint8_t* dst =
          output_of[i] >= 0 ? outs[output_of[i]] + (start - begin) * size : node_block(i);
      values[i] = dst;
      if (node.broadcast_size > 0) {
        // Reads its input, which the group never writes (not a scalar,
        // and not the output's shape unless the broadcast is the identity).
        ExpandBroadcast(node, inputs[-1 - node.args[0]], dst, start, n);
        continue;
      }
      args.clear();
      for (int a : node.args) {
        if (a >= 0) {
          args.push_back(values[a]);
        } else {
          const int k = -1 - a;
          args.push_back(group.input_is_scalar[k]
                             ? input_block(k)
                             : inputs[k] + start * ir::ElementTypeSize(
                                                       group.input_types[k]));
        }
      }
      if (output_of[i] >= 0 && std::find(args.begin(), args.end(), dst) != args.end()) {
        // The output is written over one of its own inputs (in place): the
        // loops take distinct arrays, so go through the node's scratch.
        RunNode(node, args, node_block(i), n);
        std::memcpy(dst, node_block(i), n * size);
        continue;
      }
      RunNode(node, args, dst, n);
    }
  }
}

}  // namespace

void RunFusedGroup(const FusedGroup& group, absl::Span<const uint8_t* const> inputs,
                   absl::Span<uint8_t* const> outs) {
  // Blocks of at most kBlock elements; a small group needs only its size
  // (an op on one element would otherwise fill and clear whole blocks).
  const int64_t count = group.element_count;
  const int64_t block = std::clamp<int64_t>(count, 1, kBlock);
  const int64_t blocks = (count + block - 1) / block;
  // Large groups split their blocks over the compute threads (the OpenMP
  // team oneDNN also runs on, sized by runtime::ComputeThreads).
  int threads = 1;
  if (count >= kParallelElements) {
    UseComputeThreads();
    threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  }
  if (threads <= 1) {
    RunFusedRange(group, inputs, outs, block, 0, count, /*poll=*/true);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t first = blocks * t / n * block;
    const int64_t last = std::min(count, blocks * (t + 1) / n * block);
    absl::InlinedVector<uint8_t*, 4> mine(outs.begin(), outs.end());
    for (size_t k = 0; k < mine.size(); ++k) {
      const int index = group.outputs.empty() ? static_cast<int>(group.nodes.size()) - 1
                                              : group.outputs[k];
      mine[k] += first * ir::ElementTypeSize(group.nodes[index].out_type);
    }
    RunFusedRange(group, inputs, mine, block, first, last, /*poll=*/t == 0);
  }
}

void RunFusedGroupRange(const FusedGroup& group, absl::Span<const uint8_t* const> inputs,
                        absl::Span<uint8_t* const> outs, int64_t begin, int64_t end, bool poll) {
  const int64_t block = std::clamp<int64_t>(end - begin, 1, kBlock);
  RunFusedRange(group, inputs, outs, block, begin, end, poll);
}

}  // namespace kiln::host
