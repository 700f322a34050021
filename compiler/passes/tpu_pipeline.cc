#include "compiler/passes/tpu_pipeline.h"

#include "compiler/passes/call_inliner.h"
#include "compiler/passes/cpu_pipeline.h"

namespace kiln::passes {

std::unique_ptr<Pipeline> TpuPipeline(bool verify) {
  auto pipeline = std::make_unique<Pipeline>(
      "tpu", PipelineOptions{.max_iterations = 1, .verify = verify});
  pipeline->AddPass<CallInliner>();
  AddSimplify(*pipeline, verify);
  return pipeline;
}

}  // namespace kiln::passes
