#include "runtime/cpu/cpu_device.h"

#include "compiler/ir/status_macros.h"
#include "runtime/cpu/executable.h"
#include "runtime/cpu/program.h"

namespace kiln::cpu {

absl::StatusOr<std::shared_ptr<runtime::Executable>> CpuDevice::Compile(
    const ir::Module& module, const runtime::CompileOptions& options) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  ProgramCache programs;
  ASSIGN_OR_RETURN(std::shared_ptr<const Program> entry,
                   programs.Get(module.entry()));
  return std::make_shared<ProgramExecutable>(
      entry, module.entry()->root()->shape(), module.entry()->ParameterShapes(),
      options.rng_seed, this);
}

}  // namespace kiln::cpu
