// XLA constructs that Kiln's IR spells with other ops, as the HLO text
// parser rewrites them: `map` becomes a call of its computation applied to
// whole arrays, `bitcast` a reshape (with transposes around it where the
// layouts are not the default row-major ones), and a total-order compare
// a compare of integer keys.
#ifndef KILN_COMPILER_IR_HLO_LOWERING_H_
#define KILN_COMPILER_IR_HLO_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

// The computation that applies the scalar computation `scalar` element by
// element to arrays of `dims`: each scalar parameter becomes an array
// parameter of its type, each scalar constant a broadcast of it, each
// elementwise op the same op on arrays, each call a call of its callee
// made the same way. Made once per (computation, dims) and added to
// `module` (named "<scalar>.map.<d0>x<d1>..."). InvalidArgument naming the
// instruction when `scalar` holds anything else (a reduce, a non-scalar
// shape), which has no elementwise meaning.
absl::StatusOr<Computation*> ElementwiseComputation(Module* module, const Computation& scalar,
                                                    const std::vector<int64_t>& dims);

// How a bitcast from `from` laid out as `from_layout` to `to` laid out as
// `to_layout` (minor-to-major dimension lists; empty: row-major) moves
// values: transpose by `to_physical` (empty: none needed), reshape to
// `physical_dims`, transpose by `from_physical` (empty: none needed).
// Under row-major layouts on both sides it is a plain reshape.
struct BitcastSteps {
  std::vector<int64_t> to_physical;
  std::vector<int64_t> physical_dims;
  std::vector<int64_t> from_physical;
};
// InvalidArgument when a layout is not a permutation of its shape's
// dimensions or the element counts differ.
absl::StatusOr<BitcastSteps> PlanBitcast(const Shape& from, const std::vector<int64_t>& from_layout,
                                         const Shape& to, const std::vector<int64_t>& to_layout);

// Gives a gather (or scatter) with batching dimensions the same meaning
// without them: operand dimension operand_batching[k] is indexed by the
// position along dimension indices_batching[k] of its start indices. That
// position joins each index vector (an iota concatenated to the indices
// along index_vector_dim), and the operand dimension becomes a collapsed
// (inserted) dimension that the new index component addresses. Adds the
// instructions it needs to `comp` and replaces the indices operand.
// InvalidArgument when the lists differ in length, name a dimension out of
// range, or pair dimensions of different sizes.
absl::Status LowerBatchingDims(Computation* comp, Instruction* instr,
                               const std::vector<int64_t>& operand_batching,
                               const std::vector<int64_t>& indices_batching);

// Gives a compare written with type=TOTALORDER the same meaning with
// integer compares: each floating-point operand becomes the signed integer
// of its bits with the magnitude bits flipped where the sign is set, which
// orders -NaN < -inf < finite negatives < -0 < +0 < finite positives < +inf
// < +NaN, as XLA's total order does. Integer compares are left as they are.
absl::Status LowerTotalOrderCompare(Computation* comp, Instruction* compare);

// Gives XLA's topk (the k largest, or smallest, elements along the last
// dimension and their indices, ties to the lower index, floats in total
// order) as a stable sort of the operand with an iota, sliced to k:
// `result`, a tuple instruction of `comp` without operands, becomes the
// tuple of the two slices. The comparator is added to `module` as
// "<result>.comparator", unless `comparator` (XLA's TopK custom call names
// one, over (value, value, index, index)) is given; then it orders the sort
// and `largest` is not read. InvalidArgument when k does not fit.
absl::Status LowerTopK(Module* module, Computation* comp, Instruction* result,
                       Instruction* operand, int64_t k, bool largest,
                       Computation* comparator = nullptr);

