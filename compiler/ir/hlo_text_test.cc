#include "compiler/ir/fingerprint.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

std::string RoundTrip(absl::string_view text) {
  auto m = ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return "";
  EXPECT_TRUE(Verify(**m).ok()) << Verify(**m);
  return PrintModule(**m);
}

void ExpectFixedPoint(absl::string_view text) {
  std::string once = RoundTrip(text);
  std::string twice = RoundTrip(once);
  EXPECT_EQ(once, twice);
}

constexpr absl::string_view kOldStyle = R"(
HloModule old_style, entry_computation_layout={(f32[2,3]{1,0})->f32[3]{0}}

%add.1 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y), metadata={op_name="add"}
}

ENTRY %main.5 (p: f32[2,3]) -> f32[3] {
  %p = f32[2,3]{1,0} parameter(0), sharding={replicated}
  %c = f32[] constant(0)
  ROOT %r = f32[3]{0} reduce(f32[2,3]{1,0} %p, f32[] %c), dimensions={0}, to_apply=%add.1
}
)";

constexpr absl::string_view kNewStyle = R"(
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT add = f32[] add(x, y)
}

ENTRY main {
  p = f32[2,3] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[3] reduce(p, c), dimensions={0}, to_apply=add
}
)";

TEST(HloTextTest, OldAndNewSpellingsParseToTheSameModule) {
  auto a = ParseModule(kOldStyle);
  auto b = ParseModule(kNewStyle);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  PrintOptions canonical;
  canonical.canonical_names = true;
  EXPECT_EQ(PrintModule(**a, canonical), PrintModule(**b, canonical));
  EXPECT_EQ((*a)->name(), "old_style");
  EXPECT_EQ((*a)->entry()->name(), "main.5");
}

