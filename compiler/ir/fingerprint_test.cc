#include "compiler/ir/fingerprint.h"

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

TEST(FingerprintTest, StableValueAcrossProcesses) {
  // The hash is a fixed function of the canonical text: this value must never
  // change unless the canonical form does.
  EXPECT_EQ(StableHash128("kiln"), "63d152d627976b059d740f911d9b4dbf");
  EXPECT_NE(StableHash128("kiln"), StableHash128("kilo"));
  EXPECT_EQ(StableHash128("").size(), 32u);
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

TEST(FingerprintTest, ShapeChangeAltersIt) {
  std::string a = FingerprintOf("ENTRY e {\n ROOT p = f32[2] parameter(0)\n}");
  std::string b = FingerprintOf("ENTRY e {\n ROOT p = f32[3] parameter(0)\n}");
  std::string c = FingerprintOf("ENTRY e {\n ROOT p = s32[2] parameter(0)\n}");
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace kiln::ir
