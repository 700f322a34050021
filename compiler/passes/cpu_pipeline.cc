#include "compiler/passes/cpu_pipeline.h"

#include "compiler/passes/algebraic_simplifier.h"
#include "compiler/passes/constant_folding.h"
#include "compiler/passes/convolution_fusion.h"
#include "compiler/passes/convolution_layout.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/dot_bias_fusion.h"
#include "compiler/passes/dot_fusion.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/reduction_fusion.h"

namespace kiln::passes {

Pipeline& AddSimplify(Pipeline& pipeline, bool verify) {
  // Each pass opens work for the others: folding makes constants the
  // simplifier recognizes, simplifying makes duplicates CSE merges, and DCE
  // drops what they leave behind.
  Pipeline& simplify = pipeline.AddPass<Pipeline>(
      "simplify",
      PipelineOptions{.max_iterations = kCpuSimplifyRounds, .verify = verify});
  simplify.AddPass<AlgebraicSimplifier>();
  simplify.AddPass<ConstantFolding>();
  simplify.AddPass<Cse>();
  simplify.AddPass<Dce>();
  return simplify;
}

std::unique_ptr<Pipeline> CpuPipeline(bool verify, LoopFusionOptions fusion,
                                      bool dot_bias_fusion) {
  auto pipeline = std::make_unique<Pipeline>(
      "cpu", PipelineOptions{.max_iterations = 1, .verify = verify});
  AddSimplify(*pipeline, verify);
  pipeline->AddPass<ConvolutionLayout>();
  pipeline->AddPass<DotFusion>();
  if (dot_bias_fusion) pipeline->AddPass<DotBiasFusion>();
  pipeline->AddPass<ConvolutionFusion>();
  pipeline->AddPass<LoopFusion>(fusion);
  pipeline->AddPass<ReductionFusion>();
  return pipeline;
}

}  // namespace kiln::passes
