#include "runtime/tpusim/tpusim_device.h"

#include "absl/strings/str_cat.h"
#include "compiler/ir/half.h"
#include "compiler/ir/status_macros.h"
#include "runtime/cpu/executable.h"
#include "runtime/cpu/program.h"
#include "runtime/tpusim/layout.h"

namespace kiln::tpusim {
namespace {

using cpu::ExecState;
using cpu::Kernel;
using runtime::Buffer;
using runtime::BufferPtr;

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
                 [](const ir::Shape& s) { return PaddedBytes(s); }),
      cost_model_(std::make_shared<CostModel>(options.chip)) {}

absl::StatusOr<std::shared_ptr<runtime::Executable>> TpuSimDevice::Compile(
    const ir::Module& module, const runtime::CompileOptions& options) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  RETURN_IF_ERROR(CheckTpuTypes(module));
  std::shared_ptr<const CostModel> model = cost_model_;
  cpu::ProgramOptions program_options;
  program_options.wrap_kernel = RoundMatrixInputs;
  program_options.step_cost = [model](const std::vector<const ir::Instruction*>& members) {
    return model->StepCost(members);
  };
  cpu::ProgramCache programs(std::move(program_options));
  ASSIGN_OR_RETURN(std::shared_ptr<const cpu::Program> entry, programs.Get(module.entry()));
  return std::make_shared<cpu::ProgramExecutable>(
      entry, module.entry()->root()->shape(), module.entry()->ParameterShapes(),
      options.rng_seed, this,
      [model](const runtime::CostCounters& counters, int replica_count) {
        return model->Profile(counters, replica_count);
      });
}

}  // namespace kiln::tpusim
