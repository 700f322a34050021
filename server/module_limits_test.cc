// Each module limit refuses a module just past it, naming its flag, and
// admits one at it.
#include "server/module_limits.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto m = ir::ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(ir::Verify(**m).ok());
  return *std::move(m);
}

void ExpectRefusedNaming(const absl::Status& st, const std::string& flag) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(flag), std::string::npos) << st;
}

constexpr char kThreeOps[] = R"(ENTRY e {
  x = f32[2,2,2] parameter(0)
  c = f32[2,2,2] constant({{{1,2},{3,4}},{{5,6},{7,8}}})
  ROOT a = f32[2,2,2] add(x, c)
})";

TEST(ModuleLimitsTest, InstructionsComputationsBytesAndConstants) {
  const v1::ModuleProto proto = ir::ModuleToProto(*Parse(kThreeOps));
  ModuleLimits limits;
  EXPECT_TRUE(CheckModuleProto(proto, limits).ok());
  limits.instructions = 3;
  EXPECT_TRUE(CheckModuleProto(proto, limits).ok());
  limits.instructions = 2;
  ExpectRefusedNaming(CheckModuleProto(proto, limits), "--max_instructions");

  limits = ModuleLimits();
  limits.computations = 0;
  ExpectRefusedNaming(CheckModuleProto(proto, limits), "--max_computations");

  limits = ModuleLimits();
  limits.literal_bytes = 32;  // the constant's 8 floats
  EXPECT_TRUE(CheckModuleProto(proto, limits).ok());
  limits.literal_bytes = 31;
  ExpectRefusedNaming(CheckModuleProto(proto, limits), "--max_literal_bytes");

  limits = ModuleLimits();
  limits.module_bytes = static_cast<int64_t>(proto.ByteSizeLong());
  EXPECT_TRUE(CheckModuleProto(proto, limits).ok());
  limits.module_bytes -= 1;
  ExpectRefusedNaming(CheckModuleProto(proto, limits), "--max_module_bytes");
}

TEST(ModuleLimitsTest, RankAndCallDepth) {
  std::unique_ptr<ir::Module> m = Parse(kThreeOps);
  ModuleLimits limits;
  limits.rank = 3;
  EXPECT_TRUE(CheckModule(*m, limits).ok());
  limits.rank = 2;
  ExpectRefusedNaming(CheckModule(*m, limits), "--max_rank");

  // entry -> c1 -> c2 -> c3: a chain of 4.
  std::string text;
  for (int i = 3; i >= 1; --i) {
    text += absl::StrCat("c", i, " {\n  p = f32[] parameter(0)\n  ROOT r = f32[] ",
                         i == 3 ? "negate(p)" : absl::StrCat("call(p), to_apply=c", i + 1),
                         "\n}\n");
  }
  text += "ENTRY e {\n  x = f32[] parameter(0)\n  ROOT r = f32[] call(x), to_apply=c1\n}\n";
  std::unique_ptr<ir::Module> chain = Parse(text);
  limits = ModuleLimits();
  limits.call_depth = 4;
  EXPECT_TRUE(CheckModule(*chain, limits).ok());
  limits.call_depth = 3;
  ExpectRefusedNaming(CheckModule(*chain, limits), "--max_call_depth");
}

}  // namespace
}  // namespace kiln::server
