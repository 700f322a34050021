#include "runtime/gpu/codegen.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <cctype>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/format.h"
#include "base/status_macros.h"
#include "runtime/host/kernel.h"

namespace kiln::gpu {
namespace {

using ir::Computation;
using ir::Instruction;
using ir::Opcode;
using ir::Shape;

constexpr char kPreamble[] =
#include "runtime/gpu/preamble.cu.inc"
    ;

bool IsHalf(ElementType t) { return t == ElementType::kBF16 || t == ElementType::kF16; }

std::string StorageType(ElementType t) {
  switch (t) {
    case ElementType::kPred: return "bool";
    case ElementType::kS8: return "signed char";
    case ElementType::kS16: return "short";
    case ElementType::kS32: return "int";
    case ElementType::kS64: return "long long";
    case ElementType::kU8: return "unsigned char";
    case ElementType::kU16: return "unsigned short";
    case ElementType::kU32: return "unsigned";
    case ElementType::kU64: return "kiln_u64";
    case ElementType::kBF16: case ElementType::kF16: return "unsigned short";
    case ElementType::kF32: return "float";
    case ElementType::kF64: return "double";
    default: return "unsigned char";
  }
}

const char* HalfName(ElementType t) { return t == ElementType::kBF16 ? "bf16" : "f16"; }

// Storage to value.
std::string Load(ElementType t, const std::string& x) {
  if (IsHalf(t)) return absl::StrCat("kiln_", HalfName(t), "_to_f(", x, ")");
  return x;
}
// Value to storage.
std::string Store(ElementType t, const std::string& x) {
  if (IsHalf(t)) return absl::StrCat("kiln_f_to_", HalfName(t), "(", x, ")");
  return x;
}
// A float result rounded to the half type it stands for.
std::string Round(ElementType t, const std::string& x) {
  if (IsHalf(t)) return absl::StrCat("kiln_round_", HalfName(t), "(", x, ")");
  return x;
}

const char* IntSuffix(ElementType t) {
  switch (t) {
    case ElementType::kS8: return "s8";
    case ElementType::kS16: return "s16";
    case ElementType::kS32: return "s32";
    case ElementType::kS64: return "s64";
    case ElementType::kU8: return "u8";
    case ElementType::kU16: return "u16";
    case ElementType::kU32: return "u32";
    default: return "u64";
  }
}

// A value of type `from` as a value of type `to`, with ConvertValue's rules.
std::string Convert(ElementType from, ElementType to, const std::string& x) {
  if (from == to) return x;
  const std::string v = ValueType(to);
  if (to == ElementType::kPred) {
    return absl::StrCat("((", x, ") != (", ValueType(from), ")0)");
  }
  if (IsFloatType(from) && IsIntegralType(to)) {
    return absl::StrCat("kiln_ftoi_", IntSuffix(to), "((double)(", x, "))");
  }
  if (IsHalf(to)) {
    if (from == ElementType::kF64) return Round(to, absl::StrCat("kiln_round_odd(", x, ")"));
    return Round(to, absl::StrCat("(float)(", x, ")"));
  }
  return absl::StrCat("((", v, ")(", x, "))");
}

// Row-major linear index of `idx` (one expression per dimension) in `dims`.
std::string Linear(const std::vector<int64_t>& dims, const std::vector<std::string>& idx) {
  if (dims.empty()) return "0";
  std::string s = absl::StrCat("(", idx[0], ")");
  for (size_t d = 1; d < dims.size(); ++d) {
    s = absl::StrCat("(", s, " * ", dims[d], "LL + (", idx[d], "))");
  }
  return s;
}

// Declarations of `prefix0..` from the linear index `linear` in `dims`.
std::string Decompose(const std::vector<int64_t>& dims, const std::string& linear,
                      const std::string& prefix) {
  if (dims.empty()) return "";
  std::string s = absl::StrCat("{ long long rem_ = ", linear, ";\n");
  std::string decl;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (d == 0) {
      absl::StrAppend(&s, "  ", prefix, d, " = rem_; }\n");
    } else {
      absl::StrAppend(&s, "  ", prefix, d, " = rem_ % ", dims[d], "LL; rem_ /= ", dims[d],
                      "LL;\n");
    }
  }
  for (size_t d = 0; d < dims.size(); ++d) absl::StrAppend(&decl, "long long ", prefix, d, ";\n");
  return decl + s;
}

std::vector<std::string> Names(const std::string& prefix, size_t n) {
  std::vector<std::string> v;
  for (size_t i = 0; i < n; ++i) v.push_back(absl::StrCat(prefix, i));
  return v;
}

// A NaN element of a float literal, with its sign and payload bits.
std::string NanConstant(ElementType type, const ir::Literal& lit, int64_t i) {
  uint64_t bits = 0;
  switch (type) {
    case ElementType::kF64:
      std::memcpy(&bits, lit.bytes().data() + 8 * i, 8);
      return absl::StrCat("__longlong_as_double(", bits, "ull)");
    case ElementType::kF32:
      std::memcpy(&bits, lit.bytes().data() + 4 * i, 4);
      return absl::StrCat("__uint_as_float(", bits, "u)");
    default:
      std::memcpy(&bits, lit.bytes().data() + 2 * i, 2);
      return Load(type, absl::StrCat("(unsigned short)", bits));
  }
}

// A literal of `type` holding `value`.
std::string Constant(ElementType type, const ir::Literal& lit, int64_t i) {
  if (type == ElementType::kPred) return lit.GetAsInt64(i) != 0 ? "true" : "false";
  if (IsFloatType(type)) {
    const double d = lit.GetAsDouble(i);
    const std::string v = ValueType(type);
    if (d != d) return NanConstant(type, lit, i);
    if (d == INFINITY) return absl::StrCat("((", v, ")INFINITY)");
    if (d == -INFINITY) return absl::StrCat("(-(", v, ")INFINITY)");
    if (d == 0) return absl::StrCat("((", v, ")", std::signbit(d) ? "-0.0" : "0.0", ")");
    // Shortest round-trip text of the double is exact for every float type
    // it came from.
    return absl::StrCat("((", v, ")", FormatShortest(d), ")");
  }
  if (IsUnsignedIntType(type)) {
    return absl::StrCat("((", ValueType(type), ")",
                        static_cast<uint64_t>(lit.GetAsInt64(i)), "ull)");
  }
  const int64_t v = lit.GetAsInt64(i);
  if (v == INT64_MIN) return "((long long)(-9223372036854775807LL - 1))";
  return absl::StrCat("((", ValueType(type), ")", v, "LL)");
}

const char* CompareOp(ir::ComparisonDirection d) {
  switch (d) {
    case ir::ComparisonDirection::kEq: return "==";
    case ir::ComparisonDirection::kNe: return "!=";
    case ir::ComparisonDirection::kLt: return "<";
    case ir::ComparisonDirection::kLe: return "<=";
    case ir::ComparisonDirection::kGt: return ">";
    case ir::ComparisonDirection::kGe: return ">=";
  }
  return "==";
}

// Float math by name, picking the float or double function.
std::string Math(ElementType t, const char* fn, const std::vector<std::string>& args) {
  const bool single = t != ElementType::kF64;
  return absl::StrCat(fn, single ? "f" : "", "(", absl::StrJoin(args, ", "), ")");
}

// The value of an elementwise instruction from its operands' values.
absl::StatusOr<std::string> ScalarExpr(const Instruction& instr,
                                       const std::vector<std::string>& a) {
  const Opcode op = instr.opcode();
  const ElementType t = instr.shape().type();
  const ElementType in = instr.operand_count() > 0 ? instr.operand(0)->shape().type() : t;
  const std::string v = ValueType(t);
  if (op == Opcode::kConvert) return Convert(in, t, a[0]);
  if (op == Opcode::kCopy) return a[0];
  if (op == Opcode::kBitcastConvert) {
    if (ir::ElementTypeSize(in) != ir::ElementTypeSize(t)) {
      return absl::UnimplementedError("bitcast-convert between sizes inside a scalar computation");
    }
    // Through the storage bits.
    return Load(t, absl::StrCat("kiln_bitcast<", StorageType(t), ">((", StorageType(in), ")(",
                                Store(in, a[0]), "))"));
  }
  if (op == Opcode::kCompare) {
    return absl::StrCat("((", a[0], ") ", CompareOp(instr.attrs().direction), " (", a[1], "))");
  }
  if (op == Opcode::kSelect) return absl::StrCat("((", a[0], ") ? (", a[1], ") : (", a[2], "))");
  if (op == Opcode::kClamp) {
    // clamp(lo, x, hi) = min(max(x, lo), hi).
    const std::string mx = IsFloatType(t) ? "kiln_fmax" : "kiln_imax";
    const std::string mn = IsFloatType(t) ? "kiln_fmin" : "kiln_imin";
    if (t == ElementType::kPred) {
      return absl::StrCat("(((", a[1], ") || (", a[0], ")) && (", a[2], "))");
    }
    return absl::StrCat(mn, "<", v, ">(", mx, "<", v, ">(", a[1], ", ", a[0], "), ", a[2], ")");
  }
  if (op == Opcode::kIsFinite) return absl::StrCat("(bool)isfinite(", a[0], ")");
  if (t == ElementType::kPred) {
    switch (op) {
      case Opcode::kNot: return absl::StrCat("(!(", a[0], "))");
      case Opcode::kAnd: case Opcode::kMinimum:
        return absl::StrCat("((", a[0], ") && (", a[1], "))");
      case Opcode::kOr: case Opcode::kMaximum:
        return absl::StrCat("((", a[0], ") || (", a[1], "))");
      case Opcode::kXor: return absl::StrCat("((", a[0], ") != (", a[1], "))");
      default: break;
    }
  } else if (IsFloatType(t)) {
    const auto& x = a[0];
    std::string e;
    switch (op) {
      case Opcode::kAbs: e = Math(t, "fabs", {x}); break;
      case Opcode::kCbrt: e = Math(t, "cbrt", {x}); break;
      case Opcode::kCeil: e = Math(t, "ceil", {x}); break;
      case Opcode::kCos: e = Math(t, "cos", {x}); break;
      case Opcode::kExp: e = Math(t, "exp", {x}); break;
      case Opcode::kExpm1: e = Math(t, "expm1", {x}); break;
      case Opcode::kFloor: e = Math(t, "floor", {x}); break;
      case Opcode::kLog: e = Math(t, "log", {x}); break;
      case Opcode::kLog1p: e = Math(t, "log1p", {x}); break;
      case Opcode::kErf: e = Math(t, "erf", {x}); break;
      case Opcode::kLogistic:
        e = absl::StrCat("((", v, ")1 / ((", v, ")1 + ", Math(t, "exp", {"-(" + x + ")"}), "))");
        break;
      case Opcode::kNegate: e = absl::StrCat("(-(", x, "))"); break;
      case Opcode::kRoundAfz: e = Math(t, "round", {x}); break;
      case Opcode::kRoundEven: e = Math(t, "rint", {x}); break;
      case Opcode::kRsqrt: e = absl::StrCat("((", v, ")1 / ", Math(t, "sqrt", {x}), ")"); break;
      case Opcode::kSign: e = absl::StrCat("kiln_fsign<", v, ">(", x, ")"); break;
      case Opcode::kSin: e = Math(t, "sin", {x}); break;
      case Opcode::kSqrt: e = Math(t, "sqrt", {x}); break;
      case Opcode::kTan: e = Math(t, "tan", {x}); break;
      case Opcode::kTanh: e = Math(t, "tanh", {x}); break;
      case Opcode::kAcos: e = Math(t, "acos", {x}); break;
      case Opcode::kAcosh: e = Math(t, "acosh", {x}); break;
      case Opcode::kAsin: e = Math(t, "asin", {x}); break;
      case Opcode::kAsinh: e = Math(t, "asinh", {x}); break;
      case Opcode::kAtanh: e = Math(t, "atanh", {x}); break;
      case Opcode::kCosh: e = Math(t, "cosh", {x}); break;
      case Opcode::kSinh: e = Math(t, "sinh", {x}); break;
      case Opcode::kAdd: e = absl::StrCat("((", x, ") + (", a[1], "))"); break;
      case Opcode::kSubtract: e = absl::StrCat("((", x, ") - (", a[1], "))"); break;
      case Opcode::kMultiply: e = absl::StrCat("((", x, ") * (", a[1], "))"); break;
      case Opcode::kDivide: e = absl::StrCat("((", x, ") / (", a[1], "))"); break;
      case Opcode::kRemainder: e = Math(t, "fmod", {x, a[1]}); break;
      case Opcode::kPower: e = Math(t, "pow", {x, a[1]}); break;
      case Opcode::kAtan2: e = Math(t, "atan2", {x, a[1]}); break;
      case Opcode::kMaximum: e = absl::StrCat("kiln_fmax<", v, ">(", x, ", ", a[1], ")"); break;
      case Opcode::kMinimum: e = absl::StrCat("kiln_fmin<", v, ">(", x, ", ", a[1], ")"); break;
      default: break;
    }
    if (!e.empty()) return Round(t, e);
  } else {
    const auto& x = a[0];
    const std::string y = a.size() > 1 ? a[1] : "";
    auto call = [&](const char* fn, bool binary) {
      return absl::StrCat(fn, "<", v, ">(", x, binary ? ", " + y : "", ")");
    };
    switch (op) {
      case Opcode::kAbs: return call("kiln_iabs", false);
      case Opcode::kNegate: return absl::StrCat("kiln_sub<", v, ">(0, ", x, ")");
      case Opcode::kSign:
        return absl::StrCat("((", v, ")(((", x, ") > 0) - ((", x, ") < 0)))");
      case Opcode::kNot: return absl::StrCat("((", v, ")~(", x, "))");
      case Opcode::kPopcnt: return call("kiln_popcnt", false);
      case Opcode::kClz: return call("kiln_clz", false);
      case Opcode::kAdd: return call("kiln_add", true);
      case Opcode::kSubtract: return call("kiln_sub", true);
      case Opcode::kMultiply: return call("kiln_mul", true);
      case Opcode::kDivide: return call("kiln_div", true);
      case Opcode::kRemainder: return call("kiln_rem", true);
      case Opcode::kPower: return call("kiln_ipow", true);
      case Opcode::kMaximum: return call("kiln_imax", true);
      case Opcode::kMinimum: return call("kiln_imin", true);
      case Opcode::kAnd: return absl::StrCat("((", v, ")((", x, ") & (", y, ")))");
      case Opcode::kOr: return absl::StrCat("((", v, ")((", x, ") | (", y, ")))");
      case Opcode::kXor: return absl::StrCat("((", v, ")((", x, ") ^ (", y, ")))");
      case Opcode::kShiftLeft: return call("kiln_shl", true);
      case Opcode::kShiftRightLogical: return call("kiln_shrl", true);
      case Opcode::kShiftRightArithmetic: return call("kiln_shra", true);
      default: break;
    }
  }
  return absl::UnimplementedError(absl::StrCat("the GPU code generator has no ",
                                               ir::OpcodeName(op), " for ",
                                               ElementTypeName(t)));
}

bool IsComputedElementwise(Opcode op) {
  switch (ir::OpcodeCategory(op)) {
    case ir::OpCategory::kUnary: case ir::OpCategory::kBinary: case ir::OpCategory::kTernary:
      return op != Opcode::kBitcastConvert && op != Opcode::kCopy;
    default: return false;
  }
}

// The shapes of the arrays an instruction writes.
std::vector<Shape> OutputShapes(const Instruction& instr) {
  if (instr.shape().IsTuple()) return instr.shape().tuple_shapes();
  return {instr.shape()};
}

// The kernel parameters: the buffers it reads, then those it writes.
std::string Params(const std::vector<const Instruction*>& inputs, const Instruction& instr) {
  std::vector<std::string> p;
  for (size_t k = 0; k < inputs.size(); ++k) {
    p.push_back(absl::StrCat("const ", StorageType(inputs[k]->shape().type()),
                             "* __restrict__ a", k));
  }
  const std::vector<Shape> outs = OutputShapes(instr);
  for (size_t k = 0; k < outs.size(); ++k) {
    p.push_back(absl::StrCat(StorageType(outs[k].type()), "* __restrict__ r", k));
  }
  return absl::StrJoin(p, ", ");
}

// A kernel whose threads each run `body` for the linear indices below
// `threads`, with `i` the index and o0.. its multi-index in `dims`.
std::string GridKernel(const std::string& name, const std::string& params,
                       const std::vector<int64_t>& dims, int64_t threads,
                       const std::string& body) {
  return absl::StrCat(
      "extern \"C\" __global__ void ", name, "(", params, ") {\n",
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < ", threads,
      "LL; i += (long long)gridDim.x * blockDim.x) {\n", Decompose(dims, "i", "o"), body,
      "  }\n}\n\n");
}

int64_t Count(const std::vector<int64_t>& dims);

// A reduction each output element computes: `length` terms, each made by
// `term` from the loop index t (code that may `continue` to skip the term,
// then declares `const <type> x`), folded by `combine` after `init`.
struct Fold {
  std::string type;
  std::string init;
  int64_t length = 0;
  std::string term;
  // Code that sets `dst` to `a` combined with `b`.
  std::function<std::string(const std::string& dst, const std::string& a,
                            const std::string& b)> combine;
  std::string store;  // stores `acc` as output i
};

// Where one thread folds all terms of its output element.
std::string ThreadFold(const Fold& f) {
  return absl::StrCat("    ", f.type, " acc = ", f.init, ";\n    for (long long t = 0; t < ",
                      f.length, "LL; ++t) {\n", f.term, "      ", f.combine("acc", "acc", "x"),
                      "\n    }\n", f.store);
}

constexpr int kFoldBlock = 256;

// Whether a block of threads should share each output's terms: few
// outputs with long folds would leave most of the GPU idle otherwise.
bool UseBlockFold(int64_t outputs, int64_t length) {
  return length >= 512 && outputs < 32768;
}

// A kernel where each block folds one output element (grid-stride over
// outputs): the threads take every kFoldBlock-th term, then combine their
// partial results in a tree. `init` is counted once, at the end, so it
// need not be an identity of `combine`.
std::string BlockFoldKernel(const std::string& name, const std::string& params,
                            const std::vector<int64_t>& dims, const Fold& f) {
  const std::string b = absl::StrCat(kFoldBlock);
  return absl::StrCat(
      "extern \"C\" __global__ void __launch_bounds__(", b, ") ", name, "(", params, ") {\n",
      "  __shared__ ", f.type, " part[", b, "];\n  __shared__ bool have[", b, "];\n",
      "  const int tid = threadIdx.x;\n",
      "  for (long long i = blockIdx.x; i < ", Count(dims), "LL; i += gridDim.x) {\n",
      Decompose(dims, "i", "o"), "    ", f.type, " acc = ", f.init, ";\n    bool got = false;\n",
      "    for (long long t = tid; t < ", f.length, "LL; t += ", b, ") {\n", f.term,
      "      if (got) { ", f.combine("acc", "acc", "x"), " } else { acc = x; got = true; }\n",
      "    }\n    part[tid] = acc;\n    have[tid] = got;\n    __syncthreads();\n",
      "    for (int s = ", kFoldBlock / 2, "; s > 0; s >>= 1) {\n",
      "      if (tid < s && have[tid + s]) {\n",
      "        if (have[tid]) { ", f.combine("part[tid]", "part[tid]", "part[tid + s]"),
      " } else { part[tid] = part[tid + s]; have[tid] = true; }\n      }\n",
      "      __syncthreads();\n    }\n",
      "    if (tid == 0) {\n      acc = ", f.init, ";\n      if (have[0]) { ",
      f.combine("acc", "acc", "part[0]"), " }\n", f.store, "    }\n    __syncthreads();\n",
      "  }\n}\n\n");
}

// The value of operand `k` of `instr` at the output position (multi-index
// o0.. of the output, linear index i), for elementwise instructions.
std::string SameShapeOperand(const Instruction& instr, int k) {
  const Shape& s = instr.operand(k)->shape();
  const bool scalar = s.rank() == 0 && instr.shape().rank() > 0;
  return Load(s.type(), absl::StrCat("a", k, scalar ? "[0]" : "[i]"));
}

// The value of elementwise `instr` at linear index i of the kernel's
// output (whose shape it has), with the producers in `fused` computed in
// place and every other operand read from a kernel input, added to
// `inputs` once.
absl::StatusOr<std::string> FusedValue(const Instruction& instr,
                                       const absl::flat_hash_set<const Instruction*>& fused,
                                       std::vector<const Instruction*>& inputs) {
  auto input = [&](const Instruction* p) {
    auto it = std::find(inputs.begin(), inputs.end(), p);
    const size_t k = it - inputs.begin();
    if (it == inputs.end()) inputs.push_back(p);
    return absl::StrCat("a", k);
  };
  const std::vector<std::string> o = Names("o", instr.shape().rank());
  if (instr.opcode() == Opcode::kBroadcast) {
    const Instruction* operand = instr.operand(0);
    std::vector<std::string> idx;
    for (int64_t d : instr.attrs().dimensions) idx.push_back(o[d]);
    return Load(operand->shape().type(),
                absl::StrCat(input(operand), "[", Linear(operand->shape().dims(), idx), "]"));
  }
  if (instr.opcode() == Opcode::kIota) {
    return Convert(ElementType::kS64, instr.shape().type(), o[instr.attrs().iota_dimension]);
  }
  std::vector<std::string> args;
  for (const Instruction* p : instr.operands()) {
    if (fused.contains(p)) {
      ASSIGN_OR_RETURN(std::string value, FusedValue(*p, fused, inputs));
      args.push_back(std::move(value));
      continue;
    }
    const bool scalar = p->shape().rank() == 0 && instr.shape().rank() > 0;
    args.push_back(Load(p->shape().type(), absl::StrCat(input(p), scalar ? "[0]" : "[i]")));
  }
  return ScalarExpr(instr, args);
}

std::string ReadAt(const Instruction& instr, int k, const std::vector<std::string>& idx) {
  const Shape& s = instr.operand(k)->shape();
  return Load(s.type(), absl::StrCat("a", k, "[", Linear(s.dims(), idx), "]"));
}

std::string Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return absl::StrCat(n, "LL");
}

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Declares v<prefix>0.. for the window positions of `windows` visited by
// loop variable `q`, the operand position p<d> and `valid` (false in the
// padding); `out` names the output index of each window dimension.
std::string WindowPosition(const std::vector<ir::WindowDim>& window,
                           const std::vector<int64_t>& in_dims,
                           const std::vector<std::string>& out) {
  std::vector<int64_t> sizes;
  for (const auto& w : window) sizes.push_back(w.size);
  std::string s = Decompose(sizes, "q", "w");
  absl::StrAppend(&s, "bool valid = true;\n");
  for (size_t d = 0; d < window.size(); ++d) {
    const ir::WindowDim& w = window[d];
    absl::StrAppend(&s, "long long p", d, " = (", out[d], ") * ", w.stride, "LL - ", w.pad_lo,
                    "LL + w", d, " * ", w.window_dilation, "LL;\n");
    if (w.base_dilation != 1) {
      absl::StrAppend(&s, "if (p", d, " < 0 || p", d, " % ", w.base_dilation,
                      "LL != 0) valid = false; else p", d, " /= ", w.base_dilation, "LL;\n");
    }
    absl::StrAppend(&s, "if (p", d, " < 0 || p", d, " >= ", in_dims[d], "LL) valid = false;\n");
  }
  return s;
}

