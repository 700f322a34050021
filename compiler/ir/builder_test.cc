#include "compiler/ir/builder.h"

#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

TEST(BuilderTest, InfersShapesAndVerifies) {
  Module m("built");
  Computation* add = Builder::ScalarBinary(&m, Opcode::kAdd, ElementType::kF32);
  ASSERT_NE(add, nullptr);
  Builder b(&m, "main");
  Instruction* x = b.Parameter(0, Shape(ElementType::kF32, {2, 3}), "x");
  Instruction* w = b.Parameter(1, Shape(ElementType::kF32, {3, 4}), "w");
  Instruction* d = b.Dot(x, w, DotDims{{}, {}, {1}, {0}});
  Instruction* zero = b.ConstantScalar(ElementType::kF32, 0.0f);
  Instruction* r = b.Reduce(d, zero, {1}, add);
  auto comp = b.Build(r);
  ASSERT_TRUE(comp.ok()) << comp.status();
  m.set_entry(*comp);
  EXPECT_EQ(d->shape().ToString(), "f32[2,4]");
  EXPECT_EQ(r->shape().ToString(), "f32[2]");
  EXPECT_TRUE(Verify(m).ok());
}

TEST(BuilderTest, FirstErrorSticks) {
  Module m("bad");
  Builder b(&m, "main");
  Instruction* x = b.Parameter(0, Shape(ElementType::kF32, {2}), "x");
  Instruction* y = b.Parameter(1, Shape(ElementType::kF32, {3}), "y");
  EXPECT_EQ(b.Binary(Opcode::kAdd, x, y), nullptr);
  EXPECT_EQ(b.Unary(Opcode::kNegate, x), nullptr);
  auto comp = b.Build();
  ASSERT_FALSE(comp.ok());
  EXPECT_NE(comp.status().message().find("add: operand shapes differ"),
            std::string::npos)
      << comp.status();
}

}  // namespace
}  // namespace kiln::ir