TEST(HloTextTest, PrintParsePrintIsAFixedPoint) {
  ExpectFixedPoint(kOldStyle);
  ExpectFixedPoint(R"(
HloModule attrs
ENTRY e {
  a = f32[4,6] parameter(0)
  k = f32[3,3,1,2] parameter(1)
  i = f32[1,8,8,1] parameter(2)
  s = f32[2,3] slice(a), slice={[0:4:2], [1:4]}
  z = f32[] constant(0)
  pd = f32[10,8] pad(a, z), padding=1_2_1x0_2
  t = f32[6,4] transpose(a), dimensions={1,0}
  d = f32[4,4] dot(a, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  cv = f32[1,8,8,2] convolution(i, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  cmp = pred[4,6] compare(a, a), direction=LT
  io = s32[5] iota(), iota_dimension=0
  c2 = f32[2,2] constant({{1, 2.5}, {-inf, nan}})
  ROOT tup = (f32[2,3], f32[10,8], f32[4,4], f32[1,8,8,2], pred[4,6], s32[5], f32[2,2]) tuple(s, pd, d, cv, cmp, io, c2)
}
)");
}

TEST(HloTextTest, WhileAndConditional) {
  ExpectFixedPoint(R"(
HloModule loops
cond {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  two = f32[] constant(2)
  x2 = f32[] multiply(x, two)
  ROOT t = (s32[], f32[]) tuple(i2, x2)
}
neg { a = f32[] parameter(0)
  ROOT n = f32[] negate(a) }
id { a = f32[] parameter(0)
  ROOT c = f32[] copy(a) }
ENTRY main {
  x = f32[] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[]) tuple(zero, x)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  r = f32[] get-tuple-element(w), index=1
  b = pred[] constant(true)
  ROOT c = f32[] conditional(b, r, r), true_computation=neg, false_computation=id
}
)");
}

TEST(HloTextTest, UnknownOpcodeNamesItAndTheLine) {
  auto m = ParseModule("ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[2] fft(a)\n}\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("line 3"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("'fft'"), std::string::npos);
}

// A header whose name is missing (or made of bytes that are not name
// characters) is an error: printed back, the module would parse to another.
TEST(HloTextTest, ModuleHeaderNeedsAName) {
  for (const std::string header : {std::string("HloModule\n"),
                                   std::string("HloModule \x01\x00Z m\n", 16)}) {
    auto m = ParseModule(header + "ENTRY main {\n  ROOT p = f32[] parameter(0)\n}\n");
    ASSERT_FALSE(m.ok()) << header;
    EXPECT_NE(m.status().message().find("expected a module name"), std::string::npos)
        << m.status();
  }
}

// Computations the entry does not call keep their order through printing
// and parsing, so the text and the fingerprint are a fixed point.
TEST(HloTextTest, UnreachableComputationsKeepTheirOrder) {
  auto first = ParseModule(R"(
HloModule m
one {
  ROOT a = f32[] parameter(0)
}
two {
  ROOT b = s32[] parameter(0)
}
three {
  ROOT c = u8[] parameter(0)
}
ENTRY main {
  ROOT p = f32[] parameter(0)
})");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Verify(**first).ok());
  const std::string printed = PrintModule(**first);
  auto second = ParseModule(printed);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(Verify(**second).ok());
  EXPECT_EQ(PrintModule(**second), printed);
  EXPECT_EQ(Fingerprint(**second), Fingerprint(**first));
  EXPECT_LT(printed.find("%one"), printed.find("%two"));
  EXPECT_LT(printed.find("%two"), printed.find("%three"));
}

TEST(HloTextTest, UnknownAttributeNamesIt) {
  auto m = ParseModule(
      "ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[2] negate(a), frobnicate=3\n}\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("frobnicate"), std::string::npos);
  EXPECT_NE(m.status().message().find("line 3"), std::string::npos);
}

TEST(HloTextTest, UnknownOperandIsAnError) {
  auto m = ParseModule("ENTRY e {\n  ROOT b = f32[2] negate(zzz)\n}\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown operand %zzz"), std::string::npos);
}

TEST(HloTextTest, ConstantValueCountMustMatch) {
  auto m = ParseModule("ENTRY e {\n  ROOT c = f32[3] constant({1, 2})\n}\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("needs 3"), std::string::npos);
}

TEST(HloTextTest, OldStyleConstantWithShapePrefix) {
  auto m = ParseModule("ENTRY e {\n  ROOT c = f32[2,2]{1,0} constant(f32[2,2]{1,0} { { 1, 2 }, { 3, 4 } })\n}\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->entry()->root()->attrs().literal.ToText(), "{{1, 2}, {3, 4}}");
}

TEST(HloTextTest, GarbageNeverCrashes) {
  const char* inputs[] = {"", "HloModule", "ENTRY {", "ENTRY e { a = }",
                          "ENTRY e { a = f32[2 parameter(0) }",
                          "ENTRY e { a = f32[2] constant({1,2}",
                          "ENTRY e { ROOT a = f32[] add(a, a) }",
                          "x { ROOT a = f32[] parameter(0) } x { ROOT a = f32[] parameter(0) }",
                          "ENTRY e { a = (f32[], ) tuple() }"};
  for (const char* in : inputs) {
    auto m = ParseModule(in);
    if (m.ok()) {
      EXPECT_FALSE(Verify(**m).ok()) << in;
    }
  }
}

}  // namespace
}  // namespace kiln::ir

namespace kiln::ir {
namespace {

TEST(HloTextTest, OperandPrecisionSurvivesTextProtoAndFingerprint) {
  constexpr char kText[] = R"(HloModule p
ENTRY main {
  a = f32[2,2] parameter(0)
  b = f32[2,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={HIGHEST,default}
})";
  auto m = ParseModule(kText);
  ASSERT_TRUE(m.ok()) << m.status();
  const Instruction* dot = (*m)->entry()->root();
  ASSERT_EQ(dot->attrs().operand_precision.size(), 2u);
  EXPECT_EQ(dot->attrs().operand_precision[0], Precision::kHighest);
  EXPECT_EQ(dot->attrs().operand_precision[1], Precision::kDefault);
  const std::string printed = PrintModule(**m);
  EXPECT_NE(printed.find("operand_precision={highest,default}"), std::string::npos) << printed;
  auto back = ModuleFromProto(ModuleToProto(**m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PrintModule(**back), printed);
  // Precision changes what a TPU computes, so it changes the fingerprint.
  std::string plain(kText);
  plain.erase(plain.find(", operand_precision"), std::string::npos);
  plain += "\n}";
  auto without = ParseModule(plain);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_NE(Fingerprint(**m), Fingerprint(**without));
  EXPECT_FALSE(ParseModule(std::string(kText).replace(std::string(kText).find("HIGHEST"), 7, "fastest")).ok());
}

}  // namespace
}  // namespace kiln::ir

namespace kiln::ir {
namespace {

// These faults stop the parser before a module exists; verifier_test.cc
// reaches the verifier's own checks for them from memory and the wire.
TEST(HloTextTest, ParserRejectsUnresolvableText) {
  struct {
    const char* text;
    const char* problem;
  } cases[] = {
      {"ENTRY e {\n a = f32[2] parameter(0)\n z = f32[] constant(0)\n"
       " ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=nothere\n}",
       "line 4: unknown computation %nothere"},
      {"ENTRY e {\n a = f32[2] add(b, b)\n b = f32[2] negate(a)\n"
       " ROOT c = f32[2] copy(b)\n}",
       "cycle through instruction"},
      {"ENTRY e {\n ROOT a = f32[1048576,1048576,1048576] parameter(0)\n}",
       "overflows the limit"},
      {"ENTRY e {\n a = f32[] parameter(0)\n ROOT a = f32[] negate(a)\n}",
       "duplicate instruction name %a in e"},
  };
  for (const auto& c : cases) {
    auto m = ParseModule(c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(c.problem), std::string::npos)
        << "want: " << c.problem << "\ngot:  " << m.status();
  }
}

}  // namespace
}  // namespace kiln::ir

namespace kiln::ir {
namespace {

// A string attribute holds any bytes: the printer escapes them and the
// parser reads the escapes back, so text, wire form and fingerprint agree.
TEST(HloTextTest, StringAttributesKeepAnyBytes) {
  const std::string bytes("a\0b\"c\\d\ne\x7f\xff,}", 14);
  auto m = ParseModule(R"(
ENTRY e {
  a = f32[2] parameter(0)
  t = token[] after-all()
  f = ((f32[2]), token[]) infeed(t), infeed_config="x"
  o = token[] outfeed(a, t), outfeed_config="y"
  ROOT c = f32[2] custom-call(a), custom_call_target="z"
})");
  ASSERT_TRUE(m.ok()) << m.status();
  for (const auto& instr : (*m)->entry()->instructions()) {
    if (instr->opcode() == Opcode::kCustomCall) instr->mutable_attrs().custom_call_target = bytes;
    if (instr->opcode() == Opcode::kInfeed || instr->opcode() == Opcode::kOutfeed) {
      instr->mutable_attrs().config = bytes;
    }
  }
  ASSERT_TRUE(Verify(**m).ok()) << Verify(**m);
  const std::string printed = PrintModule(**m);
  auto again = ParseModule(printed);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(PrintModule(**again), printed);
  EXPECT_EQ(Fingerprint(**again), Fingerprint(**m));
  int checked = 0;
  for (const auto& instr : (*again)->entry()->instructions()) {
    if (instr->opcode() == Opcode::kCustomCall) {
      EXPECT_EQ(instr->attrs().custom_call_target, bytes);
      ++checked;
    }
    if (instr->opcode() == Opcode::kInfeed || instr->opcode() == Opcode::kOutfeed) {
      EXPECT_EQ(instr->attrs().config, bytes);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);
}

TEST(HloTextTest, StringAttributesMustBeQuoted) {
  const std::string head = "ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT c = f32[2] custom-call(a), ";
  for (const std::string& value : {std::string("foo"), std::string("\0\0\"foo\"", 7),
                                   std::string("\"bad\\q\"")}) {
    auto m = ParseModule(head + "custom_call_target=" + value + "\n}\n");
    ASSERT_FALSE(m.ok()) << value;
    EXPECT_NE(m.status().message().find("line 3"), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find("quoted string"), std::string::npos) << m.status();
  }
}

}  // namespace
}  // namespace kiln::ir

namespace kiln::ir {
namespace {

// A LAPACK call's options print as XLA writes them ({mode = 65 : ui8})
// only where the parser reads that text back whole; any other config (from
// the wire) prints quoted, and either form parses.
TEST(HloTextTest, BackendConfigsPrintInAFormThatParses) {
  auto m = ParseModule(R"(ENTRY e {
  a = f32[0,3] parameter(0)
  ROOT c = (f32[0,3], f32[0], f32[0,0], f32[3,3], s32[]) custom-call(a), custom_call_target="lapack_sgesdd_ffi", backend_config={mode = 65 : ui8}
})");
  ASSERT_TRUE(m.ok()) << m.status();
  Instruction* call = (*m)->entry()->root();
  ASSERT_EQ(call->opcode(), Opcode::kCustomCall);
  EXPECT_NE(PrintModule(**m).find("backend_config={mode = 65 : ui8}"), std::string::npos)
      << PrintModule(**m);
  for (const std::string config : {"{mode = 65 : ui8}{}", "{mode = 65 : ui8}, x=1", "a, b",
                                   "{mode = 65 : ui8", "}{"}) {
    call->mutable_attrs().config = config;
    const std::string printed = PrintModule(**m);
    EXPECT_EQ(printed.find("backend_config={"), std::string::npos) << printed;
    EXPECT_NE(printed.find("backend_config=\""), std::string::npos) << printed;
    // Parsing reads the quoted text back as the config it was; whether the
    // call accepts those options is the lowering's verdict, never a misread.
    auto again = ParseModule(printed);
    if (!again.ok()) {
      EXPECT_NE(again.status().message().find("backend_config"), std::string::npos)
          << again.status();
    }
  }
}

}  // namespace
}  // namespace kiln::ir
