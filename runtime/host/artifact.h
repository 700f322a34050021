// The persistent form of a host program (cpu and tpu backends): the module
// as the passes left it, in its wire form so that every constant's bits
// survive, and the kernels its compile chose by measuring. Loading one
// skips the pass pipeline and the autotuning.
#ifndef KILN_RUNTIME_HOST_ARTIFACT_H_
#define KILN_RUNTIME_HOST_ARTIFACT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "compiler/passes/pipeline.h"
#include "runtime/device.h"
#include "runtime/host/tuning.h"

namespace kiln::host {

std::string EncodeArtifact(const ir::Module& optimized, const TuningRecord& tuning);

struct DecodedArtifact {
  std::unique_ptr<ir::Module> module;  // verified
  TuningRecord tuning;
};
// INVALID_ARGUMENT for bytes that are not an artifact of this format or
// whose module does not verify.
absl::StatusOr<DecodedArtifact> DecodeArtifact(const std::string& bytes);

// What the cpu and tpu compilers share: optimizes a copy of `module` with
// `pipeline` (the caller's module, from which the server computed the cache
// key, stays as it was), checks that the result verifies (INTERNAL
// otherwise: release builds do not verify between passes, and a pass that
// broke the module must not reach the kernels), builds it with `build`
// while recording the kernels autotuning chose, and returns the executable
// with the artifact of the optimized module.
absl::StatusOr<runtime::Compiler::Compiled> CompileOptimized(
    const ir::Module& module, passes::Pipeline& pipeline,
    const std::function<absl::StatusOr<std::shared_ptr<runtime::Executable>>(
        const ir::Module& optimized)>& build);

// What a host artifact depends on besides the module: oneDNN's version and
// the instruction set it dispatches to, OpenBLAS's build and core, and the
// processor's model.
std::string HostArtifactDependencies();

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_ARTIFACT_H_
