// Convolutions through oneDNN (the library PyTorch's CPU convolutions use).
// The operands keep the layout their dim_labels give them: oneDNN reads them
// through strided descriptors and reorders them into the blocked layout its
// kernel for the shape wants, and the result back into the output's layout.
#ifndef KILN_RUNTIME_HOST_DNNL_CONV_H_
#define KILN_RUNTIME_HOST_DNNL_CONV_H_

#include <string>
#include <vector>

#include "compiler/ir/instruction.h"
#include "runtime/host/kernel.h"
#include "runtime/host/tuning.h"

namespace kiln::host {

// The ways oneDNN can run `instr` (a convolution), empty when it covers
// none: f32, one to three spatial dimensions, no base (input) dilation,
// padding not negative, batch_group_count 1, no zero-sized dimension.
//  - "forward": a forward convolution of the operands as they are, in the
//    layouts oneDNN chooses (reordered in and out) and as laid out, each
//    by the first three of oneDNN's implementations (on AVX-512 its first,
//    brgconv, takes half again the time of the next, jit, on LeNet-5's
//    layers).
//  - "weights": oneDNN's weight-gradient primitive, when the convolution is
//    one (input features contracted like a batch, a kernel as large as the
//    data); the HLO input plays the source and the HLO kernel the gradient
//    of the result.
//
//  With `bias`, only forward plans that also add a bias, a vector of the
//  output features (the kernel's third operand), as oneDNN's convolution
//  with a bias does: for a call of a convolution fusion
//  (compiler/passes/convolution_fusion.h).
//
// A kernel runs its convolution in pieces of about `piece_macs`
// multiply-adds (pieces of the batch, or of the output features for
// "weights"), polling for cancellation between them, so that a cancelled
// execution stops within one piece (kDnnlPieceMacs: about 50 ms on one
// core). A plan whose single batch element (or output feature) is more
// than twice that is not offered.
inline constexpr int64_t kDnnlPieceMacs = int64_t{1} << 30;
//
// `first_only`: the first kernel alone (what runs when nothing is timed;
// each plan compiles oneDNN's kernel for it).
std::vector<NamedKernel> DnnlConvolutionKernels(const ir::Instruction& instr,
                                                int64_t piece_macs = kDnnlPieceMacs,
                                                bool bias = false, bool first_only = false);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_DNNL_CONV_H_
