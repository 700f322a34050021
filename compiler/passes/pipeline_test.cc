#include "compiler/passes/pipeline.h"

#include <string>
#include <vector>

#include "compiler/passes/cpu_pipeline.h"
#include "compiler/passes/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::string_view kModule = R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT a = f32[4] add(x, n)
}
)";

// Records its runs in a shared log and reports a change for its first
// `changes` runs.
class CountingPass : public Pass {
 public:
  CountingPass(std::string name, std::vector<std::string>* log, int changes)
      : name_(std::move(name)), log_(log), changes_left_(changes) {}
  absl::string_view name() const override { return name_; }
  absl::StatusOr<bool> Run(ir::Module*) override {
    log_->push_back(name_);
    if (changes_left_ == 0) return false;
    --changes_left_;
    return true;
  }

 private:
  std::string name_;
  std::vector<std::string>* log_;
  int changes_left_;
};

// Declares a wrong shape on the instruction named `victim`.
class BreakingPass : public Pass {
 public:
  explicit BreakingPass(std::string victim) : victim_(std::move(victim)) {}
  absl::string_view name() const override { return "breaker"; }
  absl::StatusOr<bool> Run(ir::Module* module) override {
    for (const auto& instr : module->entry()->instructions()) {
      if (instr->name() == victim_) {
        instr->set_shape(ir::Shape(ir::ElementType::kF32, {5}));
      }
    }
    return true;
  }

 private:
  std::string victim_;
};

class FailingPass : public Pass {
 public:
  absl::string_view name() const override { return "failing"; }
  absl::StatusOr<bool> Run(ir::Module*) override {
    return absl::UnimplementedError("cannot handle this");
  }
};

TEST(PipelineTest, RunsPassesInOrderOnce) {
  std::vector<std::string> log;
  Pipeline pipeline("p");
  pipeline.AddPass<CountingPass>("a", &log, 5);
  pipeline.AddPass<CountingPass>("b", &log, 0);
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_THAT(log, ElementsAre("a", "b"));
}

TEST(PipelineTest, NoChangeReportsFalse) {
  std::vector<std::string> log;
  Pipeline pipeline("p", {.max_iterations = 3});
  pipeline.AddPass<CountingPass>("a", &log, 0);
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_THAT(log, ElementsAre("a"));
}

TEST(PipelineTest, RepeatsUntilARoundChangesNothing) {
  std::vector<std::string> log;
  Pipeline pipeline("p", {.max_iterations = 10});
  pipeline.AddPass<CountingPass>("a", &log, 2);
  pipeline.AddPass<CountingPass>("b", &log, 0);
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  // Two rounds that change, one that confirms the fixed point.
  EXPECT_THAT(log, ElementsAre("a", "b", "a", "b", "a", "b"));
}

TEST(PipelineTest, StopsAtTheIterationBound) {
  std::vector<std::string> log;
  Pipeline pipeline("p", {.max_iterations = 3});
  pipeline.AddPass<CountingPass>("forever", &log, 1000);
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(log.size(), 3u);
}

TEST(PipelineTest, NestedPipelineRunsToItsOwnFixedPoint) {
  std::vector<std::string> log;
  Pipeline outer("outer");
  outer.AddPass<CountingPass>("first", &log, 0);
  Pipeline& inner =
      outer.AddPass<Pipeline>("inner", PipelineOptions{.max_iterations = 5});
  inner.AddPass<CountingPass>("x", &log, 1);
  outer.AddPass<CountingPass>("last", &log, 0);
  EXPECT_EQ(outer.Describe(), "outer(first, inner(x), last)");
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = outer.Run(module.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_THAT(log, ElementsAre("first", "x", "x", "last"));
}

TEST(PipelineTest, VerificationNamesThePassThatBrokeTheModule) {
  std::vector<std::string> log;
  Pipeline pipeline("p", {.verify = true});
  pipeline.AddPass<CountingPass>("fine", &log, 0);
  pipeline.AddPass<BreakingPass>("n");
  pipeline.AddPass<CountingPass>("never", &log, 0);
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(changed.status().message(),
              HasSubstr("pass breaker in pipeline p left an invalid module"));
  EXPECT_THAT(changed.status().message(), HasSubstr("instruction n"));
  EXPECT_THAT(log, ElementsAre("fine"));
}

TEST(PipelineTest, WithoutVerificationABrokenModulePassesThrough) {
  Pipeline pipeline("p", {.verify = false});
  pipeline.AddPass<BreakingPass>("n");
  auto module = Parse(kModule);
  EXPECT_TRUE(pipeline.Run(module.get()).ok());
  EXPECT_FALSE(ir::Verify(*module).ok());
}

TEST(PipelineTest, ChangingTheEntrySignatureIsAnError) {
  // Even unverified: clients are told the shapes the module declared.
  Pipeline pipeline("p", {.verify = false});
  pipeline.AddPass<BreakingPass>("a");
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(changed.status().message(),
              HasSubstr("pass breaker in pipeline p changed the entry "
                        "signature from (f32[4]) -> f32[4] to (f32[4]) -> "
                        "f32[5]"));
}

TEST(PipelineTest, PassErrorsNameThePass) {
  Pipeline pipeline("p");
  pipeline.AddPass<FailingPass>();
  auto module = Parse(kModule);
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(changed.status().message(), "pass failing: cannot handle this");
}

TEST(PipelineTest, AVerifyingPipelineRejectsAnInvalidModule) {
  std::vector<std::string> log;
  Pipeline pipeline("p", {.verify = true});
  pipeline.AddPass<CountingPass>("a", &log, 0);
  auto module = Parse(kModule);
  BreakingPass breaker("n");
  ASSERT_TRUE(breaker.Run(module.get()).ok());
  absl::StatusOr<bool> changed = pipeline.Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(changed.status().message(),
              HasSubstr("module given to pipeline p is invalid"));
  EXPECT_TRUE(log.empty());
}

TEST(PipelineTest, VerifiesByDefaultOnlyInDebugBuilds) {
  EXPECT_EQ(PipelineOptions().verify, kVerifyBetweenPasses);
#ifdef NDEBUG
  EXPECT_FALSE(kVerifyBetweenPasses);
#else
  EXPECT_TRUE(kVerifyBetweenPasses);
#endif
}

TEST(CpuPipelineTest, SimplifiesToAFixedPointThenFuses) {
  std::unique_ptr<Pipeline> cpu = CpuPipeline(/*verify=*/true);
  EXPECT_EQ(cpu->Describe(),
            "cpu(simplify(algebraic-simplifier, constant-folding, cse, dce), convolution-layout, "
            "dot-fusion, dot-bias-fusion, "
            "convolution-fusion, "
            "loop-fusion, reduction-fusion)");
  EXPECT_TRUE(cpu->options().verify);
}

}  // namespace
}  // namespace kiln::passes
