#include "compiler/passes/convolution_layout.h"

#include <string>

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

int Count(const ir::Module& module, ir::Opcode op) {
  int n = 0;
  for (const auto& instr : module.entry()->instructions()) n += instr->opcode() == op ? 1 : 0;
  return n;
}

// A channels-first image and OIHW kernel transposed for a channels-last
// convolution: the transposes fold into the dimension numbers.
TEST(ConvolutionLayoutTest, TransposedOperandsAreReadWhereTheyLie) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[2,3,8,8] parameter(0)
  k = f32[4,3,3,3] parameter(1)
  xt = f32[2,8,8,3] transpose(x), dimensions={0,2,3,1}
  kt = f32[3,3,3,4] transpose(k), dimensions={2,3,1,0}
  ROOT c = f32[2,6,6,4] convolution(xt, kt), window={size=3x3}, dim_labels=b01f_01io->b01f
}
)");
  ASSERT_NE(module, nullptr);
  ConvolutionLayout pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[2,3,8,8] parameter(0)
  k = f32[4,3,3,3] parameter(1)
  ROOT c = f32[2,6,6,4] convolution(x, k), window={size=3x3}, dim_labels=bf01_oi01->b01f
}
)"));
}

// A transpose that is the convolution's one reader becomes its output
// layout; a transpose of a convolution read elsewhere too stays.
TEST(ConvolutionLayoutTest, ATransposedResultIsWrittenInItsLayout) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  c = f32[2,6,6,4] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f
  ROOT t = f32[2,4,6,6] transpose(c), dimensions={0,3,1,2}
}
)");
  ASSERT_NE(module, nullptr);
  ConvolutionLayout pass;
  EXPECT_TRUE(RunPass(pass, *module));
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  ROOT c = f32[2,4,6,6] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->bf01
}
)"));

  auto shared = Parse(R"(
HloModule m
ENTRY main {
  x = f32[2,8,8,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  c = f32[2,6,6,4] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f
  t = f32[2,4,6,6] transpose(c), dimensions={0,3,1,2}
  ROOT r = (f32[2,4,6,6], f32[2,6,6,4]) tuple(t, c)
}
)");
  ASSERT_NE(shared, nullptr);
  EXPECT_FALSE(RunPass(pass, *shared));
  EXPECT_EQ(Count(*shared, ir::Opcode::kTranspose), 1);
}

}  // namespace
}  // namespace kiln::passes
