#include "compiler/passes/convolution_fusion.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "compiler/passes/fusion.h"

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

// An add ConvolutionFusion outlines, and its parts.
struct Candidate {
  Instruction* add = nullptr;
  Instruction* conv = nullptr;
  Instruction* broadcast = nullptr;
  Instruction* relu = nullptr;  // the add's one reader, when a relu
};

std::optional<Candidate> Match(Instruction* add, const Computation& comp, Users& readers) {
  if (add->opcode() != Opcode::kAdd || add->operand_count() != 2 || !add->shape().IsArray()) {
    return std::nullopt;
  }
  for (int k = 0; k < 2; ++k) {
    Instruction* conv = add->operand(k);
    Instruction* other = add->operand(1 - k);
    if (!IsF32Convolution(*conv) || !TakesABias(*conv) || conv == comp.root() ||
        readers[conv].size() != 1 || add->shape() != conv->shape() ||
        !IsFeatureBroadcast(*other, *conv)) {
      continue;
    }
    Candidate c{.add = add, .conv = conv, .broadcast = other};
    if (add != comp.root() && readers[add].size() == 1 && IsReluOf(*readers[add][0], *add)) {
      c.relu = readers[add][0];
    }
    return c;
  }
  return std::nullopt;
}

// The computation of `c`: parameters x, k, b; the convolution; the
// broadcast; the add.
std::unique_ptr<Computation> Outline(const Candidate& c, const std::string& name) {
  auto fused = std::make_unique<Computation>(name);
  const std::vector<Instruction*> params = AddParameters(
      fused.get(), {c.conv->operand(0), c.conv->operand(1), c.broadcast->operand(0)});
  auto conv =
      NewInstruction(Opcode::kConvolution, c.conv->shape(), c.conv->name(), {params[0], params[1]});
  conv->mutable_attrs() = c.conv->attrs();
  conv->set_source_line(c.conv->source_line());
  Instruction* product = fused->AddInstruction(std::move(conv));
  auto broadcast =
      NewInstruction(Opcode::kBroadcast, c.broadcast->shape(), c.broadcast->name(), {params[2]});
  broadcast->mutable_attrs() = c.broadcast->attrs();
  Instruction* bias = fused->AddInstruction(std::move(broadcast));
  auto sum = NewInstruction(Opcode::kAdd, c.add->shape(), c.add->name(), {product, bias});
  sum->set_source_line(c.add->source_line());
  Instruction* root = fused->AddInstruction(std::move(sum));
  if (c.relu != nullptr) root = AppendRelu(fused.get(), root, *c.relu);
  fused->set_root(root);
  MakeInstructionNamesUnique(fused.get());
  return fused;
}

}  // namespace

absl::StatusOr<bool> ConvolutionFusion::Run(ir::Module* module) {
  return FuseEachComputation(
      module, [&](Computation* comp, absl::flat_hash_set<std::string>& names) {
        // The add, the convolution and the broadcast stay behind without
        // readers for DCE (a broadcast that others read stays theirs).
        return OutlineAdds(module, comp, names, "fused_convolution",
                           [&](Instruction* add, Users& readers,
                               const std::string& name) -> std::optional<OutlinedAdd> {
                             std::optional<Candidate> c = Match(add, *comp, readers);
                             if (!c.has_value()) return std::nullopt;
                             std::unique_ptr<Computation> fused = Outline(*c, name);
                             if (!IsConvolutionFusion(*fused)) return std::nullopt;
                             return OutlinedAdd{std::move(fused),
                                                {c->conv->operand(0), c->conv->operand(1),
                                                 c->broadcast->operand(0)},
                                                c->relu};
                           });
      });
}

std::optional<ConvolutionFusionForm> MatchConvolutionFusion(const Computation& c) {
  if (c.parameter_count() != 3 || (c.instruction_count() != 6 && c.instruction_count() != 9)) {
    return std::nullopt;
  }
  const Instruction* root = c.root();
  // With a relu: three more instructions, the zero, its broadcast and the
  // maximum, which is the root.
  const bool relu = c.instruction_count() == 9;
  if (relu) {
    root = root != nullptr ? ReluOperand(*root) : nullptr;
    if (root == nullptr) return std::nullopt;
  }
  if (root == nullptr || root->opcode() != Opcode::kAdd || root->operand_count() != 2) {
    return std::nullopt;
  }
  const Instruction* p[3] = {c.parameter(0), c.parameter(1), c.parameter(2)};
  for (int k = 0; k < 2; ++k) {
    const Instruction* conv = root->operand(k);
    const Instruction* broadcast = root->operand(1 - k);
    if (!IsF32Convolution(*conv) || conv->operand(0) != p[0] || conv->operand(1) != p[1] ||
        root->shape() != conv->shape() || !IsFeatureBroadcast(*broadcast, *conv) ||
        broadcast->operand(0) != p[2]) {
      continue;
    }
    return ConvolutionFusionForm{conv, relu};
  }
  return std::nullopt;
}

}  // namespace kiln::passes
