// What the library fusions of a layer share (dot_bias_fusion.h,
// convolution_fusion.h): `add(product, broadcast(bias))`, a product of two
// operands that a library runs with the bias (and a relu) as its epilogue,
// found, outlined into a call of three parameters, and checked again in
// the form a backend runs.
#ifndef KILN_COMPILER_PASSES_BIAS_LAYER_H_
#define KILN_COMPILER_PASSES_BIAS_LAYER_H_

#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "compiler/passes/fusion.h"

namespace kiln::passes {

// Whether `i` is `maximum(x, +0)` (either operand order) of an f32 array
// `x`, every element of the +0 holding +0's bytes (IsUniform: a constant or
// a broadcast of one): a relu, which a layer takes as its epilogue.
bool IsReluOf(const ir::Instruction& i, const ir::Instruction& x);

// Which products and biases a fusion takes.
struct BiasLayerKind {
  // The product: an instruction of two operands (a dot, a convolution).
  absl::FunctionRef<bool(const ir::Instruction& product)> is_product;
  // The bias: `b`, a broadcast of a vector, added to `product`.
  absl::FunctionRef<bool(const ir::Instruction& b, const ir::Instruction& product)> is_bias;
};

// Replaces, in each computation FusibleComputations gives, each
// `add(product, broadcast(bias))` (either operand order) of `kind`, where
// the add alone reads the product and the product is not the root, by a
// call of a computation `base.N` of parameters (the product's operands,
// the bias): the product, the broadcast and their sum, the root; or, where
// a relu (IsReluOf) is the sum's one reader, the relu of the sum, the
// call then standing where the relu was. `is_form` checks each outlined
// computation (it is the form check a backend makes). Whether any changed.
absl::StatusOr<bool> FuseBiasLayers(ir::Module* module, absl::string_view base,
                                    const BiasLayerKind& kind,
                                    bool (*is_form)(const ir::Computation&));

// A layer as FuseBiasLayers outlines it: the product and whether a relu
// follows the sum.
struct BiasLayerForm {
  const ir::Instruction* product = nullptr;
  bool relu = false;
};

// The form of `c` when it is what FuseBiasLayers outlines for `kind`,
// checked as a backend checks a client's module: three parameters; the
// product of the first two; the broadcast of the third (a bias of `kind`);
// their sum, the root, or read by the root, a relu with its scalar +0 and
// broadcast. Nothing else.
std::optional<BiasLayerForm> MatchBiasLayer(const ir::Computation& c, const BiasLayerKind& kind);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_BIAS_LAYER_H_
