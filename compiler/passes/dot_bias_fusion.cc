#include "compiler/passes/dot_bias_fusion.h"

#include <vector>

#include "compiler/passes/bias_layer.h"
#include "compiler/passes/dot_fusion.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::ElementType;
using ir::Instruction;
using ir::Opcode;

// Whether `b` broadcasts an f32 vector along dimension 1 alone of `dot`'s
// shape (a bias of its columns).
bool IsColumnBroadcast(const Instruction& b, const Instruction& dot) {
  if (b.opcode() != Opcode::kBroadcast || b.operand_count() != 1 || b.shape() != dot.shape()) {
    return false;
  }
  const ir::Shape& bias = b.operand(0)->shape();
  return bias.IsArray() && bias.type() == ElementType::kF32 && bias.rank() == 1 &&
         b.attrs().dimensions == std::vector<int64_t>{1} && bias.dim(0) == dot.shape().dim(1);
}

}  // namespace

absl::StatusOr<bool> DotBiasFusion::Run(ir::Module* module) {
  return FuseBiasLayers(module, "fused_dot_bias",
                        BiasLayerKind{.is_product = IsGemmDot, .is_bias = IsColumnBroadcast},
                        IsDotBiasFusion);
}

std::optional<DotBiasFusionForm> MatchDotBiasFusion(const Computation& c) {
  std::optional<BiasLayerForm> form =
      MatchBiasLayer(c, BiasLayerKind{.is_product = IsGemmDot, .is_bias = IsColumnBroadcast});
  if (!form.has_value()) return std::nullopt;
  return DotBiasFusionForm{form->product, form->relu};
}

}  // namespace kiln::passes