// XLA's batch normalization ops, written out as elementwise ops, broadcasts
// and reductions over every dimension but `feature_index`, in the operand's
// type (N = elements per feature, statistics biased):
//   training(x, scale, offset) = (y, mean, var): mean = sum(x)/N,
//     var = sum((x-mean)^2)/N, y = (x-mean) * scale/sqrt(var+eps) + offset;
//   inference(x, scale, offset, mean, var) = y as above;
//   grad(x, scale, mean, var, dy) = (dx, dscale, doffset): doffset =
//     sum(dy), dscale = sum(dy (x-mean)) / sqrt(var+eps), dx = scale /
//     sqrt(var+eps) * (dy - doffset/N - (x-mean) sum(dy (x-mean)) /
//     (N (var+eps))).
// `result` is an instruction of `comp` without operands: a tuple (training,
// grad) or an add (inference), which gets the final operands. The summing
// computation is added to `module` as "<result>.add".
enum class BatchNormKind { kTraining, kInference, kGrad };
absl::Status LowerBatchNorm(Module* module, Computation* comp, Instruction* result,
                            BatchNormKind kind, const std::vector<Instruction*>& operands,
                            double epsilon, int64_t feature_index);

// XLA's CPU backend calls LAPACK for JAX's linear algebra: custom calls
// named lapack_<s|d><routine>_ffi whose backend_config holds the routine's
// character options ({uplo = 76 : ui8, ...}, the ASCII codes of 'L', 'U',
// 'N', 'T', ...). Two have Kiln ops with the same meaning and are lowered:
//   potrf (uplo): the tuple (a with the factor in the uplo triangle and the
//     other triangle as it was, info), info s32 per matrix: 0, or the
//     1-based order of the first leading minor that is not positive
//     definite (where Kiln's cholesky turns NaN);
//   trsm (side, uplo, trans_x, diag): the triangular-solve of a (operand 0)
//     and b (operand 1), times alpha first when a scalar third operand is
//     given.
// Five more keep their custom call, with their options checked and kept in
// one spelling as the call's config ("{mode = 86 : ui8, uplo = 76 : ui8}"),
// for the host backend to run through LAPACK: getrf (LU with partial
// pivoting), geqrf (QR as Householder reflectors), orgqr (Q from them),
// syevd (symmetric eigendecomposition: mode V|N, uplo) and gesdd (SVD:
// mode A|S|N). runtime/host/lapack_kernels.cc says what each returns.
// IsLapackTarget says whether a custom-call target is one of these calls.
// `result` is the custom call (no operands yet), which takes the lowered
// op; its declared shape is checked against the routine's.
// InvalidArgument naming the routine for the others (geev, gees, complex
// ones, ...) and for options or shapes the routine does not take.
bool IsLapackTarget(absl::string_view target);

// XLA's bitcast-convert between types of different widths: to a type r
// times narrower, each element becomes r pieces along a new last
// dimension, least significant first (as the bytes lie in memory on a
// little-endian machine); to a type r times wider, a last dimension of r
// pieces becomes one element. Written with same-width bitcast-converts to
// unsigned integers, shifts, masks, converts and a concatenate (narrowing)
// or ors (widening); `result` (the bitcast-convert, no operands yet) takes
// the last step. InvalidArgument when the shapes do not fit that rule or a
// type is pred.
absl::Status LowerWidthChangingBitcast(Computation* comp, Instruction* result, Instruction* operand);

// XLA's stochastic-convert(x, random): a float array to a signed integer
// type, rounding |x| up with probability equal to its fraction: up when
// random (unsigned, as wide as x's type) is below fraction * 2^width; the
// sign put back, and values at or past the type's limits clamped to them.
// `result` (a select without operands, of the declared type) becomes the
// last step. InvalidArgument for other types or shapes.
absl::Status LowerStochasticConvert(Computation* comp, Instruction* result,
                                    const std::vector<Instruction*>& operands);