// The body of a kernel folding `n` operands at once with the reducer `fn`
// (variadic reduce, reduce-window): accumulators acc<k> start at the init
// operands (a<n+k>[0]); for each of `length` terms, `term` runs with the
// index t, and value(k) is the k-th operand's value; the results are
// stored as outputs r<k>.
std::string VariadicFold(const Instruction& instr, int n, const std::string& fn,
                         const std::string& length, const std::string& term,
                         const std::function<std::string(int)>& value) {
  std::string body, values;
  std::vector<std::string> args, outs;
  for (int k = 0; k < n; ++k) {
    const ElementType et = instr.operand(k)->shape().type();
    absl::StrAppend(&body, "    ", ValueType(et), " acc", k, " = ",
                    Load(et, absl::StrCat("a", n + k, "[0]")), ";\n");
    // The reducer's arguments are copies: it writes the accumulators.
    absl::StrAppend(&values, "      const ", ValueType(et), " in", k, " = acc", k, ";\n",
                    "      const ", ValueType(et), " x", k, " = ", value(k), ";\n");
  }
  for (int k = 0; k < n; ++k) {
    args.push_back(absl::StrCat("in", k));
    outs.push_back(absl::StrCat("&acc", k));
  }
  for (int k = 0; k < n; ++k) args.push_back(absl::StrCat("x", k));
  absl::StrAppend(&body, "    for (long long t = 0; t < ", length, "; ++t) {\n", term);
  body += values;
  absl::StrAppend(&body, "      ", fn, "(", absl::StrJoin(args, ", "), ", ",
                  absl::StrJoin(outs, ", "), ");\n    }\n");
  for (int k = 0; k < n; ++k) {
    absl::StrAppend(&body, "    r", k, "[i] = ",
                    Store(instr.operand(k)->shape().type(), absl::StrCat("acc", k)), ";\n");
  }
  return body;
}

