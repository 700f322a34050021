// Every rejection of verifier.cc, reached through the verifier itself: text
// where the parser lets the fault through, otherwise a parsed module mutated
// in memory, a Builder, or a wire message (ModuleFromProto). Shape-rule
// rejections are in shape_inference_test.cc and shape_inference_ops_test.cc.
#include "compiler/ir/verifier.h"

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

std::unique_ptr<Module> Parse(absl::string_view text) {
  auto m = ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status() << "\n" << text;
  return m.ok() ? *std::move(m) : nullptr;
}

Instruction* Find(const Module& m, absl::string_view name) {
  for (const auto& c : m.computations()) {
    for (const auto& instr : c->instructions()) {
      if (instr->name() == name) return instr.get();
    }
  }
  return nullptr;
}

// Expects the verifier to reject `m` with InvalidArgument and a message
// holding each of `parts`.
void ExpectInvalid(Module& m, std::initializer_list<absl::string_view> parts) {
  absl::Status st = Verify(m);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  for (absl::string_view part : parts) {
    EXPECT_NE(st.message().find(part), absl::string_view::npos)
        << "want: " << part << "\ngot:  " << st.message();
  }
}

// Parses `text` (which must parse: the verifier is under test, not the
// parser) and expects the verifier to reject instruction `instr` for `what`.
void ExpectRejected(absl::string_view text, absl::string_view instr,
                    absl::string_view what) {
  std::unique_ptr<Module> m = Parse(text);
  ASSERT_NE(m, nullptr);
  ExpectInvalid(*m, {absl::StrCat("instruction ", instr, " ("), what});
}

// Round-trips `text` through the wire form, letting `edit` change the
// message first, as a client could.
std::unique_ptr<Module> ViaProto(absl::string_view text,
                                 const std::function<void(v1::ModuleProto&)>& edit) {
  std::unique_ptr<Module> parsed = Parse(text);
  if (parsed == nullptr) return nullptr;
  v1::ModuleProto proto = ModuleToProto(*parsed);
  edit(proto);
  auto m = ModuleFromProto(proto);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

constexpr absl::string_view kTwoComputations = R"(
f { x = f32[] parameter(0) ROOT n = f32[] negate(x) }
ENTRY e {
  p = f32[] parameter(0)
  a = f32[] negate(p)
  b = f32[] negate(a)
  ROOT c = f32[] call(b), to_apply=f
}
)";

TEST(VerifierTest, AcceptsWellFormed) {
  std::unique_ptr<Module> m = Parse(kTwoComputations);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(Verify(*m).ok()) << Verify(*m);
}

TEST(VerifierTest, NoEntry) {
  Module m("m");
  Builder b(&m, "e");
  b.Parameter(0, Shape::Scalar(ElementType::kF32), "p");
  ASSERT_TRUE(b.Build().ok());
  ExpectInvalid(m, {"module has no entry computation"});
}

TEST(VerifierTest, EntryNotInModule) {
  Module m("m"), other("other");
  Builder b(&other, "e");
  b.Parameter(0, Shape::Scalar(ElementType::kF32), "p");
  auto e = b.Build();
  ASSERT_TRUE(e.ok());
  m.set_entry(*e);
  ExpectInvalid(m, {"entry computation not in module"});
}

TEST(VerifierTest, DuplicateComputationNameFromProto) {
  std::unique_ptr<Module> m = ViaProto(kTwoComputations, [](v1::ModuleProto& p) {
    p.mutable_computations(0)->set_name("e");
  });
  ASSERT_NE(m, nullptr);
  ExpectInvalid(*m, {"duplicate computation name e"});
}

TEST(VerifierTest, NoRoot) {
  Module m("m");
  auto c = std::make_unique<Computation>("e");
  c->AddInstruction(std::make_unique<Instruction>(
      Opcode::kParameter, Shape::Scalar(ElementType::kF32), "p"));
  m.set_entry(m.AddComputation(std::move(c)));
  ExpectInvalid(m, {"computation e has no root instruction"});
}

TEST(VerifierTest, RootFromAnotherComputation) {
  std::unique_ptr<Module> m = Parse(kTwoComputations);
  ASSERT_NE(m, nullptr);
  m->entry()->set_root(Find(*m, "n"));
  ExpectInvalid(*m, {"computation e has a root from another computation"});
}

