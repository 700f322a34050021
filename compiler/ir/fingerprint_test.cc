#include "compiler/ir/fingerprint.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

std::string FingerprintOf(absl::string_view text) {
  auto m = ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return "";
  EXPECT_TRUE(Verify(**m).ok());
  return Fingerprint(**m);
}

constexpr absl::string_view kBase = R"(
HloModule m
add { x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y) }
ENTRY main {
  p = f32[2,3] parameter(0)
  c = f32[] constant(0)
  n = f32[2,3] negate(p)
  ROOT r = f32[3] reduce(n, c), dimensions={0}, to_apply=add
}
)";

TEST(FingerprintTest, Sha256MatchesTheStandardVectors) {
  // FIPS 180-2 test vectors: the hash is SHA-256, the same in every process.
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(FingerprintOf(kBase).size(), 64u);
  // A fixed module's fingerprint must not change unless the canonical form
  // does (a persistent cache would lose every entry).
  EXPECT_EQ(FingerprintOf(kBase), FingerprintOf(std::string(kBase)));
}

// Constants count at full precision: every bit of every element.
TEST(FingerprintTest, ConstantsCountBitForBit) {
  auto scalar = [](const std::string& type, const std::string& value) {
    return FingerprintOf(absl::StrCat("ENTRY e {\n ROOT c = ", type, "[] constant(", value, ")\n}"));
  };
  // 0.1f and its neighbour differ in the last bit of the mantissa; they
  // differ after the 7th significant digit.
  EXPECT_NE(scalar("f32", "0.1"), scalar("f32", "0.100000009"));
  EXPECT_NE(scalar("f32", "1.00000012"), scalar("f32", "1"));
  EXPECT_NE(scalar("f64", "0.1"), scalar("f64", "0.10000000000000002"));
  EXPECT_NE(scalar("f32", "0"), scalar("f32", "-0"));
  EXPECT_NE(scalar("f32", "inf"), scalar("f32", "-inf"));
  // Equal values in other spellings are the same program.
  EXPECT_EQ(scalar("f32", "0.1"), scalar("f32", "0.10000000149011612"));
  EXPECT_EQ(scalar("s32", "7"), scalar("s32", "0007"));
}

TEST(FingerprintTest, ArrayConstantsCountEveryElement) {
  auto array = [](const std::string& values) {
    return FingerprintOf(absl::StrCat("ENTRY e {\n ROOT c = f32[2,3] constant(", values, ")\n}"));
  };
  const std::string base = array("{{1, 2, 3}, {4, 5, 6}}");
  EXPECT_NE(base, array("{{1, 2, 3}, {4, 5, 7}}"));
  EXPECT_NE(base, array("{{1, 2, 3}, {4, 5.00000048, 6}}"));
  EXPECT_NE(base, array("{{4, 5, 6}, {1, 2, 3}}"));
  EXPECT_EQ(base, array("{{1, 2, 3}, {4, 5, 6}}"));
}

// Two NaNs print alike but are different constants (a program may inspect
// the payload with bitcast-convert): they must not share a cache entry.
TEST(FingerprintTest, NanPayloadsAreDifferentPrograms) {
  auto module = [](uint32_t bits) {
    auto m = ParseModule("ENTRY e {\n ROOT c = f32[] constant(nan)\n}");
    EXPECT_TRUE(m.ok()) << m.status();
    Literal& literal = (*m)->entry()->root()->mutable_attrs().literal;
    std::memcpy(literal.mutable_bytes().data(), &bits, 4);
    EXPECT_TRUE(Verify(**m).ok());
    return std::move(*m);
  };
  auto quiet = module(0x7fc00000u);
  auto payload = module(0x7fc00001u);
  auto same = module(0x7fc00000u);
  EXPECT_EQ(PrintModule(*quiet), PrintModule(*payload));  // the text cannot tell
  EXPECT_NE(Fingerprint(*quiet), Fingerprint(*payload));
  EXPECT_EQ(Fingerprint(*quiet), Fingerprint(*same));
}

TEST(FingerprintTest, IgnoresNamesMetadataAndPrinting) {
  std::string base = FingerprintOf(kBase);
  std::string renamed = FingerprintOf(R"(
HloModule other_name
%sum (a: f32[], b: f32[]) -> f32[] { %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %t = f32[] add(f32[] %a, f32[] %b) }
ENTRY %entry {
  %zero = f32[] constant(0)
  %input = f32[2,3]{1,0} parameter(0), metadata={op_name="x"}
  %neg = f32[2,3] negate(%input)
  ROOT %out = f32[3] reduce(%neg, %zero), dimensions={0}, to_apply=%sum
}
)");
  EXPECT_EQ(base, renamed);
  auto m = ParseModule(kBase);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(Verify(**m).ok());
  EXPECT_EQ(FingerprintOf(PrintModule(**m)), base);
}

TEST(FingerprintTest, SemanticChangesAlterIt) {
  std::string base = FingerprintOf(kBase);
  auto variant = [&](const std::string& from, const std::string& to) {
    std::string text(kBase);
    size_t pos = text.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    text.replace(pos, from.size(), to);
    return FingerprintOf(text);
  };
  EXPECT_NE(base, variant("constant(0)", "constant(1)"));
  EXPECT_NE(base, variant("negate(p)", "abs(p)"));
  EXPECT_NE(base, variant("ROOT s = f32[] add", "ROOT s = f32[] multiply"));
  EXPECT_NE(base, variant("f32[3] reduce(n, c), dimensions={0}",
                          "f32[2] reduce(n, c), dimensions={1}"));
  EXPECT_NE(base, variant("ROOT s = f32[] add(x, y)", "ROOT s = f32[] add(y, x)"));
}

TEST(FingerprintTest, F32ConstantsDifferingPastTheSixthDigitDiffer) {
  // The fingerprint hashes the printed module, so a constant must print
  // every digit it needs to read back: 1.0000001f and 1.0000002f agree to
  // six significant digits but are different programs.
  const std::string one = FingerprintOf(
      "ENTRY e {\n ROOT c = f32[] constant(1.0000001)\n}");
  const std::string two = FingerprintOf(
      "ENTRY e {\n ROOT c = f32[] constant(1.0000002)\n}");
  EXPECT_NE(one, two);
  auto m = ParseModule("ENTRY e {\n ROOT c = f32[2] constant({1.0000001, 0.1})\n}");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NE(PrintModule(**m).find("{1.0000001, 0.1}"), std::string::npos) << PrintModule(**m);
}

TEST(FingerprintTest, ShapeChangeAltersIt) {
  std::string a = FingerprintOf("ENTRY e {\n ROOT p = f32[2] parameter(0)\n}");
  std::string b = FingerprintOf("ENTRY e {\n ROOT p = f32[3] parameter(0)\n}");
  std::string c = FingerprintOf("ENTRY e {\n ROOT p = s32[2] parameter(0)\n}");
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace kiln::ir
