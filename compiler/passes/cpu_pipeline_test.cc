#include "compiler/passes/cpu_pipeline.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/passes/buffer_assignment.h"
#include "compiler/passes/test_util.h"
#include "compiler/passes/tpu_pipeline.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(KILN_SOURCE_DIR) / "tests/data/hlo";

std::vector<std::string> CorpusModules() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().extension() == ".hlo")
      names.push_back(entry.path().stem());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Large enough that the broadcasts stay broadcasts.
TEST(CpuPipelineTest, SimplifiesFoldsMergesAndCleansUp) {
  auto module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[70,50] parameter(0)
  b = f32[70,30] parameter(1)
  two = f32[] constant(2)
  three = f32[] constant(3)
  six = f32[] multiply(two, three)
  zero = f32[] constant(-0)
  zeros = f32[50,30] broadcast(zero), dimensions={}
  at = f32[50,70] transpose(a), dimensions={1,0}
  d1 = f32[50,30] dot(at, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[50,30] dot(at, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[50,30] add(d1, zeros)
  sixes = f32[50,30] broadcast(six), dimensions={}
  scaled = f32[50,30] multiply(s, sixes)
  r1 = f32[1500] reshape(d2)
  half = f32[] constant(0.5)
  halves = f32[50,30] broadcast(half), dimensions={}
  ones = f32[50,30] add(halves, halves)
  ones_again = f32[50,30] multiply(sixes, ones)
  r2 = f32[50,30] reshape(r1)
  sum = f32[50,30] add(scaled, r2)
  ROOT out = f32[50,30] subtract(sum, ones_again)
}
)");
  ASSERT_NE(module, nullptr);
  std::unique_ptr<Pipeline> cpu = CpuPipeline(/*verify=*/true);
  absl::StatusOr<bool> changed = cpu->Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  // The elementwise tail is one loop that expands the broadcast itself.
  EXPECT_EQ(Structure(*module), Structure(R"(
HloModule m
fused_computation {
  p0 = f32[50,30] parameter(0)
  p1 = f32[] parameter(1)
  sixes = f32[50,30] broadcast(p1), dimensions={}
  scaled = f32[50,30] multiply(p0, sixes)
  sum = f32[50,30] add(scaled, p0)
  ROOT out = f32[50,30] subtract(sum, sixes)
}
ENTRY main {
  a = f32[70,50] parameter(0)
  b = f32[70,30] parameter(1)
  d = f32[50,30] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  six = f32[] constant(6)
  ROOT fusion = f32[50,30] call(d, six), to_apply=fused_computation
}
)")) << ir::PrintModule(*module);
  // A fixed point: running again changes nothing.
  changed = cpu->Run(module.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

class PipelineCorpusTest : public ::testing::TestWithParam<std::string> {};

// Every corpus module goes through `make`'s pipeline with the verifier
// after each pass, keeps its signature and reaches a fixed point. (That
// results stay the same is checked where modules run: runtime/cpu and
// runtime/tpusim.)
void CheckCorpusModule(const std::string& name, std::unique_ptr<Pipeline> (*make)(bool)) {
  std::ifstream in(kCorpus / (name + ".hlo"));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  const std::vector<ir::Shape> params = module->entry()->ParameterShapes();
  const ir::Shape result = module->entry()->root()->shape();
  std::unique_ptr<Pipeline> pipeline = make(/*verify=*/true);
  absl::StatusOr<bool> changed = pipeline->Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_TRUE(ir::Verify(*module).ok());
  EXPECT_EQ(module->entry()->ParameterShapes(), params);
  EXPECT_EQ(module->entry()->root()->shape(), result);
  changed = pipeline->Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << ir::PrintModule(*module);
}

TEST_P(PipelineCorpusTest, CpuVerifiesAndKeepsTheSignature) {
  CheckCorpusModule(GetParam(), [](bool verify) { return CpuPipeline(verify); });
}

TEST_P(PipelineCorpusTest, TpuVerifiesAndKeepsTheSignature) {
  CheckCorpusModule(GetParam(), &TpuPipeline);
}

// After the CPU pipeline, every computation's arena arrays are sound: each
// lives from its instruction to no earlier than its last reader and ends
// inside the computation (an output's value takes none).
TEST_P(PipelineCorpusTest, CpuArenaArraysLiveFromTheirWriteToTheirLastRead) {
  std::ifstream in(kCorpus / (GetParam() + ".hlo"));
  auto module = Parse(std::string(std::istreambuf_iterator<char>(in), {}));
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(CpuPipeline(/*verify=*/true)->Run(module.get()).ok());
  for (const auto& c : module->computations()) {
    const BufferAssignment a = AssignBuffers(*c);
    const int n = c->instruction_count();
    std::vector<int> until(n, -1);
    for (const BufferAssignment::Slice& x : a.slices) {
      const ir::Instruction& instr = *c->instructions()[x.instruction];
      EXPECT_LT(x.live_until, n) << "an output's value in the arena: " << instr.name();
      EXPECT_GE(x.live_until, x.instruction);
      EXPECT_TRUE(FreshResult(instr)) << instr.name();
      until[x.instruction] = x.live_until;
    }
    for (const auto& user : c->instructions()) {
      for (const ir::Instruction* o : user->operands()) {
        if (until[o->index()] >= 0) {
          EXPECT_LE(user->index(), until[o->index()]) << o->name() << " read after its slice ends";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, PipelineCorpusTest,
                         ::testing::ValuesIn(CorpusModules()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::passes
