// Convolution kernels of the host backend.
#ifndef KILN_RUNTIME_HOST_CONV_KERNELS_H_
#define KILN_RUNTIME_HOST_CONV_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "runtime/host/kernel.h"
#include "runtime/host/tuning.h"

namespace kiln::host {

// Convolutions up to this size (multiply-adds, bytes of operands and
// result) are timed at compile time on each kernel that can run them, and
// the fastest is kept; larger ones take oneDNN's forward convolution
// without trying.
inline constexpr int64_t kMaxTunedMacs = int64_t{1} << 30;
inline constexpr int64_t kMaxTunedBytes = int64_t{256} << 20;

// Our own kernel: any dim_labels, strides, padding, dilations and feature
// groups, as im2col and one GEMM per (batch, group); every element type.
absl::StatusOr<Kernel> MakeIm2colConvolutionKernel(const ir::Instruction& instr);

// Our own kernel for few channels (conv_scatter.cc): f32 NHWC images and
// results, any kernel layout, stride 1, any padding, no dilation or groups;
// UNIMPLEMENTED for anything else.
absl::StatusOr<Kernel> MakeScatterConvolutionKernel(const ir::Instruction& instr);

// The kernels a call of a convolution fusion
// (passes::MatchConvolutionFusion) chooses from, oneDNN's default first:
// oneDNN's forward convolutions that add the bias as they write the
// result (with a relu, followed by the relu's pass over the result in
// place: oneDNN's own relu takes a NaN to 0), and every other kernel of
// the convolution alone (every one, when oneDNN has no forward convolution
// for it) followed by one pass that adds the bias and takes the relu. `*measure` (when given): whether the convolution is
// small enough to time them. INVALID_ARGUMENT for a call of anything else.
// MakeConvolutionFusionKernel (kernel.h) runs the fastest.
absl::StatusOr<std::vector<NamedKernel>> ConvolutionFusionCandidates(const ir::Instruction& call,
                                                                     bool* measure = nullptr);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_CONV_KERNELS_H_