// The product of two accumulator values (integers wrap).
std::string Product2(ElementType acc, const std::string& a, const std::string& b) {
  if (acc == ElementType::kS64) return absl::StrCat("kiln_mul<long long>(", a, ", ", b, ")");
  return absl::StrCat("(", a, ") * (", b, ")");
}

// A sum of `length` products (dot, convolution), from zero.
Fold SumOfProducts(ElementType acc, int64_t length, std::string term, std::string store) {
  const bool wrap = acc == ElementType::kS64;
  return Fold{ValueType(acc), "0", length, std::move(term),
              [wrap](const std::string& dst, const std::string& a, const std::string& b) {
                return wrap ? absl::StrCat(dst, " = kiln_add<long long>(", a, ", ", b, ");")
                            : absl::StrCat(dst, " = ", a, " + ", b, ";");
              },
              std::move(store)};
}

}  // namespace

std::string ValueType(ElementType type) {
  if (IsHalf(type)) return "float";
  if (type == ElementType::kU64) return "kiln_u64";
  return StorageType(type);
}

bool HasKernel(const Instruction& instr) {
  if (IsComputedElementwise(instr.opcode())) return true;
  switch (instr.opcode()) {
    case Opcode::kIota: case Opcode::kBroadcast: case Opcode::kTranspose: case Opcode::kSlice:
    case Opcode::kDynamicSlice: case Opcode::kDynamicUpdateSlice: case Opcode::kConcatenate:
    case Opcode::kPad: case Opcode::kReverse: case Opcode::kReduce: case Opcode::kReduceWindow:
    case Opcode::kSelectAndScatter: case Opcode::kDot: case Opcode::kConvolution:
    case Opcode::kGather:
      return true;
    default:
      return false;
  }
}

