#include "compiler/passes/convolution_fusion.h"

#include "compiler/passes/bias_layer.h"

namespace kiln::passes {
namespace {

using ir::Computation;
using ir::ElementType;
using ir::Instruction;
using ir::Opcode;

bool IsF32Array(const ir::Shape& s) { return s.IsArray() && s.type() == ElementType::kF32; }

// A convolution of f32 arrays into an f32 array.
bool IsF32Convolution(const Instruction& conv) {
  return conv.opcode() == Opcode::kConvolution && conv.operand_count() == 2 &&
         IsF32Array(conv.shape()) && IsF32Array(conv.operand(0)->shape()) &&
         IsF32Array(conv.operand(1)->shape());
}

// Whether `b` broadcasts an f32 vector along `conv`'s output feature
// dimension alone, to `conv`'s shape.
bool IsFeatureBroadcast(const Instruction& b, const Instruction& conv) {
  if (b.opcode() != Opcode::kBroadcast || b.operand_count() != 1 ||
      b.shape() != conv.shape()) {
    return false;
  }
  const ir::Shape& bias = b.operand(0)->shape();
  const int64_t feature = conv.attrs().conv.output_feature;
  return IsF32Array(bias) && bias.rank() == 1 && b.attrs().dimensions.size() == 1 &&
         b.attrs().dimensions[0] == feature && feature >= 0 &&
         feature < conv.shape().rank() && bias.dim(0) == conv.shape().dim(feature);
}

// Whether a library convolution can add a bias as it writes the result:
// one batch group and no input dilation (a data gradient's form), else the
// fused call would add the bias in a pass of its own after the
// convolution, where loop fusion adds it in the pass that follows anyway.
bool TakesABias(const Instruction& conv) {
  if (conv.attrs().batch_group_count != 1 || conv.attrs().conv.input_spatial.size() > 3) {
    return false;
  }
  for (const ir::WindowDim& w : conv.attrs().window) {
    if (w.base_dilation != 1) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> ConvolutionFusion::Run(ir::Module* module) {
  return FuseBiasLayers(module, "fused_convolution",
                        BiasLayerKind{.is_product =
                                          [](const Instruction& conv) {
                                            return IsF32Convolution(conv) && TakesABias(conv);
                                          },
                                      .is_bias = IsFeatureBroadcast},
                        IsConvolutionFusion);
}

std::optional<ConvolutionFusionForm> MatchConvolutionFusion(const Computation& c) {
  std::optional<BiasLayerForm> form =
      MatchBiasLayer(c, BiasLayerKind{.is_product = IsF32Convolution, .is_bias = IsFeatureBroadcast});
  if (!form.has_value()) return std::nullopt;
  return ConvolutionFusionForm{form->product, form->relu};
}

}  // namespace kiln::passes
