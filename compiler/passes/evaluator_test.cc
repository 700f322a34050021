// The evaluator must compute what the host interpreter computes, bit for
// bit: every op it covers, on every element type, over edge values (signed
// zeros, infinities, NaNs with payloads, subnormals, integer extremes),
// against the interpreter running the same op on the same values.
#include "compiler/passes/evaluator.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/type_dispatch.h"
#include "compiler/ir/builder.h"
#include "gtest/gtest.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_buffer.h"
#include "runtime/host/host_device.h"

namespace kiln::passes {
namespace {

using ir::ElementType;
using ir::Literal;
using ir::Opcode;
using ir::Shape;

constexpr ElementType kTypes[] = {
    ElementType::kPred, ElementType::kS8,  ElementType::kS16,
    ElementType::kS32,  ElementType::kS64, ElementType::kU8,
    ElementType::kU16,  ElementType::kU32, ElementType::kU64,
    ElementType::kBF16, ElementType::kF16, ElementType::kF32,
    ElementType::kF64};

template <typename T>
T NanWithPayload(bool quiet) {
  if constexpr (std::is_same_v<T, float>) {
    uint32_t bits = quiet ? 0xffc12345u : 0x7fa00001u;
    return std::bit_cast<float>(bits);
  } else if constexpr (std::is_same_v<T, double>) {
    uint64_t bits = quiet ? 0xfff8000012345678ull : 0x7ff4000000000001ull;
    return std::bit_cast<double>(bits);
  } else if constexpr (std::is_same_v<T, bf16>) {
    return bf16::FromBits(quiet ? 0xffc3 : 0x7fa1);
  } else {
    return f16::FromBits(quiet ? 0xfe21 : 0x7d01);
  }
}

// Values of `type` where rules differ: signed zeros, halves and ties,
// subnormals, overflow, infinities, NaNs; integer extremes and shift counts.
Literal EdgeValues(ElementType type) {
  return ir::DispatchType(type, [&](auto tag) -> Literal {
    using T = decltype(tag);
    // Storage that is an array even for bool (std::vector<bool> is not).
    std::vector<std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>> v;
    if constexpr (std::is_same_v<T, bool>) {
      v = {0, 1};
    } else if constexpr (ir::kIsFloat<T>) {
      const double inf = std::numeric_limits<double>::infinity();
      for (double d : {0.0,  -0.0,  1.0,  -1.0, 0.5,   -0.5,        1.5,
                       2.5,  -2.5,  3.0,  7.0,  1e-40, 6e-8,        65504.0,
                       1e10, -1e10, 3e38, inf,  -inf,  std::nan("")}) {
        v.push_back(ir::ConvertValue<T>(d));
      }
      v.push_back(NanWithPayload<T>(true));
      v.push_back(NanWithPayload<T>(false));
    } else {
      using L = std::numeric_limits<T>;
      for (int d : {0, 1, 2, 3, 7, 8, 9, 15, 16, 31, 32, 63, 64, -1, -7}) {
        v.push_back(static_cast<T>(d));
      }
      v.push_back(L::min());
      v.push_back(static_cast<T>(L::min() + 1));
      v.push_back(L::max());
    }
    Literal lit(Shape(type, {static_cast<int64_t>(v.size())}));
    std::memcpy(lit.mutable_bytes().data(), v.data(), v.size() * sizeof(T));
    return lit;
  });
}

Literal Element(const Literal& lit, int64_t i) {
  const int size = ir::ElementTypeSize(lit.shape().type());
  Literal out(Shape(lit.shape().type(), {}));
  std::memcpy(out.mutable_bytes().data(), lit.bytes().data() + i * size, size);
  return out;
}

// Every combination of the operands' elements, one per position: operand
// k of combination c is element (c / stride_k) % n_k.
std::vector<Literal> Combinations(const std::vector<Literal>& values) {
  int64_t total = 1;
  for (const Literal& v : values) total *= v.element_count();
  std::vector<Literal> out;
  int64_t stride = 1;
  for (const Literal& v : values) {
    const int size = ir::ElementTypeSize(v.shape().type());
    Literal lit(Shape(v.shape().type(), {total}));
    for (int64_t c = 0; c < total; ++c) {
      std::memcpy(lit.mutable_bytes().data() + c * size,
                  v.bytes().data() + ((c / stride) % v.element_count()) * size,
                  size);
    }
    stride *= v.element_count();
    out.push_back(std::move(lit));
  }
  return out;
}

struct Case {
  Opcode op;
  ir::Attributes attrs;
  std::vector<ElementType> operand_types;
  ElementType result_type;  // for convert and bitcast-convert
  std::string what;
};

// The interpreter's result of `c` on arrays `args`, or an error when the
// op does not accept these types.
absl::StatusOr<Literal> RunOnInterpreter(const Case& c,
                                         const std::vector<Literal>& args) {
  ir::Module module("m");
  ir::Builder b(&module, "main");
  std::vector<ir::Instruction*> ops;
  for (const Literal& a : args) ops.push_back(b.Constant(a));
  b.AddOp(c.op, ops, c.attrs, {}, Shape(c.result_type, args[0].shape().dims()));
  absl::StatusOr<ir::Computation*> main = b.Build();
  if (!main.ok()) return main.status();
  module.set_entry(*main);
  host::HostDevice device("cpu", 0, int64_t{1} << 30, 4);
  auto exe = host::CompileProgram("cpu", module, {});
  if (!exe.ok()) return exe.status();
  auto out = (*exe)->Execute(device, {}, {});
  if (!out.ok()) return out.status();
  return host::HostBuffer::Cast(*out)->ToLiteral();
}

// The instruction of `c` on scalars, for the evaluator.
struct ScalarInstruction {
  ir::Module module{"scalar"};
  ir::Instruction* instr = nullptr;
};

std::unique_ptr<ScalarInstruction> MakeScalar(const Case& c) {
  auto s = std::make_unique<ScalarInstruction>();
  ir::Builder b(&s->module, "main");
  std::vector<ir::Instruction*> ops;
  for (int k = 0; k < static_cast<int>(c.operand_types.size()); ++k) {
    ops.push_back(b.Parameter(k, Shape(c.operand_types[k], {})));
  }
  s->instr = b.AddOp(c.op, ops, c.attrs, {}, Shape(c.result_type, {}));
  if (!b.Build(s->instr).ok()) return nullptr;  // the module owns it now
  return s;
}

struct Tally {
  int64_t evaluated = 0;
  int64_t declined = 0;
};

// Runs `c` on every combination of edge values; expects the evaluator to
// match the interpreter wherever it gives a value.
void Check(const Case& c, Tally* tally) {
  std::vector<Literal> values;
  for (ElementType t : c.operand_types) values.push_back(EdgeValues(t));
  const std::vector<Literal> args = Combinations(values);
  absl::StatusOr<Literal> want = RunOnInterpreter(c, args);
  if (!want.ok()) return;  // the op does not take these types
  std::unique_ptr<ScalarInstruction> scalar = MakeScalar(c);
  ASSERT_NE(scalar, nullptr) << c.what;
  int reported = 0;
  for (int64_t i = 0; i < args[0].element_count(); ++i) {
    std::vector<Literal> elements;
    std::vector<const Literal*> operands;
    for (const Literal& a : args) elements.push_back(Element(a, i));
    for (const Literal& e : elements) operands.push_back(&e);
    std::optional<Literal> got = Evaluate(*scalar->instr, operands);
    if (!got.has_value()) {
      ++tally->declined;
      continue;
    }
    ++tally->evaluated;
    const Literal expected = Element(*want, i);
    if (got->bytes() != expected.bytes() && reported++ < 5) {
      std::string inputs;
      for (const Literal& e : elements)
        absl::StrAppend(&inputs, " ", e.ToText());
      ADD_FAILURE() << c.what << " on" << inputs << ": evaluator "
                    << got->ToText() << ", interpreter " << expected.ToText();
    }
  }
}

TEST(EvaluatorTest, ElementwiseOpsMatchTheInterpreter) {
  Tally tally;
  for (ElementType t : kTypes) {
    const std::string type(ir::ElementTypeName(t));
    for (Opcode op : {Opcode::kAbs, Opcode::kNegate, Opcode::kSign,
                      Opcode::kNot, Opcode::kPopcnt, Opcode::kClz,
                      Opcode::kFloor, Opcode::kCeil, Opcode::kSqrt,
                      Opcode::kRoundAfz, Opcode::kRoundEven, Opcode::kCopy}) {
      Check({op, {}, {t}, t, absl::StrCat(ir::OpcodeName(op), " ", type)},
            &tally);
    }
    Check({Opcode::kIsFinite,
           {},
           {t},
           ElementType::kPred,
           absl::StrCat("is-finite ", type)},
          &tally);
    for (Opcode op : {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply,
                      Opcode::kDivide, Opcode::kRemainder, Opcode::kMaximum,
                      Opcode::kMinimum, Opcode::kAnd, Opcode::kOr, Opcode::kXor,
                      Opcode::kShiftLeft, Opcode::kShiftRightLogical,
                      Opcode::kShiftRightArithmetic, Opcode::kPower}) {
      Check({op, {}, {t, t}, t, absl::StrCat(ir::OpcodeName(op), " ", type)},
            &tally);
    }
    for (ir::ComparisonDirection d :
         {ir::ComparisonDirection::kEq, ir::ComparisonDirection::kNe,
          ir::ComparisonDirection::kLt, ir::ComparisonDirection::kLe,
          ir::ComparisonDirection::kGt, ir::ComparisonDirection::kGe}) {
      ir::Attributes attrs;
      attrs.direction = d;
      Check(
          {Opcode::kCompare,
           attrs,
           {t, t},
           ElementType::kPred,
           absl::StrCat("compare ", ir::ComparisonDirectionName(d), " ", type)},
          &tally);
    }
    Check({Opcode::kSelect,
           {},
           {ElementType::kPred, t, t},
           t,
           absl::StrCat("select ", type)},
          &tally);
    Check({Opcode::kClamp, {}, {t, t, t}, t, absl::StrCat("clamp ", type)},
          &tally);
    for (ElementType to : kTypes) {
      const std::string to_name(ir::ElementTypeName(to));
      Check({Opcode::kConvert,
             {},
             {t},
             to,
             absl::StrCat("convert ", type, " to ", to_name)},
            &tally);
      if (ir::ElementTypeSize(to) == ir::ElementTypeSize(t)) {
        Check({Opcode::kBitcastConvert,
               {},
               {t},
               to,
               absl::StrCat("bitcast-convert ", type, " to ", to_name)},
              &tally);
      }
    }
  }
  // The evaluator declines only what it documents (two-NaN float
  // arithmetic, math-library functions such as float power); everything
  // else here it computes.
  RecordProperty("evaluated", std::to_string(tally.evaluated));
  RecordProperty("declined", std::to_string(tally.declined));
  EXPECT_GT(tally.evaluated, 100000);
  EXPECT_LT(tally.declined, tally.evaluated / 10);
}

TEST(EvaluatorTest, DeclinesFloatArithmeticOnTwoNaNs) {
  ir::Module module("m");
  ir::Builder b(&module, "main");
  ir::Instruction* x = b.Parameter(0, Shape(ElementType::kF32, {}));
  ir::Instruction* sum = b.Binary(Opcode::kAdd, x, x);
  ir::Instruction* max = b.Binary(Opcode::kMaximum, x, x);
  ASSERT_NE(max, nullptr);
  const Literal nan = Literal::Scalar<float>(ElementType::kF32, std::nanf(""));
  const Literal one = Literal::Scalar<float>(ElementType::kF32, 1.0f);
  EXPECT_FALSE(Evaluate(*sum, {&nan, &nan}).has_value());
  EXPECT_TRUE(Evaluate(*sum, {&nan, &one}).has_value());
  // maximum picks the first NaN by rule, whatever the hardware does.
  EXPECT_TRUE(Evaluate(*max, {&nan, &nan}).has_value());
}

TEST(EvaluatorTest, DataMovementMatchesTheInterpreter) {
  const Literal values =
      Literal::FromVector<int>(ElementType::kS32, {2, 3, 4}, [] {
        std::vector<int> v(24);
        for (int i = 0; i < 24; ++i) v[i] = i * 7 - 30;
        return v;
      }());
  struct DataCase {
    Opcode op;
    ir::Attributes attrs;
    Shape shape;
  };
  std::vector<DataCase> cases;
  auto attrs = [](auto fill) {
    ir::Attributes a;
    fill(a);
    return a;
  };
  const ElementType s32 = ElementType::kS32;
  cases.push_back({Opcode::kTranspose, attrs([](ir::Attributes& a) {
                     a.dimensions = {2, 0, 1};
                   }),
                   Shape(s32, {4, 2, 3})});
  cases.push_back({Opcode::kReshape, {}, Shape(s32, {6, 4})});
  cases.push_back({Opcode::kBroadcast, attrs([](ir::Attributes& a) {
                     a.dimensions = {3, 0, 2};
                   }),
                   Shape(s32, {3, 5, 4, 2})});
  cases.push_back({Opcode::kSlice, attrs([](ir::Attributes& a) {
                     a.slice = {{1, 2, 1}, {0, 3, 2}, {1, 4, 2}};
                   }),
                   Shape(s32, {1, 2, 2})});
  cases.push_back({Opcode::kReverse, attrs([](ir::Attributes& a) {
                     a.dimensions = {0, 2};
                   }),
                   Shape(s32, {2, 3, 4})});
  for (const DataCase& c : cases) {
    ir::Module module("m");
    ir::Builder b(&module, "main");
    ir::Instruction* k = b.Constant(values);
    ir::Instruction* instr = b.AddOp(c.op, {k}, c.attrs, {}, c.shape);
    absl::StatusOr<ir::Computation*> main = b.Build();
    ASSERT_TRUE(main.ok()) << ir::OpcodeName(c.op) << ": " << main.status();
    module.set_entry(*main);
    host::HostDevice device("cpu", 0, int64_t{1} << 30, 4);
    auto exe = host::CompileProgram("cpu", module, {});
    ASSERT_TRUE(exe.ok()) << exe.status();
    auto out = (*exe)->Execute(device, {}, {});
    ASSERT_TRUE(out.ok()) << out.status();
    const Literal want = host::HostBuffer::Cast(*out)->ToLiteral();
    std::optional<Literal> got = Evaluate(*instr, {&values});
    ASSERT_TRUE(got.has_value()) << ir::OpcodeName(c.op);
    EXPECT_EQ(*got, want) << ir::OpcodeName(c.op) << ": " << got->ToText()
                          << " vs " << want.ToText();
  }
  // Concatenate and iota.
  ir::Module module("m");
  ir::Builder b(&module, "main");
  ir::Instruction* k = b.Constant(values);
  ir::Attributes concat;
  concat.dimensions = {1};
  ir::Instruction* cat = b.AddOp(Opcode::kConcatenate, {k, k, k}, concat, {},
                                 Shape(s32, {2, 9, 4}));
  ir::Instruction* iota = b.Iota(Shape(ElementType::kF16, {3, 700}), 1);
  ir::Instruction* root = b.Tuple({cat, iota});
  absl::StatusOr<ir::Computation*> main = b.Build(root);
  ASSERT_TRUE(main.ok()) << main.status();
  module.set_entry(*main);
  host::HostDevice device("cpu", 0, int64_t{1} << 30, 4);
  auto exe = host::CompileProgram("cpu", module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto out = (*exe)->Execute(device, {}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  const Literal want = host::HostBuffer::Cast(*out)->ToLiteral();
  std::optional<Literal> got_cat = Evaluate(*cat, {&values, &values, &values});
  std::optional<Literal> got_iota = Evaluate(*iota, {});
  ASSERT_TRUE(got_cat.has_value() && got_iota.has_value());
  EXPECT_EQ(*got_cat, want.tuple_elements()[0]);
  EXPECT_EQ(*got_iota, want.tuple_elements()[1]);
}

}  // namespace
}  // namespace kiln::passes