KernelEmitter::KernelEmitter() {
  source_ = kPreamble;
  absl::StrAppend(&source_,
                  "template <class To, class From> __device__ inline To kiln_bitcast(From f) {\n"
                  "  To t; memcpy(&t, &f, sizeof(To)); return t;\n}\n\n");
}

absl::StatusOr<std::string> KernelEmitter::Reducer(const Computation& c, ElementType type) {
  const bool half = type == ElementType::kBF16 || type == ElementType::kF16;
  const std::optional<Opcode> op = half ? host::MatchScalarBinary(c) : std::nullopt;
  if (!op.has_value() || (*op != Opcode::kAdd && *op != Opcode::kMultiply)) return Function(c);
  const std::string name = *op == Opcode::kAdd ? "kiln_acc_add" : "kiln_acc_multiply";
  if (accumulators_.insert(name).second) {
    absl::StrAppend(&source_, "__device__ __forceinline__ void ", name,
                    "(float a, float b, float* out) { *out = a ",
                    *op == Opcode::kAdd ? "+" : "*", " b; }\n\n");
  }
  return name;
}

absl::StatusOr<std::string> KernelEmitter::Function(const Computation& c) {
  if (auto it = functions_.find(&c); it != functions_.end()) return it->second;
  const std::string name = absl::StrCat("kiln_fn", functions_.size());
  std::vector<std::string> params;
  for (const Instruction* p : c.parameters()) {
    if (!p->shape().IsScalar()) {
      return absl::UnimplementedError(absl::StrCat(
          "the GPU code generator needs scalar parameters in computation ", c.name()));
    }
    params.push_back(absl::StrCat(ValueType(p->shape().type()), " v", p->index()));
  }
  const Instruction* root = c.root();
  std::vector<const Instruction*> results;
  if (root->opcode() == Opcode::kTuple) {
    for (const Instruction* e : root->operands()) results.push_back(e);
  } else {
    results.push_back(root);
  }
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k]->shape().IsScalar()) {
      return absl::UnimplementedError(
          absl::StrCat("the GPU code generator needs scalar results in computation ", c.name()));
    }
    params.push_back(absl::StrCat(ValueType(results[k]->shape().type()), "* out", k));
  }
  std::string body;
  for (const auto& instr : c.instructions()) {
    if (instr->opcode() == Opcode::kParameter) continue;
    if (instr.get() == root && root->opcode() == Opcode::kTuple) continue;
    if (!instr->shape().IsScalar()) {
      return absl::UnimplementedError(absl::StrCat(
          "the GPU code generator cannot call ", c.name(), ": ", instr->name(), " is not scalar"));
    }
    std::string e;
    if (instr->opcode() == Opcode::kConstant) {
      e = Constant(instr->shape().type(), instr->attrs().literal, 0);
    } else if (instr->opcode() == Opcode::kCall) {
      ASSIGN_OR_RETURN(std::string fn, Function(*instr->called(0)));
      std::vector<std::string> args;
      for (const Instruction* o : instr->operands()) args.push_back(absl::StrCat("v", o->index()));
      absl::StrAppend(&body, "  ", ValueType(instr->shape().type()), " v", instr->index(), ";\n  ",
                      fn, "(", absl::StrJoin(args, ", "), ", &v", instr->index(), ");\n");
      continue;
    } else if (IsComputedElementwise(instr->opcode()) || instr->opcode() == Opcode::kCopy ||
               instr->opcode() == Opcode::kBitcastConvert) {
      std::vector<std::string> args;
      for (const Instruction* o : instr->operands()) args.push_back(absl::StrCat("v", o->index()));
      ASSIGN_OR_RETURN(e, ScalarExpr(*instr, args));
    } else if (instr->opcode() == Opcode::kReshape || instr->opcode() == Opcode::kBroadcast) {
      e = absl::StrCat("v", instr->operand(0)->index());  // scalar to scalar
    } else {
      return absl::UnimplementedError(absl::StrCat("the GPU code generator cannot call ", c.name(),
                                                   ": it holds ", ir::OpcodeName(instr->opcode())));
    }
    absl::StrAppend(&body, "  const ", ValueType(instr->shape().type()), " v", instr->index(),
                    " = ", e, ";\n");
  }
  for (size_t k = 0; k < results.size(); ++k) {
    absl::StrAppend(&body, "  *out", k, " = v", results[k]->index(), ";\n");
  }
  absl::StrAppend(&source_, "__device__ inline void ", name, "(", absl::StrJoin(params, ", "),
                  ") {\n", body, "}\n\n");
  functions_[&c] = name;
  return name;
}

