// Layout assignment for convolutions: a convolution reads and writes its
// operands in whatever layout its dimension numbers describe (the host's
// kernels take any: oneDNN through strided descriptors, reordering into
// the blocked layout its kernel wants inside the primitive), so a
// transpose that only lays out a convolution's operand or result is folded
// into the convolution's dimension numbers and never copies.
#ifndef KILN_COMPILER_PASSES_CONVOLUTION_LAYOUT_H_
#define KILN_COMPILER_PASSES_CONVOLUTION_LAYOUT_H_

#include "compiler/passes/pass.h"

namespace kiln::passes {

// In every computation:
//  - `convolution(transpose(x), k)` becomes `convolution(x, k)` with the
//    input's batch, feature and spatial dimensions renamed to x's (and the
//    same for a transposed kernel);
//  - `transpose(convolution(x, k))`, where the transpose is the
//    convolution's one reader, becomes one convolution whose output
//    dimensions are the transpose's.
// The transposes left without readers go to DCE. The products are the
// same; the kernel chosen for the new layout may sum them in another order
// (results may differ in the last bits).
class ConvolutionLayout : public Pass {
 public:
  absl::string_view name() const override { return "convolution-layout"; }
  absl::StatusOr<bool> Run(ir::Module* module) override;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_CONVOLUTION_LAYOUT_H_