// XLA's GPU backend rewrites dots into calls of cuBLAS: `__cublas$gemm`
// and `__cublas$lt$matmul`, whose backend_config (JSON; the
// gemm_backend_config message, nested or not) holds the dot's dimension
// numbers, alpha (real), beta and an epilogue. `result` (the custom call,
// no operands yet) becomes
//   act(alpha * dot(a, b) + beta * c + broadcast(bias))
// over operands (a, b[, c when beta is not 0][, bias when the epilogue has
// one]) in the call's declared element type (operands of another type are
// converted first), where act is the epilogue's: DEFAULT or BIAS (none),
// RELU, GELU (the tanh form). The bias runs along the result's last
// dimension. A declared tuple (result, s8[workspace]) gets a zero
// workspace as its second element. InvalidArgument for other epilogues
// (the ones with an auxiliary output), a complex alpha, fp8 calls, and
// shapes that disagree with the dimension numbers.
bool IsGemmTarget(absl::string_view target);
absl::Status LowerGemmCall(Computation* comp, Instruction* result,
                           const std::vector<Instruction*>& operands,
                           absl::string_view backend_config);

// XLA's GPU backend rewrites convolutions into calls of cuDNN, with the
// convolution's window, dim_labels and group counts on the call and
// cudnn_conv_backend_config (JSON) in backend_config:
//   __cudnn$convForward(x, w) = conv_result_scale * convolution(x, w);
//   __cudnn$convBiasActivationForward(x, w, bias[, side]) =
//     act(conv_result_scale * convolution(x, w) + side_input_scale * side
//         + broadcast(bias along the output feature dimension)),
//   act from activation_mode: kNone, kRelu, kRelu6, kTanh, kSigmoid, kElu,
//   kLeakyRelu (leakyrelu_alpha);
//   __cudnn$convBackwardInput(dy, w): the gradient of that convolution with
//     respect to its input: a convolution of dy dilated by the stride with
//     w reversed along its window, its features swapped, padded so every
//     input position gets its terms;
//   __cudnn$convBackwardFilter(x, dy): the gradient with respect to the
//     kernel: a convolution of x (batch and features swapped) with dy as the
//     kernel, over a window the size of dy stepping by the forward dilation
//     (batch_group_count for a grouped forward convolution).
// `result` (the call, no operands yet) becomes that value, or the tuple of
// it and a zero scratch buffer when it returns (value, u8[N]).
// IsCudnnConvTarget says whether a target is one of cuDNN's convolution
// calls (`__cudnn$conv...`). InvalidArgument naming the call for the
// others (graph calls), for other activations, and for gradients of
// convolutions with lhs dilation or batch groups. A grouped convolution's
// input gradient reads each group's kernel with its features swapped.
bool IsCudnnConvTarget(absl::string_view target);
absl::Status LowerCudnnConvCall(Computation* comp, Instruction* result,
                                const std::vector<Instruction*>& operands,
                                absl::string_view backend_config);

// Custom calls of XLA's and JAX's that mark rather than compute: the
// sharding annotations (`Sharding`, and `SPMDFullToShardShape` /
// `SPMDShardToFullShape` where the shard is the whole array, as on one
// partition) become a `copy` of their operand. Host callbacks into the
// Python process that traced the module (`xla_python_cpu_callback`,
// `xla_ffi_python_cpu_callback`, ...) cannot run anywhere else and are
// refused naming the target; so are the SPMD calls whose shard is a part,
// and the calls into GPU and TPU libraries that XLA's device backends,
// jaxlib's GPU lowerings and Pallas insert (`__triton_gemm`,
// `cusolver_getrf_ffi`, `tpu_custom_call`, ...), except the cuBLAS and
// cuDNN calls that LowerGemmCall and LowerCudnnConvCall read.
// Other targets are left as they are.
absl::Status LowerXlaMarkerCall(Instruction* call, const std::vector<Instruction*>& operands);
// The options of a typed-FFI backend_config, "{uplo = 76 : ui8, ...}": each
// name with its integer value. InvalidArgument for any other text.
absl::StatusOr<absl::flat_hash_map<std::string, int64_t>> ParseFfiOptions(
    absl::string_view config);
absl::Status LowerLapackCall(Module* module, Computation* comp, Instruction* result,
                             const std::vector<Instruction*>& operands,
                             absl::string_view backend_config);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_HLO_LOWERING_H_