TEST(VerifierTest, OperandFromAnotherComputation) {
  std::unique_ptr<Module> m = Parse(kTwoComputations);
  ASSERT_NE(m, nullptr);
  Find(*m, "b")->ReplaceOperand(0, Find(*m, "n"));
  ExpectInvalid(*m, {"instruction b uses n from another computation"});
}

// The text parser spells a bitcast-convert between widths with other ops
// (hlo_xla_syntax_test.cc); in the IR itself the widths must be equal.
TEST(VerifierTest, BitcastConvertKeepsTheWidth) {
  std::unique_ptr<Module> m = Parse(R"(
ENTRY e {
  p = f32[2] parameter(0)
  ROOT b = s32[2] bitcast-convert(p)
})");
  ASSERT_NE(m, nullptr);
  Instruction* b = Find(*m, "b");
  b->set_shape(Shape(ElementType::kF16, {2}));
  ExpectInvalid(*m, {"b", "bitcast-convert from f32 to f16 needs equal bit widths"});
}

// The parser orders instructions and rejects cycles itself, so the cycle is
// made after parsing.
TEST(VerifierTest, Cycle) {
  std::unique_ptr<Module> m = Parse(kTwoComputations);
  ASSERT_NE(m, nullptr);
  Find(*m, "a")->ReplaceOperand(0, Find(*m, "b"));
  ExpectInvalid(*m, {"cycle through instruction b in computation e"});
  // The failed reordering keeps every instruction.
  EXPECT_EQ(m->entry()->instruction_count(), 4);
}

// The parser rejects duplicate names; a wire message can carry them.
TEST(VerifierTest, DuplicateInstructionNameFromProto) {
  std::unique_ptr<Module> m = ViaProto(kTwoComputations, [](v1::ModuleProto& p) {
    for (auto& instr : *p.mutable_computations(1)->mutable_instructions()) {
      if (instr.name() == "b") instr.set_name("a");
    }
  });
  ASSERT_NE(m, nullptr);
  ExpectInvalid(*m, {"computation e, instruction a (negate): duplicate "
                     "instruction name"});
}

// ModuleFromProto and the parser resolve callees inside the module; the
// Builder and direct construction do not.
TEST(VerifierTest, CalleeOutsideModule) {
  Module m("m"), other("other");
  Computation* foreign =
      Builder::ScalarBinary(&other, Opcode::kAdd, ElementType::kF32);
  ASSERT_NE(foreign, nullptr);
  Builder b(&m, "e");
  Instruction* p = b.Parameter(0, Shape::Scalar(ElementType::kF32), "p");
  b.Call(foreign, {p, p});
  auto e = b.Build();
  ASSERT_TRUE(e.ok()) << e.status();
  m.set_entry(*e);
  ExpectInvalid(m, {"computation e, instruction call.1 (call): calls a "
                    "computation outside the module"});
}

TEST(VerifierTest, NullCallee) {
  Module m("m");
  auto c = std::make_unique<Computation>("e");
  Instruction* p = c->AddInstruction(std::make_unique<Instruction>(
      Opcode::kParameter, Shape::Scalar(ElementType::kF32), "p"));
  auto call = std::make_unique<Instruction>(
      Opcode::kCall, Shape::Scalar(ElementType::kF32), "k");
  call->AddOperand(p);
  call->AddCalled(nullptr);
  c->set_root(c->AddInstruction(std::move(call)));
  m.set_entry(m.AddComputation(std::move(c)));
  ExpectInvalid(m, {"instruction k (call): calls a computation outside the "
                    "module"});
}

TEST(VerifierTest, ParameterNumberOutOfRange) {
  ExpectRejected("ENTRY e {\n ROOT a = f32[] parameter(-1)\n}", "a",
                 "parameter number -1 out of range");
  ExpectRejected("ENTRY e {\n ROOT a = f32[] parameter(65536)\n}", "a",
                 "parameter number 65536 out of range");
}

TEST(VerifierTest, ParameterUsedTwice) {
  ExpectRejected(
      "ENTRY e {\n a = f32[] parameter(0)\n b = f32[] parameter(0)\n"
      " ROOT c = f32[] add(a, b)\n}",
      "b", "parameter number 0 used twice");
}

TEST(VerifierTest, ParameterGaps) {
  std::unique_ptr<Module> m = Parse(
      "ENTRY e {\n a = f32[] parameter(0)\n b = f32[] parameter(2)\n"
      " ROOT c = f32[] add(a, b)\n}");
  ASSERT_NE(m, nullptr);
  ExpectInvalid(*m, {"computation e has parameter numbers with gaps "
                     "(2 parameters, highest number 2)"});
}

