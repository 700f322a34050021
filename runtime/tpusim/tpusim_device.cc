#include "runtime/tpusim/tpusim_device.h"

#include <cstdlib>

#include "runtime/host/artifact.h"
#include "runtime/host/tuning.h"

#include "absl/strings/str_cat.h"
#include "base/half.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "compiler/passes/tpu_pipeline.h"
#include "runtime/host/executable.h"
#include "runtime/host/kernel.h"
#include "runtime/tpusim/layout.h"

namespace kiln::tpusim {
namespace {

using host::ExecState;
using host::Kernel;
using host::Buffer;
using host::BufferPtr;

// Dot and convolution read their f32 operands through the matrix unit's
// bf16 inputs; operands marked HIGHEST keep f32 (XLA runs those as several
// bf16 passes, which is what f32 gives here).
absl::StatusOr<Kernel> RoundMatrixInputs(const ir::Instruction& instr, Kernel inner) {
  if (instr.opcode() != ir::Opcode::kDot && instr.opcode() != ir::Opcode::kConvolution) {
    return inner;
  }
  const auto& precision = instr.attrs().operand_precision;
  std::vector<bool> round(instr.operand_count());
  bool any = false;
  for (int i = 0; i < instr.operand_count(); ++i) {
    const bool highest = i < static_cast<int>(precision.size()) &&
                         precision[i] == ir::Precision::kHighest;
    round[i] = instr.operand(i)->shape().type() == ir::ElementType::kF32 && !highest;
    any = any || round[i];
  }
  if (!any) return inner;
  return Kernel([inner = std::move(inner), round](ExecState& st,
                                                  const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    std::vector<BufferPtr> rounded = ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!round[i]) continue;
      // Staging inside the matrix unit, not HBM: not charged.
      ASSIGN_OR_RETURN(BufferPtr copy, Buffer::Allocate(ops[i]->shape(), nullptr));
      RoundToBf16(ops[i]->as<float>(), copy->as<float>(), ops[i]->shape().ElementCount());
      rounded[i] = std::move(copy);
    }
    return inner(st, rounded);
  });
}

}  // namespace

void RoundToBf16(const float* in, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(kiln::bf16(in[i]));
}

TpuSimDevice::TpuSimDevice(const TpuSimDeviceOptions& options)
    : HostDevice("tpu", options.ordinal, options.chip.hbm_bytes, options.feed_queue_capacity,
                 [](const ir::Shape& s) { return PaddedBytes(s); }) {}

TpuSimCompiler::TpuSimCompiler(const ChipConfig& chip)
    : cost_model_(std::make_shared<CostModel>(chip)) {}

absl::StatusOr<std::shared_ptr<runtime::Executable>> TpuSimCompiler::Compile(
    const ir::Module& module, const runtime::CompileOptions& options) {
  ASSIGN_OR_RETURN(Compiled compiled, CompileForCache(module, options));
  return compiled.executable;
}

absl::StatusOr<runtime::Compiler::Compiled> TpuSimCompiler::CompileForCache(
    const ir::Module& module, const runtime::CompileOptions& options) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  RETURN_IF_ERROR(CheckTpuTypes(module));
  return host::CompileOptimized(module, *passes::TpuPipeline(),
                                [&](const ir::Module& optimized) { return Build(optimized, options); });
}

absl::StatusOr<std::shared_ptr<runtime::Executable>> TpuSimCompiler::Load(
    const std::string& artifact, const runtime::CompileOptions& options) {
  ASSIGN_OR_RETURN(host::DecodedArtifact decoded, host::DecodeArtifact(artifact));
  RETURN_IF_ERROR(CheckTpuTypes(*decoded.module));
  host::TuningScope scope(&decoded.tuning);
  return Build(*decoded.module, options);
}

std::string TpuSimCompiler::ArtifactDependencies() const {
  // An artifact holds the module as the pipeline left it: another pipeline
  // compiles it again.
  static const std::string dependencies = absl::StrCat(
      host::HostArtifactDependencies(), "; passes ", passes::TpuPipeline(false)->Describe());
  return dependencies;
}

absl::StatusOr<std::shared_ptr<runtime::Executable>> TpuSimCompiler::Build(
    const ir::Module& module, const runtime::CompileOptions& options) const {
  std::shared_ptr<const CostModel> model = cost_model_;
  // Priced once here, while the module lives; the steps keep their costs.
  auto prices = std::make_shared<const ModulePrices>(module, *model);
  // A diagnostic: KILN_TPUSIM_REGIONS=N logs the N dearest regions.
  if (const char* n = std::getenv("KILN_TPUSIM_REGIONS"); n != nullptr && std::atoi(n) > 0) {
    logging::Info("tpusim: the {} dearest regions of {}:\n{}", std::atoi(n), module.name(),
                  prices->Dearest(std::atoi(n)));
  }
  host::ProgramOptions program_options;
  program_options.wrap_kernel = RoundMatrixInputs;
  // Its memory charges each array the padded tiles it takes.
  program_options.arena = false;
  program_options.step_cost = [prices](const std::vector<const ir::Instruction*>& members) {
    return prices->StepCost(members);
  };
  ASSIGN_OR_RETURN(std::shared_ptr<runtime::Executable> executable,
                   host::CompileProgram(
                       "tpu", module, options, std::move(program_options),
                       [model](const runtime::CostCounters& counters, int replica_count,
                               int hosts) {
                         return model->Profile(counters, replica_count, hosts);
                       }));
  static_cast<host::ProgramExecutable&>(*executable).set_estimate(prices->Estimate());
  return executable;
}

TpuSimBackend::TpuSimBackend(const ChipConfig& chip, int cores, size_t feed_queue_capacity)
    : chip_(chip), compiler_(chip) {
  for (int i = 0; i < cores; ++i) {
    TpuSimDeviceOptions core;
    core.ordinal = i;
    core.chip = chip;
    core.feed_queue_capacity = feed_queue_capacity;
    devices_.push_back(std::make_unique<TpuSimDevice>(core));
  }
}

absl::StatusOr<std::unique_ptr<runtime::Backend>> TpuSimBackend::Create(
    const runtime::BackendSpec& spec) {
  ChipConfig chip;
  std::string overrides;
  for (const auto& [key, value] : spec.config) {
    if (key == "config") {
      ASSIGN_OR_RETURN(chip, LoadChipConfig(value));
    } else if (key == "hbm_bytes") {
      ASSIGN_OR_RETURN(int64_t bytes, runtime::ConfigBytes(spec, key, 0));
      absl::StrAppend(&overrides, key, " = ", bytes, "\n");
    } else {
      absl::StrAppend(&overrides, key, " = ", value, "\n");
    }
  }
  RETURN_IF_ERROR(chip.Apply(overrides));
  if (spec.count > chip.cores) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", chip.name, " has ", chip.cores, " cores, not ", spec.count));
  }
  return std::make_unique<TpuSimBackend>(chip, spec.count);
}

std::string TpuSimBackend::Describe() const {
  return absl::StrCat("simulating ", devices_.size(), " cores of a ", chip_.name);
}

}  // namespace kiln::tpusim

KILN_BACKEND_REGISTRATION(tpu) {
  RegisterBackend({"tpu", "a simulated TPU chip (default TPU v3-8), run on the host",
                   "config: chip config file (docs/tpusim.md); any chip field, e.g. "
                   "hbm_bytes=16G",
                   &tpusim::TpuSimBackend::Create, nullptr});
}
