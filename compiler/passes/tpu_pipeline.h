// The passes the simulated TPU runs before it compiles and prices a module.
#ifndef KILN_COMPILER_PASSES_TPU_PIPELINE_H_
#define KILN_COMPILER_PASSES_TPU_PIPELINE_H_

#include <memory>

#include "compiler/passes/pipeline.h"

namespace kiln::passes {

// The TPU pipeline: call-inliner (so a called or fused computation's work
// can fuse with its caller's, as XLA inlines before it fuses), then the
// CPU pipeline's "simplify". Fusion itself is the TPU cost model's
// (runtime/tpusim/fusion.h): the simulator runs on the host's kernels, and
// only the prices follow the TPU's fused regions.
std::unique_ptr<Pipeline> TpuPipeline(bool verify = kVerifyBetweenPasses);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_TPU_PIPELINE_H_
