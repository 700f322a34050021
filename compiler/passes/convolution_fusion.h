// Convolution fusion: a convolution whose result is added to a bias
// broadcast along its output features becomes one call that a kernel runs
// as one convolution with a bias, so that the convolution's result is
// never written out without it.
#ifndef KILN_COMPILER_PASSES_CONVOLUTION_FUSION_H_
#define KILN_COMPILER_PASSES_CONVOLUTION_FUSION_H_

#include <optional>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Outlines `add(convolution(x, k), broadcast(b))` (either operand order of
// the add) into a computation `fused_convolution.N` called as
// `call(x, k, b)` where the add was (IsConvolutionFusion). Fused only
// where:
//  - the convolution's operands and result are f32 arrays, of one to three
//    spatial dimensions, one batch group and no input dilation (the
//    convolutions a library runs with a bias; for others the bias would
//    take a pass of its own, where loop fusion adds it in the pass that
//    follows anyway);
//  - the convolution's result is read by the add alone (and is not the
//    root);
//  - `b` is an f32 vector of the output features, broadcast along the
//    convolution's output feature dimension alone (a layer's bias).
// A relu that is the add's one reader, `maximum(add, broadcast(+0))`
// (either operand order), joins the call, which then stands where the relu
// was: its kernel applies it as it writes the result. (A relu whose
// gradient reads the pre-activation, `add >= 0`, leaves the add two
// readers and stays loop fusion's; client::Relu's reads the result.) The
// sum is rounded where the kernel adds the bias: results may differ from
// the unfused ones in the last bit.
// Runs before loop-fusion; rewrites the computations it does
// (FusibleComputations).
class ConvolutionFusion : public Pass {
 public:
  absl::string_view name() const override { return "convolution-fusion"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

// What a call of a convolution fusion computes: convolution(parameter 0,
// parameter 1) plus parameter 2 broadcast along the output features, and
// with `relu` the maximum of that and +0 (NaN stays NaN, -0 becomes +0).
struct ConvolutionFusionForm {
  const ir::Instruction* convolution = nullptr;
  bool relu = false;
};

// The form of `c` when it is what ConvolutionFusion outlines, which a
// backend checks again before running a call of it as one kernel (modules
// come from clients): three parameters (x, k, b); a convolution of the
// first two as above; the broadcast of the third along its output
// feature dimension; their sum, the root, or read by the root, a relu
// as above, with its scalar +0 and broadcast. Nothing else.
std::optional<ConvolutionFusionForm> MatchConvolutionFusion(const ir::Computation& c);
inline bool IsConvolutionFusion(const ir::Computation& c) {
  return MatchConvolutionFusion(c).has_value();
}

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CONVOLUTION_FUSION_H_
