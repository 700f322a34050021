// The passes the CPU backend runs before it compiles a module.
#ifndef KILN_COMPILER_PASSES_CPU_PIPELINE_H_
#define KILN_COMPILER_PASSES_CPU_PIPELINE_H_

#include <memory>

#include "compiler/passes/fusion.h"
#include "compiler/passes/pipeline.h"

namespace kiln::passes {

// Rounds of algebraic simplification, constant folding, CSE and DCE until
// none changes anything.
inline constexpr int kCpuSimplifyRounds = 8;

// Appends "simplify" (algebraic-simplifier, constant-folding, cse, dce)
// repeated to a fixed point, at most kCpuSimplifyRounds rounds.
Pipeline& AddSimplify(Pipeline& pipeline, bool verify);

// The CPU pipeline: "simplify" (algebraic-simplifier, constant-folding,
// cse, dce) repeated to a fixed point, at most kCpuSimplifyRounds rounds,
// then convolution-layout (convolution_layout.h), dot-fusion
// (dot_fusion.h), dot-bias-fusion (dot_bias_fusion.h),
// convolution-fusion (convolution_fusion.h), loop-fusion (fusion.h) and
// reduction-fusion (reduction_fusion.h).
// `verify` runs the verifier before and after every pass (default: in
// debug builds); `dot_bias_fusion` false leaves that pass out (a benchmark
// compares the layer fused and apart).
std::unique_ptr<Pipeline> CpuPipeline(bool verify = kVerifyBetweenPasses,
                                      LoopFusionOptions fusion = {}, bool dot_bias_fusion = true);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CPU_PIPELINE_H_
