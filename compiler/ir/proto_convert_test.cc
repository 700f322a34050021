#include "compiler/ir/proto_convert.h"

#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

TEST(ProtoConvertTest, ModuleRoundTripKeepsTextAndFingerprint) {
  auto m = ParseModule(R"(
HloModule rt
max { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
ENTRY e {
  x = f32[1,4,4,1] parameter(0)
  init = f32[] constant(-inf)
  rw = f32[1,2,2,1] reduce-window(x, init), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
  k = f32[2,2,1,3] constant({{{{1,2,3}}, {{4,5,6}}}, {{{7,8,9}}, {{1,1,1}}}})
  cv = f32[1,3,3,3] convolution(x, k), window={size=2x2}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[1,2,2,1], f32[1,3,3,3]) tuple(rw, cv)
}
)");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(Verify(**m).ok());
  v1::ModuleProto proto = ModuleToProto(**m);
  std::string bytes;
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  v1::ModuleProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto back = ModuleFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(Verify(**back).ok()) << Verify(**back);
  EXPECT_EQ(PrintModule(**back), PrintModule(**m));
  EXPECT_EQ(Fingerprint(**back), Fingerprint(**m));
}

TEST(ProtoConvertTest, MalformedProtoIsAnError) {
  v1::ModuleProto proto;
  auto* c = proto.add_computations();
  c->set_id(0);
  c->set_name("e");
  auto* i = c->add_instructions();
  i->set_id(0);
  i->set_name("a");
  i->set_opcode("negate");
  i->mutable_shape()->set_element_type(v1::F32);
  i->add_operand_ids(7);
  c->set_root_id(0);
  auto m = ModuleFromProto(proto);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("operand id 7"), std::string::npos);

  i->clear_operand_ids();
  i->set_opcode("frobnicate");
  m = ModuleFromProto(proto);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown opcode"), std::string::npos);
}

TEST(ProtoConvertTest, LiteralSizeChecked) {
  v1::LiteralProto lit;
  lit.mutable_shape()->set_element_type(v1::F32);
  lit.mutable_shape()->add_dims(4);
  lit.set_data(std::string(8, '\0'));
  auto l = LiteralFromProto(lit);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("needs 16 bytes, got 8"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ir