bool CanFuse(const Instruction& producer, const Instruction& consumer) {
  const Opcode op = producer.opcode();
  return (IsComputedElementwise(op) || op == Opcode::kBroadcast || op == Opcode::kIota) &&
         IsComputedElementwise(consumer.opcode()) && producer.shape() == consumer.shape() &&
         consumer.shape().IsArray();
}

absl::StatusOr<KernelInfo> KernelEmitter::Emit(
    const Instruction& instr, const absl::flat_hash_set<const Instruction*>& fused) {
  const Opcode op = instr.opcode();
  const Shape& shape = instr.shape();
  const std::string name = absl::StrCat("kiln_k", kernels_, "_", ir::OpcodeName(op));
  std::string kname;
  for (char ch : name) kname.push_back(std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_');
  KernelInfo info;
  // The output position; a tuple's arrays (variadic reduce) share one shape.
  const std::vector<std::string> o = Names("o", OutputShapes(instr)[0].rank());
  const ElementType t = shape.IsTuple() ? ElementType::kTuple : shape.type();
  std::string body;
  // Set by the reductions (reduce, dot, convolution): emitted per thread or
  // per block below.
  std::optional<Fold> fold;
  std::vector<int64_t> grid_dims = shape.IsArray() ? shape.dims() : std::vector<int64_t>{};
  auto store = [&](const std::string& value) {
    return absl::StrCat("    r0[i] = ", Store(t, value), ";\n");
  };

  // The buffers the kernel reads: the operands, or for a fused elementwise
  // kernel the operands of the whole fused tree.
  std::vector<const Instruction*> inputs(instr.operands().begin(), instr.operands().end());
  if (IsComputedElementwise(op)) {
    inputs.clear();
    ASSIGN_OR_RETURN(std::string e, FusedValue(instr, fused, inputs));
    body = store(e);
  } else {
    switch (op) {
      case Opcode::kIota:
        body = store(Convert(ElementType::kS64, t, o[instr.attrs().iota_dimension]));
        break;
      case Opcode::kBroadcast: {
        std::vector<std::string> idx;
        for (int64_t d : instr.attrs().dimensions) idx.push_back(o[d]);
        body = store(ReadAt(instr, 0, idx));
        break;
      }
      case Opcode::kTranspose: {
        const auto& perm = instr.attrs().dimensions;
        std::vector<std::string> idx(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) idx[perm[k]] = o[k];
        body = store(ReadAt(instr, 0, idx));
        break;
      }
      case Opcode::kSlice: {
        std::vector<std::string> idx;
        for (size_t d = 0; d < o.size(); ++d) {
          const ir::SliceDim& s = instr.attrs().slice[d];
          idx.push_back(absl::StrCat(s.start, "LL + ", o[d], " * ", s.stride, "LL"));
        }
        body = store(ReadAt(instr, 0, idx));
        break;
      }
      case Opcode::kReverse: {
        std::vector<std::string> idx = o;
        for (int64_t d : instr.attrs().dimensions) {
          idx[d] = absl::StrCat(shape.dim(d) - 1, "LL - ", o[d]);
        }
        body = store(ReadAt(instr, 0, idx));
        break;
      }
      case Opcode::kPad: {
        const Shape& in = instr.operand(0)->shape();
        body = "    bool inside = true;\n";
        std::vector<std::string> idx;
        for (size_t d = 0; d < o.size(); ++d) {
          const ir::PadDim& p = instr.attrs().padding[d];
          const int64_t step = p.interior + 1;
          absl::StrAppend(&body, "    long long s", d, " = ", o[d], " - (", p.lo, "LL);\n",
                          "    if (s", d, " < 0 || s", d, " % ", step, "LL != 0) inside = false; ",
                          "else { s", d, " /= ", step, "LL; if (s", d, " >= ", in.dim(d),
                          "LL) inside = false; }\n");
          idx.push_back(absl::StrCat("s", d));
        }
        body += store(absl::StrCat("inside ? ", ReadAt(instr, 0, idx), " : ",
                                   Load(t, "a1[0]")));
        break;
      }
      case Opcode::kConcatenate: {
        const int64_t dim = instr.attrs().dimensions[0];
        body = absl::StrCat("    ", ValueType(t), " value = 0;\n    long long c = ", o[dim],
                            ";\n");
        for (int k = 0; k < instr.operand_count(); ++k) {
          std::vector<std::string> idx = o;
          idx[dim] = "c";
          const int64_t size = instr.operand(k)->shape().dim(dim);
          absl::StrAppend(&body, "    if (c >= 0 && c < ", size, "LL) value = ",
                          ReadAt(instr, k, idx), ";\n    c -= ", size, "LL;\n");
        }
        body += store("value");
        break;
      }
      case Opcode::kDynamicSlice: {
        const Shape& in = instr.operand(0)->shape();
        std::vector<std::string> idx;
        for (size_t d = 0; d < o.size(); ++d) {
          const ElementType it = instr.operand(1 + d)->shape().type();
          const std::string start = absl::StrCat(
              "kiln_clamp_index((long long)", Load(it, absl::StrCat("a", 1 + d, "[0]")), ", ",
              in.dim(d) - shape.dim(d), "LL)");
          idx.push_back(absl::StrCat(start, " + ", o[d]));
        }
        body = store(ReadAt(instr, 0, idx));
        break;
      }
      case Opcode::kDynamicUpdateSlice: {
        const Shape& upd = instr.operand(1)->shape();
        body = "    bool inside = true;\n";
        std::vector<std::string> idx;
        for (size_t d = 0; d < o.size(); ++d) {
          const ElementType it = instr.operand(2 + d)->shape().type();
          absl::StrAppend(&body, "    const long long u", d, " = ", o[d],
                          " - kiln_clamp_index((long long)",
                          Load(it, absl::StrCat("a", 2 + d, "[0]")), ", ",
                          shape.dim(d) - upd.dim(d), "LL);\n    if (u", d, " < 0 || u", d,
                          " >= ", upd.dim(d), "LL) inside = false;\n");
          idx.push_back(absl::StrCat("u", d));
        }
        body += store(absl::StrCat("inside ? ", ReadAt(instr, 1, idx), " : ",
                                   SameShapeOperand(instr, 0)));
        break;
      }
      case Opcode::kGather: {
        const ir::GatherDims& g = instr.attrs().gather;
        const Shape& operand = instr.operand(0)->shape();
        const Shape& indices = instr.operand(1)->shape();
        const auto& sizes = instr.attrs().slice_sizes;
        const auto contains = [](const std::vector<int64_t>& v, int64_t x) {
          return std::find(v.begin(), v.end(), x) != v.end();
        };
        // Batch dims of the output map in order to the index dims other
        // than index_vector_dim.
        std::vector<std::string> index_idx(indices.rank(), "0");
        int64_t next_out = 0;
        for (int d = 0; d < indices.rank(); ++d) {
          if (d == g.index_vector_dim) continue;
          while (contains(g.offset_dims, next_out)) ++next_out;
          index_idx[d] = o[next_out++];
        }
        const ElementType it = indices.type();
        std::vector<std::string> idx(operand.rank(), "0");
        for (size_t k = 0; k < g.start_index_map.size(); ++k) {
          const int64_t d = g.start_index_map[k];
          std::vector<std::string> at = index_idx;
          if (g.index_vector_dim < indices.rank()) at[g.index_vector_dim] = absl::StrCat(k);
          idx[d] = absl::StrCat("kiln_clamp_index((long long)",
                                Load(it, absl::StrCat("a1[", Linear(indices.dims(), at), "]")),
                                ", ", operand.dim(d) - sizes[d], "LL)");
        }
        size_t j = 0;
        for (int d = 0; d < operand.rank(); ++d) {
          if (contains(g.collapsed_slice_dims, d)) continue;
          idx[d] = absl::StrCat("(", idx[d], ") + ", o[g.offset_dims[j++]]);
        }
        body = store(ReadAt(instr, 0, idx));
        break;
      }
      case Opcode::kReduce: {
        const int n = instr.operand_count() / 2;
        const Shape& in = instr.operand(0)->shape();
        const auto& red = instr.attrs().dimensions;
        ASSIGN_OR_RETURN(std::string fn, n == 1 ? Reducer(*instr.called(0), in.type())
                                                : Function(*instr.called(0)));
        std::vector<int64_t> red_sizes;
        for (int64_t d : red) red_sizes.push_back(in.dim(d));
        std::vector<std::string> idx(in.rank());
        size_t next = 0;
        for (int d = 0; d < in.rank(); ++d) {
          const auto it = std::find(red.begin(), red.end(), d);
          idx[d] = it != red.end() ? absl::StrCat("w", it - red.begin()) : o[next++];
        }
        const std::string term =
            absl::StrCat(Decompose(red_sizes, "t", "w"), "      const long long at = ",
                         Linear(in.dims(), idx), ";\n");
        if (n == 1) {
          const ElementType et = in.type();
          const std::string v = ValueType(et);
          fold = Fold{v, Load(et, "a1[0]"), Count(red_sizes),
                      absl::StrCat(term, "      const ", v, " x = ", Load(et, "a0[at]"), ";\n"),
                      [fn, v](const std::string& dst, const std::string& a, const std::string& b) {
                        return absl::StrCat("{ ", v, " r_; ", fn, "(", a, ", ", b, ", &r_); ", dst,
                                            " = r_; }");
                      },
                      absl::StrCat("    r0[i] = ", Store(et, "acc"), ";\n")};
          break;
        }
        // Variadic: one thread per output element, the accumulators side
        // by side.
        grid_dims = shape.tuple_shape(0).dims();
        body = VariadicFold(instr, n, fn, Product(red_sizes), term, [&](int k) {
          return Load(instr.operand(k)->shape().type(), absl::StrCat("a", k, "[at]"));
        });
        break;
      }
      case Opcode::kReduceWindow: {
        const int n = instr.operand_count() / 2;
        const Shape& in = instr.operand(0)->shape();
        ASSIGN_OR_RETURN(std::string fn, n == 1 ? Reducer(*instr.called(0), in.type())
                                                : Function(*instr.called(0)));
        std::vector<ir::WindowDim> window = instr.attrs().window;
        if (window.empty()) window.resize(in.rank());
        if (n > 1) grid_dims = shape.tuple_shape(0).dims();
        std::vector<int64_t> sizes;
        for (const auto& w : window) sizes.push_back(w.size);
        const std::vector<std::string> p = Names("p", in.rank());
        // The window walk names its position q; the fold's index is t.
        const std::string position = absl::StrCat(
            "      const long long q = t;\n",
            WindowPosition(window, in.dims(), Names("o", in.rank())));
        body = VariadicFold(instr, n, fn, Product(sizes), position, [&](int k) {
          const ElementType et = instr.operand(k)->shape().type();
          return absl::StrCat("valid ? ",
                              Load(et, absl::StrCat("a", k, "[", Linear(in.dims(), p), "]")),
                              " : ", Load(et, absl::StrCat("a", n + k, "[0]")));
        });
        break;
      }
      case Opcode::kSelectAndScatter: {
        // Two kernels: the output filled with init, then each source
        // element added at the position its window selects. Windows that
        // cannot overlap run in parallel; others on one thread, in order.
        const Shape& in = instr.operand(0)->shape();
        const Shape& src = instr.operand(1)->shape();
        ASSIGN_OR_RETURN(std::string select, Function(*instr.called(0)));
        ASSIGN_OR_RETURN(std::string scatter, Function(*instr.called(1)));
        std::vector<ir::WindowDim> window = instr.attrs().window;
        if (window.empty()) window.resize(in.rank());
        bool disjoint = true;
        std::vector<int64_t> sizes;
        for (const auto& w : window) {
          sizes.push_back(w.size);
          if ((w.size - 1) * w.window_dilation + 1 > w.stride || w.base_dilation != 1) {
            disjoint = false;
          }
        }
        const std::string v = ValueType(t);
        absl::StrAppend(&source_, GridKernel(kname + "_init", Params(inputs, instr), {},
                                             shape.ElementCount(), "    r0[i] = a2[0];\n"));
        info.launches.push_back({kname + "_init", shape.ElementCount(), false});
        std::vector<std::string> p = Names("p", in.rank());
        std::string scatter_body = absl::StrCat(
            "    long long sel = -1;\n    ", v, " best = 0;\n",
            "    for (long long q = 0; q < ", Product(sizes), "; ++q) {\n",
            WindowPosition(window, in.dims(), Names("o", in.rank())),
            "      if (!valid) continue;\n      const long long at = ", Linear(in.dims(), p),
            ";\n      const ", v, " cand = ", Load(t, "a0[at]"), ";\n",
            "      if (sel < 0) { sel = at; best = cand; continue; }\n",
            "      bool keep; ", select, "(best, cand, &keep);\n",
            "      if (!keep) { sel = at; best = cand; }\n    }\n",
            "    if (sel >= 0) {\n      ", v, " sum; ", scatter, "(", Load(t, "r0[sel]"), ", ",
            Load(t, "a1[i]"), ", &sum);\n      r0[sel] = ", Store(t, "sum"), ";\n    }\n");
        absl::StrAppend(&source_, GridKernel(kname, Params(inputs, instr), src.dims(),
                                             src.ElementCount(), scatter_body));
        ++kernels_;
        info.launches.push_back({kname, src.ElementCount(), !disjoint});
        info.inputs = std::move(inputs);
        return info;
      }
      case Opcode::kDot: {
        const ir::DotDims& dd = instr.attrs().dot;
        const Shape& lhs = instr.operand(0)->shape();
        const Shape& rhs = instr.operand(1)->shape();
        const ElementType lt = lhs.type();
        const ElementType acc_t = lt == ElementType::kF64   ? ElementType::kF64
                                  : IsFloatType(lt)         ? ElementType::kF32
                                                            : ElementType::kS64;
        const auto contains = [](const std::vector<int64_t>& v, int64_t x) {
          return std::find(v.begin(), v.end(), x) != v.end();
        };
        std::vector<int64_t> csizes;
        for (int64_t d : dd.lhs_contracting) csizes.push_back(lhs.dim(d));
        std::vector<std::string> li(lhs.rank()), ri(rhs.rank());
        size_t next = 0;
        for (size_t k = 0; k < dd.lhs_batch.size(); ++k) {
          li[dd.lhs_batch[k]] = o[next];
          ri[dd.rhs_batch[k]] = o[next++];
        }
        for (int d = 0; d < lhs.rank(); ++d) {
          if (!contains(dd.lhs_batch, d) && !contains(dd.lhs_contracting, d)) li[d] = o[next++];
        }
        for (int d = 0; d < rhs.rank(); ++d) {
          if (!contains(dd.rhs_batch, d) && !contains(dd.rhs_contracting, d)) ri[d] = o[next++];
        }
        for (size_t k = 0; k < dd.lhs_contracting.size(); ++k) {
          li[dd.lhs_contracting[k]] = absl::StrCat("w", k);
          ri[dd.rhs_contracting[k]] = absl::StrCat("w", k);
        }
        const std::string a = Convert(lt, acc_t, ReadAt(instr, 0, li));
        const std::string b = Convert(rhs.type(), acc_t, ReadAt(instr, 1, ri));
        fold = SumOfProducts(acc_t, Count(csizes),
                             absl::StrCat(Decompose(csizes, "t", "w"), "      const ",
                                          ValueType(acc_t), " x = ", Product2(acc_t, a, b), ";\n"),
                             absl::StrCat("    r0[i] = ", Store(t, Convert(acc_t, t, "acc")), ";\n"));
        break;
      }
      case Opcode::kConvolution: {
        const ir::ConvDims& c = instr.attrs().conv;
        const Shape& in = instr.operand(0)->shape();
        const Shape& ker = instr.operand(1)->shape();
        const ElementType lt = in.type();
        const ElementType acc_t = lt == ElementType::kF64   ? ElementType::kF64
                                  : IsFloatType(lt)         ? ElementType::kF32
                                                            : ElementType::kS64;
        const int rank = static_cast<int>(c.input_spatial.size());
        std::vector<ir::WindowDim> window = instr.attrs().window;
        if (window.empty()) window.resize(rank);
        const int64_t groups = instr.attrs().feature_group_count;
        const int64_t ig = ker.dim(c.kernel_input_feature);
        const int64_t og = ker.dim(c.kernel_output_feature) / groups;
        std::vector<int64_t> in_sp, k_sp;
        std::vector<std::string> out_sp;
        for (int d = 0; d < rank; ++d) {
          in_sp.push_back(in.dim(c.input_spatial[d]));
          k_sp.push_back(ker.dim(c.kernel_spatial[d]));
          out_sp.push_back(o[c.output_spatial[d]]);
        }
        std::vector<std::string> ii(in.rank()), ki(ker.rank());
        ii[c.input_batch] = o[c.output_batch];
        if (const int64_t bgc = instr.attrs().batch_group_count; bgc > 1) {
          // Batch group g (a block of the input batch) feeds the g-th block
          // of output features; feature groups are then 1.
          ii[c.input_batch] = absl::StrCat("(", o[c.output_feature], " / ",
                                           ker.dim(c.kernel_output_feature) / bgc, "LL) * ",
                                           in.dim(c.input_batch) / bgc, "LL + ",
                                           o[c.output_batch]);
        }
        ii[c.input_feature] = absl::StrCat("(", o[c.output_feature], " / ", og, "LL) * ", ig,
                                           "LL + ch");
        ki[c.kernel_input_feature] = "ch";
        ki[c.kernel_output_feature] = o[c.output_feature];
        for (int d = 0; d < rank; ++d) {
          ii[c.input_spatial[d]] = absl::StrCat("p", d);
          ki[c.kernel_spatial[d]] = absl::StrCat("w", d);
        }
        const std::string a = Convert(lt, acc_t, ReadAt(instr, 0, ii));
        const std::string b = Convert(ker.type(), acc_t, ReadAt(instr, 1, ki));
        const int64_t ksp = Count(k_sp);
        fold = SumOfProducts(
            acc_t, ig * ksp,
            absl::StrCat("      const long long ch = t / ", ksp, "LL;\n      const long long q = t % ",
                         ksp, "LL;\n", WindowPosition(window, in_sp, out_sp),
                         "      if (!valid) continue;\n      const ", ValueType(acc_t), " x = ",
                         Product2(acc_t, a, b), ";\n"),
            absl::StrCat("    r0[i] = ", Store(t, Convert(acc_t, t, "acc")), ";\n"));
        break;
      }
      default:
        return absl::UnimplementedError(absl::StrCat(
            instr.name(), ": the GPU code generator has no kernel for ", ir::OpcodeName(op)));
    }
  }
  const int64_t threads = Count(grid_dims);
  if (fold.has_value() && UseBlockFold(threads, fold->length)) {
    absl::StrAppend(&source_, BlockFoldKernel(kname, Params(inputs, instr), grid_dims, *fold));
    info.launches.push_back({kname, threads, false, kFoldBlock});
  } else {
    if (fold.has_value()) body = ThreadFold(*fold);
    absl::StrAppend(&source_, GridKernel(kname, Params(inputs, instr), grid_dims, threads, body));
    info.launches.push_back({kname, threads, false});
  }
  ++kernels_;
  info.inputs = std::move(inputs);
  return info;
}

}  // namespace kiln::gpu
