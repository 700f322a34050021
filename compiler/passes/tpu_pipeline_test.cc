#include "compiler/passes/tpu_pipeline.h"

#include "compiler/passes/test_util.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

// A fusion as XLA dumps it is inlined, and its work then simplifies with
// the caller's: the double negation across the boundary cancels.
TEST(TpuPipelineTest, InlinesFusionsThenSimplifiesAcrossThem) {
  auto module = Parse(R"(
HloModule m
fused {
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p)
}
ENTRY main {
  x = f32[8] parameter(0)
  f = f32[8] fusion(x), kind=kLoop, calls=fused
  n2 = f32[8] negate(f)
  ROOT e = f32[8] exponential(n2)
}
)");
  std::unique_ptr<Pipeline> tpu = TpuPipeline(/*verify=*/true);
  absl::StatusOr<bool> changed = tpu->Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
ENTRY main {
  x = f32[8] parameter(0)
  ROOT e = f32[8] exponential(x)
}
)"));
}

}  // namespace
}  // namespace kiln::passes