TEST(VerifierTest, RecursiveCall) {
  std::unique_ptr<Module> m = Parse(
      "f {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=f\n}\n"
      "ENTRY e {\n a = f32[] parameter(0)\n ROOT r = f32[] call(a), to_apply=f\n}");
  ASSERT_NE(m, nullptr);
  ExpectInvalid(*m, {"computation f calls itself (recursion)"});
}

// Computation ids are resolved before instructions, so a message can make
// two computations call each other.
TEST(VerifierTest, MutualRecursionFromProto) {
  std::unique_ptr<Module> m = ViaProto(
      "f {\n x = f32[] parameter(0)\n ROOT c = f32[] call(x), to_apply=g\n}\n"
      "g {\n y = f32[] parameter(0)\n ROOT n = f32[] negate(y)\n}\n"
      "ENTRY e {\n a = f32[] parameter(0)\n ROOT r = f32[] call(a), to_apply=f\n}",
      [](v1::ModuleProto& p) {
        // g (id 1) calls f (id 0) instead of negating.
        auto* n = p.mutable_computations(1)->mutable_instructions(1);
        n->set_opcode("call");
        n->add_called_computation_ids(0);
      });
  ASSERT_NE(m, nullptr);
  ExpectInvalid(*m, {"calls itself (recursion)"});
}

// The parser and ModuleFromProto validate declared shapes; a pass that
// rewrites a shape in memory reaches the verifier's check.
TEST(VerifierTest, InvalidDeclaredShape) {
  constexpr absl::string_view kText =
      "ENTRY e {\n p = f32[2] parameter(0)\n t = token[] after-all()\n"
      " ROOT n = f32[2] negate(p)\n}";
  struct {
    const char* instr;
    Shape shape;
    const char* problem;
  } cases[] = {
      {"n", Shape(ElementType::kF32, {-2}), "negative dimension in f32[-2]"},
      {"p", Shape(ElementType::kF32, {1 << 20, 1 << 20, 1 << 20}),
       "element count of f32[1048576,1048576,1048576] overflows the limit"},
      {"t", Shape(ElementType::kToken, {2}), "token with dims"},
  };
  for (const auto& c : cases) {
    std::unique_ptr<Module> m = Parse(kText);
    ASSERT_NE(m, nullptr);
    Find(*m, c.instr)->set_shape(c.shape);
    ExpectInvalid(*m, {absl::StrCat("instruction ", c.instr, " ("), c.problem});
  }
}

TEST(VerifierTest, DeclaredShapeDiffersFromInferred) {
  ExpectRejected("ENTRY e {\n a = f32[2] parameter(0)\n ROOT b = f32[3] negate(a)\n}",
                 "b", "declared shape f32[3] but operands give f32[2]");
}

constexpr char kAllReduce[] =
    "add { x = f32[] parameter(0) y = f32[] parameter(1) ROOT r = f32[] add(x, y) }\n"
    "ENTRY e {\n p = f32[4] parameter(0)\n"
    " ROOT ar = f32[4] all-reduce(p), to_apply=add, replica_groups=";

TEST(VerifierTest, ReplicaGroups) {
  ExpectRejected(absl::StrCat(kAllReduce, "{{0,1},{}}\n}"), "ar",
                 "empty replica group");
  ExpectRejected(absl::StrCat(kAllReduce, "{{0,1},{1,2}}\n}"), "ar",
                 "invalid replica_groups");
  ExpectRejected(absl::StrCat(kAllReduce, "{{-1,0}}\n}"), "ar",
                 "invalid replica_groups");
  std::unique_ptr<Module> ok = Parse(absl::StrCat(kAllReduce, "{{0,2},{1,3}}\n}"));
  ASSERT_NE(ok, nullptr);
  EXPECT_TRUE(Verify(*ok).ok()) << Verify(*ok);
}

TEST(VerifierTest, OperandPrecisionCount) {
  ExpectRejected(
      "ENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[3,4] parameter(1)\n"
      " ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1},"
      " rhs_contracting_dims={0}, operand_precision={high}\n}",
      "d", "operand_precision has 1 entries for 2 operands");
}

}  // namespace
}  // namespace kiln::ir
