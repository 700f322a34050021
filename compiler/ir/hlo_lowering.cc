#include "compiler/ir/hlo_lowering.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "compiler/ir/hlo_values.h"
#include "compiler/ir/shape_inference.h"
#include "compiler/ir/verifier.h"

namespace kiln::ir {
namespace {

absl::StatusOr<Computation*> Elementwise(Module* module, const Computation& scalar,
                                         const std::vector<int64_t>& dims, int depth) {
  // The chain of calls is the text's: bounded before recursing.
  if (depth > kMaxCallDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "map's computations call each other more than ", kMaxCallDepth, " deep"));
  }
  const std::string name = absl::StrCat(scalar.name(), ".map.", absl::StrJoin(dims, "x"));
  if (Computation* made = module->FindComputation(name)) return made;
  auto array = std::make_unique<Computation>(name);
  auto refuse = [&](const Instruction& instr, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("map's computation ", scalar.name(),
                                                   " cannot be applied elementwise: %",
                                                   instr.name(), " ", why));
  };
  absl::flat_hash_map<const Instruction*, Instruction*> made;
  // Made first, connected second: the text's order need not put operands
  // first.
  for (const auto& instr : scalar.instructions()) {
    const Shape& shape = instr->shape();
    if (!shape.IsArray() || shape.rank() != 0) {
      return refuse(*instr, absl::StrCat("has shape ", shape.ToString(), ", not a scalar"));
    }
    const Shape promoted(shape.type(), dims);
    const Opcode op = instr->opcode();
    if (op == Opcode::kConstant) {
      auto value = std::make_unique<Instruction>(op, shape, instr->name() + ".scalar");
      value->mutable_attrs() = instr->attrs();
      Instruction* scalar_value = array->AddInstruction(std::move(value));
      auto spread = std::make_unique<Instruction>(Opcode::kBroadcast, promoted, instr->name());
      spread->AddOperand(scalar_value);
      made[instr.get()] = array->AddInstruction(std::move(spread));
      continue;
    }
    if (op != Opcode::kParameter && op != Opcode::kCall && !IsElementwise(op)) {
      return refuse(*instr, absl::StrCat("is a ", OpcodeName(op)));
    }
    auto copy = std::make_unique<Instruction>(op, promoted, instr->name());
    copy->mutable_attrs() = instr->attrs();
    if (op == Opcode::kCall) {
      for (const Computation* callee : instr->called()) {
        ASSIGN_OR_RETURN(Computation * promoted_callee,
                         Elementwise(module, *callee, dims, depth + 1));
        copy->AddCalled(promoted_callee);
      }
    }
    made[instr.get()] = array->AddInstruction(std::move(copy));
  }
  for (const auto& instr : scalar.instructions()) {
    if (instr->opcode() == Opcode::kConstant) continue;
    for (const Instruction* operand : instr->operands()) {
      auto it = made.find(operand);
      if (it == made.end()) return refuse(*instr, "uses an instruction of another computation");
      made[instr.get()]->AddOperand(it->second);
    }
  }
  if (scalar.root() == nullptr) return refuse(*scalar.instructions().front(), "has no root");
  array->set_root(made[scalar.root()]);
  Computation* added = module->AddComputation(std::move(array));
  RETURN_IF_ERROR(added->Canonicalize());
  return added;
}

// The logical dimensions of `shape` from major to minor in memory under
// `layout` (minor to major; empty: row-major).
absl::StatusOr<std::vector<int64_t>> MajorToMinor(const Shape& shape,
                                                  const std::vector<int64_t>& layout) {
  std::vector<int64_t> order(shape.rank());
  std::iota(order.begin(), order.end(), 0);
  if (layout.empty()) return order;
  std::vector<int64_t> sorted = layout;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != order) {
    return absl::InvalidArgumentError(absl::StrCat("layout {", absl::StrJoin(layout, ","),
                                                   "} is not a permutation of the dimensions of ",
                                                   shape.ToString()));
  }
  return std::vector<int64_t>(layout.rbegin(), layout.rend());
}

bool IsIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Adds the instructions a lowering writes out to `comp`, named after the
// instruction they stand for: "<base><tag>0", "<base><tag>1", ...
class Emitter {
 public:
  Emitter(Computation* comp, std::string prefix) : comp_(comp), prefix_(std::move(prefix)) {}

  Instruction* Add(Opcode op, const Shape& shape, const std::vector<Instruction*>& operands) {
    Instruction* added = comp_->AddInstruction(
        std::make_unique<Instruction>(op, shape, absl::StrCat(prefix_, counter_++)));
    for (Instruction* o : operands) added->AddOperand(o);
    return added;
  }
  // A broadcast to `shape` of the scalar constant `value` of its type.
  template <typename T>
  Instruction* Splat(const Shape& shape, T value) {
    Instruction* c = Add(Opcode::kConstant, Shape::Scalar(shape.type()), {});
    c->mutable_attrs().literal = Literal::Scalar<T>(shape.type(), value);
    return Add(Opcode::kBroadcast, shape, {c});
  }
  // `v` converted to `type`, or `v` when it has that type.
  Instruction* Convert(Instruction* v, ElementType type) {
    if (v->shape().type() == type) return v;
    return Add(Opcode::kConvert, Shape(type, v->shape().dims()), {v});
  }

 private:
  Computation* comp_;
  std::string prefix_;
  int counter_ = 0;
};

}  // namespace

absl::StatusOr<Computation*> ElementwiseComputation(Module* module, const Computation& scalar,
                                                    const std::vector<int64_t>& dims) {
  return Elementwise(module, scalar, dims, 0);
}

absl::StatusOr<BitcastSteps> PlanBitcast(const Shape& from, const std::vector<int64_t>& from_layout,
                                         const Shape& to, const std::vector<int64_t>& to_layout) {
  if (!from.IsArray() || !to.IsArray() || from.ElementCount() != to.ElementCount()) {
    return absl::InvalidArgumentError(absl::StrCat("bitcast from ", from.ToString(), " to ",
                                                   to.ToString(), " changes the element count"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> from_order, MajorToMinor(from, from_layout));
  ASSIGN_OR_RETURN(std::vector<int64_t> to_order, MajorToMinor(to, to_layout));
  BitcastSteps steps;
  // The operand's values in memory order: a transpose whose output
  // dimension i is the operand's from_order[i].
  if (!IsIdentity(from_order)) steps.to_physical = from_order;
  for (int64_t d : to_order) steps.physical_dims.push_back(to.dim(d));
  // Back to the result's logical order: its dimension j is the physical
  // dimension where to_order holds j.
  std::vector<int64_t> back(to.rank());
  for (int64_t p = 0; p < to.rank(); ++p) back[to_order[p]] = p;
  if (!IsIdentity(back)) steps.from_physical = back;
  return steps;
}

absl::Status LowerBatchingDims(Computation* comp, Instruction* instr,
                               const std::vector<int64_t>& operand_batching,
                               const std::vector<int64_t>& indices_batching) {
  const bool gather = instr->opcode() == Opcode::kGather;
  if (!gather && instr->opcode() != Opcode::kScatter) {
    return absl::InvalidArgumentError("batching dimensions belong to gather and scatter");
  }
  if (operand_batching.size() != indices_batching.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the operand has ", operand_batching.size(), " batching dimensions, the indices ",
        indices_batching.size()));
  }
  if (gather ? instr->operand_count() != 2
             : instr->operand_count() < 3 || instr->operand_count() % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpcodeName(instr->opcode()), " takes ",
        gather ? "2 operands" : "operands, indices and as many updates"));
  }
  // The indices follow the operands: the second of a gather's operands, the
  // middle one of a scatter's.
  const int indices_at = gather ? 1 : instr->operand_count() / 2;
  const Shape& operand = instr->operand(0)->shape();
  Instruction* indices = instr->operand(indices_at);
  if (!operand.IsArray() || !indices->shape().IsArray()) {
    return absl::InvalidArgumentError("batching dimensions need array operands");
  }
  Attributes& a = instr->mutable_attrs();
  const int64_t vector_dim = gather ? a.gather.index_vector_dim : a.scatter.index_vector_dim;
  const int64_t rank = indices->shape().rank();
  if (vector_dim < 0 || vector_dim > rank) {
    return absl::InvalidArgumentError(absl::StrCat("index_vector_dim ", vector_dim,
                                                   " is out of range"));
  }
  for (size_t k = 0; k < operand_batching.size(); ++k) {
    const int64_t od = operand_batching[k], id = indices_batching[k];
    if (od < 0 || od >= operand.rank() || id < 0 || id >= rank || id == vector_dim) {
      return absl::InvalidArgumentError(absl::StrCat("batching dimensions ", od, " and ", id,
                                                     " are out of range"));
    }
    if (operand.dim(od) != indices->shape().dim(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "operand batching dimension ", od, " has ", operand.dim(od),
          " elements but indices batching dimension ", id, " has ", indices->shape().dim(id)));
    }
  }
  const std::string base = instr->name() + ".indices";
  auto add = [&](Opcode op, Shape shape, const std::string& name) {
    return comp->AddInstruction(std::make_unique<Instruction>(op, std::move(shape), name));
  };
  // Implicit index vectors of one component become explicit.
  if (vector_dim == rank) {
    std::vector<int64_t> dims = indices->shape().dims();
    dims.push_back(1);
    Instruction* reshaped = add(Opcode::kReshape, Shape(indices->shape().type(), dims),
                                base + ".vectors");
    reshaped->AddOperand(indices);
    indices = reshaped;
  }
  std::vector<int64_t> position_dims = indices->shape().dims();
  position_dims[vector_dim] = 1;
  std::vector<int64_t> joined_dims = indices->shape().dims();
  joined_dims[vector_dim] += static_cast<int64_t>(indices_batching.size());
  Instruction* joined =
      add(Opcode::kConcatenate, Shape(indices->shape().type(), joined_dims), base);
  joined->mutable_attrs().dimensions = {vector_dim};
  joined->AddOperand(indices);
  for (size_t k = 0; k < indices_batching.size(); ++k) {
    Instruction* position = add(Opcode::kIota, Shape(indices->shape().type(), position_dims),
                                absl::StrCat(base, ".batch", k));
    position->mutable_attrs().iota_dimension = indices_batching[k];
    joined->AddOperand(position);
  }
  instr->ReplaceOperand(indices_at, joined);
  std::vector<int64_t>& collapsed =
      gather ? a.gather.collapsed_slice_dims : a.scatter.inserted_window_dims;
  std::vector<int64_t>& index_map =
      gather ? a.gather.start_index_map : a.scatter.scatter_dims_to_operand_dims;
  for (int64_t od : operand_batching) {
    collapsed.push_back(od);
    index_map.push_back(od);
  }
  std::sort(collapsed.begin(), collapsed.end());
  return absl::OkStatus();
}

absl::Status LowerTotalOrderCompare(Computation* comp, Instruction* compare) {
  if (compare->opcode() != Opcode::kCompare || compare->operand_count() != 2) {
    return absl::InvalidArgumentError("type=TOTALORDER belongs to a compare of two operands");
  }
  const Shape& shape = compare->operand(0)->shape();
  if (!shape.IsArray() || shape != compare->operand(1)->shape()) {
    return absl::InvalidArgumentError("a total-order compare needs two arrays of one shape");
  }
  ElementType key_type;
  switch (shape.type()) {
    case ElementType::kF64: key_type = ElementType::kS64; break;
    case ElementType::kF32: key_type = ElementType::kS32; break;
    case ElementType::kF16: case ElementType::kBF16: key_type = ElementType::kS16; break;
    default:
      // Integers are totally ordered already.
      return absl::OkStatus();
  }
  const int bits = static_cast<int>(ElementTypeSize(shape.type())) * 8;
  const Shape keys(key_type, shape.dims());
  auto add = [&](Opcode op, const Shape& s, const std::string& name,
                 std::vector<Instruction*> operands) {
    Instruction* added =
        comp->AddInstruction(std::make_unique<Instruction>(op, s, name));
    for (Instruction* o : operands) added->AddOperand(o);
    return added;
  };
  // A scalar constant of the key type broadcast to the operands' shape.
  auto splat = [&](int64_t value, const std::string& name) {
    Instruction* scalar = add(Opcode::kConstant, Shape::Scalar(key_type), name + ".scalar", {});
    scalar->mutable_attrs().literal = Literal::Scalar<int64_t>(key_type, value);
    if (shape.rank() == 0) return scalar;
    return add(Opcode::kBroadcast, keys, name, {scalar});
  };
  const std::string base = compare->name() + ".total_order";
  Instruction* shift = splat(bits - 1, base + ".shift");
  // All bits but the sign: flipping them turns sign-magnitude into two's
  // complement order (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN).
  const int64_t magnitude =
      bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
  Instruction* mask = splat(magnitude, base + ".magnitude");
  for (int i = 0; i < 2; ++i) {
    const std::string name = absl::StrCat(base, ".key", i);
    Instruction* raw = add(Opcode::kBitcastConvert, keys, name + ".bits", {compare->operand(i)});
    Instruction* sign = add(Opcode::kShiftRightArithmetic, keys, name + ".sign", {raw, shift});
    Instruction* flip = add(Opcode::kAnd, keys, name + ".flip", {sign, mask});
    compare->ReplaceOperand(i, add(Opcode::kXor, keys, name, {raw, flip}));
  }
  return absl::OkStatus();
}

absl::Status LowerTopK(Module* module, Computation* comp, Instruction* result,
                       Instruction* operand, int64_t k, bool largest,
                       Computation* comparator) {
  const Shape& shape = operand->shape();
  if (!shape.IsArray() || shape.rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("topk needs an array of rank 1 or more, got ",
                                                   shape.ToString()));
  }
  const int64_t last = shape.rank() - 1;
  if (k < 0 || k > shape.dim(static_cast<int>(last))) {
    return absl::InvalidArgumentError(absl::StrCat("topk's k=", k, " does not fit ",
                                                   shape.ToString()));
  }
  const std::string base = result->name();
  auto add = [](Computation* c, Opcode op, const Shape& s, const std::string& name,
                std::vector<Instruction*> operands) {
    Instruction* added = c->AddInstruction(std::make_unique<Instruction>(op, s, name));
    for (Instruction* o : operands) added->AddOperand(o);
    return added;
  };
  // The comparator: values first (greater, or less, in total order), the
  // indices along for the ride; a stable sort keeps equal values in index
  // order.
  const Shape value = Shape::Scalar(shape.type());
  const Shape index = Shape::Scalar(ElementType::kS32);
  Computation* cmp = comparator;
  if (cmp == nullptr || cmp->parameter_count() == 2) {
    // The sort's comparator over (value, value, index, index): greater (or
    // less) in total order, or a comparator of the values alone (XLA's
    // approximate top-k) called from it.
    Computation* made =
        module->AddComputation(std::make_unique<Computation>(base + ".comparator"));
    std::vector<Instruction*> params;
    for (int i = 0; i < 4; ++i) {
      params.push_back(add(made, Opcode::kParameter, i < 2 ? value : index,
                           absl::StrCat(base, ".p", i), {}));
      params.back()->mutable_attrs().parameter_number = i;
    }
    const Opcode op = cmp == nullptr ? Opcode::kCompare : Opcode::kCall;
    Instruction* before = add(made, op, Shape::Scalar(ElementType::kPred), base + ".before",
                              {params[0], params[1]});
    if (cmp != nullptr) {
      before->AddCalled(cmp);
    } else {
      before->mutable_attrs().direction =
          largest ? ComparisonDirection::kGt : ComparisonDirection::kLt;
      RETURN_IF_ERROR(LowerTotalOrderCompare(made, before));
    }
    made->set_root(before);
    RETURN_IF_ERROR(made->Canonicalize());
    cmp = made;
  }

  const Shape indices(ElementType::kS32, shape.dims());
  Instruction* iota = add(comp, Opcode::kIota, indices, base + ".indices", {});
  iota->mutable_attrs().iota_dimension = last;
  Instruction* sort =
      add(comp, Opcode::kSort, Shape::Tuple({shape, indices}), base + ".sorted", {operand, iota});
  sort->mutable_attrs().dimensions = {last};
  sort->mutable_attrs().is_stable = true;
  sort->AddCalled(cmp);
  std::vector<int64_t> kept = shape.dims();
  kept[last] = k;
  std::vector<SliceDim> slice;
  for (int64_t d = 0; d < shape.rank(); ++d) slice.push_back({0, kept[d], 1});
  for (int i = 0; i < 2; ++i) {
    const Shape whole = i == 0 ? shape : indices;
    Instruction* element = add(comp, Opcode::kGetTupleElement, whole,
                               absl::StrCat(base, i == 0 ? ".sorted_values" : ".sorted_indices"),
                               {sort});
    element->mutable_attrs().tuple_index = i;
    Instruction* top = add(comp, Opcode::kSlice, Shape(whole.type(), kept),
                           absl::StrCat(base, i == 0 ? ".values" : ".top_indices"), {element});
    top->mutable_attrs().slice = slice;
    result->AddOperand(top);
  }
  return absl::OkStatus();
}

absl::Status LowerBatchNorm(Module* module, Computation* comp, Instruction* result,
                            BatchNormKind kind, const std::vector<Instruction*>& operands,
                            double epsilon, int64_t feature_index) {
  const size_t want = kind == BatchNormKind::kTraining ? 3 : 5;
  if (operands.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("takes ", want, " operands, got ",
                                                   operands.size()));
  }
  const Shape& shape = operands[0]->shape();
  if (!shape.IsArray() || !IsFloatType(shape.type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch normalization takes floating-point arrays, got ", shape.ToString()));
  }
  if (feature_index < 0 || feature_index >= shape.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("feature_index ", feature_index,
                                                   " is out of range for ", shape.ToString()));
  }
  const ElementType t = shape.type();
  const Shape feature(t, {shape.dim(static_cast<int>(feature_index))});
  for (size_t i = 1; i < operands.size(); ++i) {
    const bool whole = kind == BatchNormKind::kGrad && i == 4;
    if (operands[i]->shape() != (whole ? shape : feature)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "operand ", i, " is ", operands[i]->shape().ToString(), ", expected ",
          (whole ? shape : feature).ToString()));
    }
  }
  const int64_t per_feature = shape.ElementCount() / std::max<int64_t>(feature.dim(0), 1);
  const std::string base = result->name();
  Emitter emit(comp, base + ".bn");
  auto add = [&](Opcode op, const Shape& s, std::vector<Instruction*> ops) {
    return emit.Add(op, s, ops);
  };
  auto constant = [&](double value, const Shape& s) { return emit.Splat<double>(s, value); };
  // A per-feature vector along the operand's feature dimension.
  auto spread = [&](Instruction* v) {
    Instruction* b = add(Opcode::kBroadcast, shape, {v});
    b->mutable_attrs().dimensions = {feature_index};
    return b;
  };
  Computation* sum = module->AddComputation(std::make_unique<Computation>(base + ".add"));
  {
    Instruction* a = sum->AddInstruction(
        std::make_unique<Instruction>(Opcode::kParameter, Shape::Scalar(t), base + ".a"));
    Instruction* b = sum->AddInstruction(
        std::make_unique<Instruction>(Opcode::kParameter, Shape::Scalar(t), base + ".b"));
    b->mutable_attrs().parameter_number = 1;
    Instruction* s = sum->AddInstruction(
        std::make_unique<Instruction>(Opcode::kAdd, Shape::Scalar(t), base + ".sum"));
    s->AddOperand(a);
    s->AddOperand(b);
    sum->set_root(s);
  }
  // Sum over every dimension but the feature's.
  auto per_feature_sum = [&](Instruction* v) {
    Instruction* zero = add(Opcode::kConstant, Shape::Scalar(t), {});
    zero->mutable_attrs().literal = Literal(Shape::Scalar(t));
    Instruction* r = add(Opcode::kReduce, feature, {v, zero});
    for (int64_t d = 0; d < shape.rank(); ++d) {
      if (d != feature_index) r->mutable_attrs().dimensions.push_back(d);
    }
    r->AddCalled(sum);
    return r;
  };
  auto mul = [&](Instruction* a, Instruction* b) { return add(Opcode::kMultiply, a->shape(), {a, b}); };
  auto sub = [&](Instruction* a, Instruction* b) { return add(Opcode::kSubtract, a->shape(), {a, b}); };
  auto div_n = [&](Instruction* v) {
    return add(Opcode::kDivide, v->shape(), {v, constant(static_cast<double>(per_feature), v->shape())});
  };
  Instruction* x = operands[0];
  Instruction* scale = operands[1];
  Instruction *mean, *variance;
  if (kind == BatchNormKind::kTraining) {
    mean = div_n(per_feature_sum(x));
  } else {
    mean = operands[kind == BatchNormKind::kInference ? 3 : 2];
  }
  Instruction* centered = sub(x, spread(mean));
  if (kind == BatchNormKind::kTraining) {
    variance = div_n(per_feature_sum(mul(centered, centered)));
  } else {
    variance = operands[kind == BatchNormKind::kInference ? 4 : 3];
  }
  Instruction* inv = add(Opcode::kRsqrt, feature,
                         {add(Opcode::kAdd, feature, {variance, constant(epsilon, feature)})});
  if (kind != BatchNormKind::kGrad) {
    Instruction* offset = operands[2];
    Instruction* scaled = mul(centered, spread(mul(inv, scale)));
    if (kind == BatchNormKind::kInference) {
      result->AddOperand(scaled);
      result->AddOperand(spread(offset));
      return absl::OkStatus();
    }
    result->AddOperand(add(Opcode::kAdd, shape, {scaled, spread(offset)}));
    result->AddOperand(mean);
    result->AddOperand(variance);
    return absl::OkStatus();
  }
  Instruction* dy = operands[4];
  Instruction* grad_offset = per_feature_sum(dy);
  Instruction* dy_centered = per_feature_sum(mul(dy, centered));
  Instruction* grad_scale = mul(dy_centered, inv);
  Instruction* correction = div_n(mul(dy_centered, mul(inv, inv)));
  Instruction* inner = sub(sub(dy, spread(div_n(grad_offset))), mul(centered, spread(correction)));
  result->AddOperand(mul(spread(mul(scale, inv)), inner));
  result->AddOperand(grad_scale);
  result->AddOperand(grad_offset);
  return absl::OkStatus();
}

}  // namespace kiln::ir

namespace kiln::ir {

namespace {

// A backend_config as written ({...}) or quoted with escapes ("{...}").
absl::StatusOr<std::string> ConfigText(absl::string_view config) {
  config = absl::StripAsciiWhitespace(config);
  if (absl::StartsWith(config, "\"")) return hlo_text::ReadQuoted(config);
  return std::string(config);
}

}  // namespace

absl::StatusOr<absl::flat_hash_map<std::string, int64_t>> ParseFfiOptions(
    absl::string_view config) {
  absl::flat_hash_map<std::string, int64_t> options;
  ASSIGN_OR_RETURN(const std::string text, ConfigText(config));
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&body, "{") || !absl::ConsumeSuffix(&body, "}")) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend_config '", config, "' is not a {name = value : type, ...} list"));
  }
  for (absl::string_view item : absl::StrSplit(body, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    int64_t value = 0;
    if (parts.size() != 2 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(
                              std::vector<absl::string_view>(absl::StrSplit(parts[1], ':'))[0]),
                          &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("backend_config entry '", absl::StripAsciiWhitespace(item),
                       "' is not name = integer : type"));
    }
    options[std::string(absl::StripAsciiWhitespace(parts[0]))] = value;
  }
  return options;
}

namespace {

// What each LAPACK routine that JAX calls computes, for messages.
absl::string_view LapackRoutineName(absl::string_view routine) {
  static const auto* const kNames = new absl::flat_hash_map<absl::string_view, absl::string_view>{
      {"potrf", "Cholesky factorization"}, {"trsm", "triangular solve"},
      {"getrf", "LU factorization"},       {"geqrf", "QR factorization"},
      {"geqp3", "pivoted QR factorization"}, {"orgqr", "Householder product"},
      {"ungqr", "Householder product"},    {"syevd", "symmetric eigendecomposition"},
      {"heevd", "Hermitian eigendecomposition"}, {"gesdd", "singular value decomposition"},
      {"gesvd", "singular value decomposition"}, {"geev", "eigendecomposition"},
      {"gees", "Schur decomposition"},     {"gehrd", "Hessenberg reduction"},
      {"sytrd", "tridiagonal reduction"},  {"hetrd", "tridiagonal reduction"},
      {"gtsv", "tridiagonal solve"},       {"stev", "tridiagonal eigendecomposition"}};
  auto it = kNames->find(routine);
  return it == kNames->end() ? absl::string_view("LAPACK routine") : it->second;
}

}  // namespace

bool IsLapackTarget(absl::string_view target) {
  return absl::StartsWith(target, "lapack_");
}

absl::Status LowerLapackCall(Module* module, Computation* comp, Instruction* result,
                             const std::vector<Instruction*>& operands,
                             absl::string_view backend_config) {
  const std::string target = result->attrs().custom_call_target;
  absl::string_view name = target;
  absl::ConsumePrefix(&name, "lapack_");
  const bool ffi = absl::ConsumeSuffix(&name, "_ffi");
  if (name.empty()) return absl::InvalidArgumentError("an empty LAPACK call name");
  const char precision = name[0];
  const absl::string_view routine = name.substr(1);
  const bool lowered = routine == "potrf" || routine == "trsm";
  const bool runs = routine == "getrf" || routine == "geqrf" || routine == "orgqr" ||
                    routine == "syevd" || routine == "gesdd";
  if ((!lowered && !runs) || (precision != 's' && precision != 'd')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom-call '", target, "' (XLA's LAPACK ", LapackRoutineName(routine),
        precision == 'c' || precision == 'z' ? " of complex matrices" : "",
        ") is not supported; Kiln runs LAPACK's potrf, trsm, getrf, geqrf, orgqr, syevd "
        "and gesdd of f32 and f64 matrices"));
  }
  if (!ffi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom-call '", target, "' is jaxlib's older LAPACK call (its sizes as operands); "
        "Kiln reads the typed-FFI form, lapack_", name, "_ffi"));
  }
  ASSIGN_OR_RETURN(auto options, ParseFfiOptions(backend_config.empty() ? "{}" : backend_config));
  auto option = [&](const char* key, std::initializer_list<char> allowed,
                    char fallback) -> absl::StatusOr<char> {
    auto it = options.find(key);
    if (it == options.end()) return fallback;
    for (char c : allowed) {
      if (it->second == c) return c;
    }
    return absl::InvalidArgumentError(absl::StrCat(target, ": ", key, " = ", it->second,
                                                   " is not one of the codes of ",
                                                   std::string(allowed)));
  };
  if (runs) {
    // The host backend runs these through LAPACK itself
    // (runtime/host/lapack_kernels.cc); the options it reads stay on the
    // call, checked and in one spelling.
    std::vector<std::string> kept;
    auto keep = [&](const char* key, std::initializer_list<char> allowed,
                    char fallback) -> absl::Status {
      ASSIGN_OR_RETURN(char c, option(key, allowed, fallback));
      kept.push_back(absl::StrCat(key, " = ", static_cast<int>(c), " : ui8"));
      return absl::OkStatus();
    };
    if (routine == "syevd") {
      RETURN_IF_ERROR(keep("mode", {'N', 'V'}, 'V'));
      RETURN_IF_ERROR(keep("uplo", {'L', 'U'}, 'L'));
    } else if (routine == "gesdd") {
      RETURN_IF_ERROR(keep("mode", {'A', 'S', 'N'}, 'A'));
    }
    for (const auto& [key, value] : options) {
      if ((routine == "syevd" && (key == "mode" || key == "uplo")) ||
          (routine == "gesdd" && key == "mode")) {
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat(target, ": unknown option '", key, "' in backend_config"));
    }
    result->mutable_attrs().config = kept.empty() ? "" : absl::StrCat("{", absl::StrJoin(kept, ", "), "}");
    for (Instruction* o : operands) result->AddOperand(o);
    return absl::OkStatus();
  }
  const ElementType type = precision == 's' ? ElementType::kF32 : ElementType::kF64;
  auto check_matrix = [&](const Instruction* m, const char* what) -> absl::Status {
    const Shape& s = m->shape();
    if (!s.IsArray() || s.type() != type || s.rank() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          target, ": ", what, " must be a ", ElementTypeName(type),
          " matrix (or a batch of them), got ", s.ToString()));
    }
    return absl::OkStatus();
  };
  auto add = [&](Opcode op, const Shape& s, const std::string& n,
                 std::vector<Instruction*> ops) {
    Instruction* added = comp->AddInstruction(std::make_unique<Instruction>(op, s, n));
    for (Instruction* o : ops) added->AddOperand(o);
    return added;
  };
  auto constant = [&](ElementType t, double value, const std::string& n) {
    Instruction* c = add(Opcode::kConstant, Shape::Scalar(t), n, {});
    c->mutable_attrs().literal = t == ElementType::kS32
                                     ? Literal::Scalar<int64_t>(t, static_cast<int64_t>(value))
                                     : Literal::Scalar<double>(t, value);
    return c;
  };
  auto splat = [&](Instruction* scalar, const Shape& s, const std::string& n) {
    return s.rank() == 0 ? scalar : add(Opcode::kBroadcast, s, n, {scalar});
  };
  const std::string base = result->name();

  if (routine == "trsm") {
    if (operands.size() != 2 && operands.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          target, " takes a, b and optionally alpha, got ", operands.size(), " operands"));
    }
    RETURN_IF_ERROR(check_matrix(operands[0], "a"));
    RETURN_IF_ERROR(check_matrix(operands[1], "b"));
    ASSIGN_OR_RETURN(char side, option("side", {'L', 'R'}, 'L'));
    ASSIGN_OR_RETURN(char uplo, option("uplo", {'L', 'U'}, 'L'));
    ASSIGN_OR_RETURN(char trans, option("trans_x", {'N', 'T', 'C'}, 'N'));
    ASSIGN_OR_RETURN(char diag, option("diag", {'N', 'U'}, 'N'));
    Instruction* b = operands[1];
    if (operands.size() == 3) {
      const Shape& alpha = operands[2]->shape();
      if (!alpha.IsArray() || alpha.type() != type || alpha.ElementCount() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(target, ": alpha must be one ",
                                                       ElementTypeName(type), ", got ",
                                                       alpha.ToString()));
      }
      Instruction* scalar = alpha.rank() == 0
                                ? operands[2]
                                : add(Opcode::kReshape, Shape::Scalar(type), base + ".alpha",
                                      {operands[2]});
      b = add(Opcode::kMultiply, b->shape(), base + ".scaled",
              {b, splat(scalar, b->shape(), base + ".alpha_all")});
    }
    result->set_opcode(Opcode::kTriangularSolve);
    result->mutable_attrs() = Attributes();
    LinalgOptions& o = result->mutable_attrs().linalg;
    o.left_side = side == 'L';
    o.lower = uplo == 'L';
    o.unit_diagonal = diag == 'U';
    // Real matrices: the adjoint is the transpose.
    o.transpose_a = trans == 'N' ? TransposeKind::kNoTranspose : TransposeKind::kTranspose;
    result->AddOperand(operands[0]);
    result->AddOperand(b);
    return absl::OkStatus();
  }

  // potrf.
  if (operands.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(target, " takes one operand, got ", operands.size()));
  }
  Instruction* a = operands[0];
  RETURN_IF_ERROR(check_matrix(a, "a"));
  const Shape& shape = a->shape();
  const int64_t rank = shape.rank();
  const int64_t n = shape.dim(static_cast<int>(rank - 1));
  if (shape.dim(static_cast<int>(rank - 2)) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(target, ": a must be square, got ", shape.ToString()));
  }
  ASSIGN_OR_RETURN(char uplo, option("uplo", {'L', 'U'}, 'L'));
  const std::vector<int64_t> batch(shape.dims().begin(), shape.dims().end() - 2);
  std::vector<int64_t> diag_dims = batch;
  diag_dims.push_back(n);
  const Shape info_shape(ElementType::kS32, batch);
  const Shape pred(ElementType::kPred, shape.dims());
  const Shape index(ElementType::kS32, shape.dims());

  Instruction* factor = add(Opcode::kCholesky, shape, base + ".factor", {a});
  factor->mutable_attrs().linalg.lower = uplo == 'L';
  Instruction* rows = add(Opcode::kIota, index, base + ".rows", {});
  rows->mutable_attrs().iota_dimension = rank - 2;
  Instruction* cols = add(Opcode::kIota, index, base + ".cols", {});
  cols->mutable_attrs().iota_dimension = rank - 1;
  // LAPACK writes the factor's triangle and leaves the other as it was.
  Instruction* mine = add(Opcode::kCompare, pred, base + ".triangle", {rows, cols});
  mine->mutable_attrs().direction =
      uplo == 'L' ? ComparisonDirection::kGe : ComparisonDirection::kLe;
  Instruction* merged = add(Opcode::kSelect, shape, base + ".merged", {mine, factor, a});

  // info: the first diagonal entry the factorization could not take (NaN
  // in Kiln's factor from that column on), 1-based; 0 when there is none.
  auto reducer = [&](Opcode op, ElementType t, const std::string& n2) {
    Computation* c = module->AddComputation(std::make_unique<Computation>(n2));
    Instruction* x = c->AddInstruction(
        std::make_unique<Instruction>(Opcode::kParameter, Shape::Scalar(t), n2 + ".x"));
    Instruction* y = c->AddInstruction(
        std::make_unique<Instruction>(Opcode::kParameter, Shape::Scalar(t), n2 + ".y"));
    y->mutable_attrs().parameter_number = 1;
    Instruction* r = c->AddInstruction(std::make_unique<Instruction>(op, Shape::Scalar(t), n2 + ".r"));
    r->AddOperand(x);
    r->AddOperand(y);
    c->set_root(r);
    return c;
  };
  Instruction* on_diagonal = add(Opcode::kCompare, pred, base + ".on_diagonal", {rows, cols});
  on_diagonal->mutable_attrs().direction = ComparisonDirection::kEq;
  Instruction* zeros = splat(constant(type, 0, base + ".zero"), shape, base + ".zeros");
  Instruction* diagonal_only =
      add(Opcode::kSelect, shape, base + ".diagonal_only", {on_diagonal, factor, zeros});
  Instruction* diagonal = add(Opcode::kReduce, Shape(type, diag_dims), base + ".diagonal",
                              {diagonal_only, constant(type, 0, base + ".sum_init")});
  diagonal->mutable_attrs().dimensions = {rank - 1};
  diagonal->AddCalled(reducer(Opcode::kAdd, type, base + ".sum"));
  const Shape diag_pred(ElementType::kPred, diag_dims);
  const Shape diag_index(ElementType::kS32, diag_dims);
  Instruction* failed = add(Opcode::kCompare, diag_pred, base + ".failed", {diagonal, diagonal});
  failed->mutable_attrs().direction = ComparisonDirection::kNe;
  Instruction* position = add(Opcode::kIota, diag_index, base + ".position", {});
  position->mutable_attrs().iota_dimension = rank - 2;
  Instruction* order = add(Opcode::kAdd, diag_index, base + ".order",
                           {position, splat(constant(ElementType::kS32, 1, base + ".one"),
                                            diag_index, base + ".ones")});
  Instruction* none = constant(ElementType::kS32, static_cast<double>(n + 1), base + ".none");
  Instruction* candidates = add(Opcode::kSelect, diag_index, base + ".candidates",
                                {failed, order, splat(none, diag_index, base + ".nones")});
  Instruction* first = add(Opcode::kReduce, info_shape, base + ".first",
                           {candidates, none});
  first->mutable_attrs().dimensions = {rank - 2};
  first->AddCalled(reducer(Opcode::kMinimum, ElementType::kS32, base + ".min"));
  Instruction* all_taken = add(Opcode::kCompare, Shape(ElementType::kPred, batch),
                               base + ".all_taken",
                               {first, splat(none, info_shape, base + ".none_all")});
  all_taken->mutable_attrs().direction = ComparisonDirection::kEq;
  Instruction* info = add(Opcode::kSelect, info_shape, base + ".info",
                          {all_taken,
                           splat(constant(ElementType::kS32, 0, base + ".ok"), info_shape,
                                 base + ".oks"),
                           first});
  result->set_opcode(Opcode::kTuple);
  result->mutable_attrs() = Attributes();
  result->AddOperand(merged);
  result->AddOperand(info);
  return absl::OkStatus();
}

namespace {

// A backend_config in JSON, as written ({...}) or as older XLA quotes it
// ("{\"...\"}").
absl::StatusOr<JsonValue> ReadBackendConfigJson(absl::string_view backend_config) {
  absl::StatusOr<std::string> text = ConfigText(backend_config);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("backend_config: ", text.status().message()));
  }
  absl::StatusOr<JsonValue> json = ParseJson(*text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("backend_config: ", json.status().message()));
  }
  return json;
}

// The last step of a library call that became `value`: the call itself
// becomes a copy of it, or, when it returns (value, s8[N] or u8[N]) as the
// libraries' workspace or scratch, the tuple of it and zeros.
absl::Status EndLibraryCall(Computation* comp, Instruction* result, Instruction* value) {
  result->mutable_attrs() = Attributes();
  if (!result->shape().IsTuple()) {
    result->set_opcode(Opcode::kCopy);
    result->AddOperand(value);
    return absl::OkStatus();
  }
  const Shape& scratch = result->shape().tuple_shape(1);
  if (!scratch.IsArray() || scratch.rank() != 1 ||
      (scratch.type() != ElementType::kS8 && scratch.type() != ElementType::kU8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("its scratch buffer is ", scratch.ToString(), ", not s8[N] or u8[N]"));
  }
  Emitter emit(comp, result->name() + ".scratch");
  result->set_opcode(Opcode::kTuple);
  result->AddOperand(value);
  result->AddOperand(emit.Splat<int64_t>(scratch, 0));
  return absl::OkStatus();
}

// A number from the backend_config object of custom-call `target`:
// `fallback` when absent.
absl::StatusOr<double> ConfigNumber(const JsonValue& config, const char* key, double fallback,
                                    absl::string_view target) {
  const JsonValue* v = config.Find(key);
  if (v == nullptr) return fallback;
  if (!v->AsNumber().has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("custom-call '", target, "': ", key, " is not a number"));
  }
  return *v->AsNumber();
}

}  // namespace

absl::Status LowerWidthChangingBitcast(Computation* comp, Instruction* result,
                                       Instruction* operand) {
  const Shape from = operand->shape();
  const Shape to = result->shape();
  const int in_bytes = ElementTypeSize(from.type());
  const int out_bytes = ElementTypeSize(to.type());
  auto refuse = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "bitcast-convert from ", from.ToString(), " to ", to.ToString(),
        ": a type r times narrower adds a last dimension of r, a type r times wider removes "
        "one"));
  };
  if (from.type() == ElementType::kPred || to.type() == ElementType::kPred || in_bytes == 0 ||
      out_bytes == 0) {
    return refuse();
  }
  const bool narrowing = out_bytes < in_bytes;
  const int64_t ratio = narrowing ? in_bytes / out_bytes : out_bytes / in_bytes;
  // The shape with the pieces' dimension and the one without.
  const Shape& many = narrowing ? to : from;
  const Shape& one = narrowing ? from : to;
  std::vector<int64_t> expected = one.dims();
  expected.push_back(ratio);
  if (many.dims() != expected) return refuse();
  auto unsigned_of = [](int bytes) {
    return bytes == 1 ? ElementType::kU8 : bytes == 2 ? ElementType::kU16
                                                      : bytes == 4 ? ElementType::kU32 : ElementType::kU64;
  };
  const ElementType wide_u = unsigned_of(narrowing ? in_bytes : out_bytes);
  const ElementType narrow_u = unsigned_of(narrowing ? out_bytes : in_bytes);
  const int64_t narrow_bits = 8 * (narrowing ? out_bytes : in_bytes);
  Emitter emit(comp, result->name() + ".bits");
  auto add = [&](Opcode op, const Shape& s, std::vector<Instruction*> ops) {
    return emit.Add(op, s, ops);
  };
  auto retype = [&](Instruction* v, ElementType t) {
    if (v->shape().type() == t) return v;
    return add(Opcode::kBitcastConvert, Shape(t, v->shape().dims()), {v});
  };
  auto constant = [&](ElementType t, const std::vector<int64_t>& dims, uint64_t value) {
    return emit.Splat<uint64_t>(Shape(t, dims), value);
  };
  const std::vector<int64_t>& dims = one.dims();
  const Shape wide(wide_u, dims);
  const Shape narrow(narrow_u, dims);
  // One piece of every element, with the pieces' dimension of size 1.
  std::vector<int64_t> piece_dims = dims;
  piece_dims.push_back(1);
  const Shape piece_shape(narrow_u, piece_dims);
  result->mutable_attrs() = Attributes();
  if (narrowing) {
    Instruction* bits = retype(operand, wide_u);
    const uint64_t mask = narrow_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << narrow_bits) - 1;
    std::vector<Instruction*> pieces;
    for (int64_t k = 0; k < ratio; ++k) {
      Instruction* shifted =
          k == 0 ? bits
                 : add(Opcode::kShiftRightLogical, wide,
                       {bits, constant(wide_u, dims, static_cast<uint64_t>(k * narrow_bits))});
      Instruction* low = add(Opcode::kAnd, wide, {shifted, constant(wide_u, dims, mask)});
      Instruction* piece = add(Opcode::kConvert, narrow, {low});
      pieces.push_back(add(Opcode::kReshape, piece_shape, {piece}));
    }
    if (to.type() == narrow_u) {
      // The concatenate is the result itself.
      result->set_opcode(Opcode::kConcatenate);
      for (Instruction* p : pieces) result->AddOperand(p);
      result->mutable_attrs().dimensions = {static_cast<int64_t>(dims.size())};
      return absl::OkStatus();
    }
    Instruction* joined = add(Opcode::kConcatenate, Shape(narrow_u, to.dims()), pieces);
    joined->mutable_attrs().dimensions = {static_cast<int64_t>(dims.size())};
    result->AddOperand(joined);  // a same-width bitcast-convert
    return absl::OkStatus();
  }
  Instruction* pieces = retype(operand, narrow_u);
  Instruction* value = nullptr;
  for (int64_t k = 0; k < ratio; ++k) {
    std::vector<int64_t> start(dims.size() + 1, 0), limit = from.dims();
    start.back() = k;
    limit.back() = k + 1;
    Instruction* slice = add(Opcode::kSlice, piece_shape, {pieces});
    for (size_t d = 0; d < start.size(); ++d) {
      slice->mutable_attrs().slice.push_back(SliceDim{start[d], limit[d], 1});
    }
    Instruction* piece = add(Opcode::kConvert, wide, {add(Opcode::kReshape, narrow, {slice})});
    if (k > 0) {
      piece = add(Opcode::kShiftLeft, wide,
                  {piece, constant(wide_u, dims, static_cast<uint64_t>(k * narrow_bits))});
    }
    value = value == nullptr ? piece : add(Opcode::kOr, wide, {value, piece});
  }
  if (to.type() == wide_u) {
    result->set_opcode(Opcode::kCopy);
  }
  result->AddOperand(value);
  return absl::OkStatus();
}

absl::Status LowerStochasticConvert(Computation* comp, Instruction* result,
                                    const std::vector<Instruction*>& operands) {
  if (operands.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("stochastic-convert takes an operand and random bits, got ",
                     operands.size(), " operands"));
  }
  Instruction* x = operands[0];
  Instruction* random = operands[1];
  const Shape& xs = x->shape();
  const Shape& rs = random->shape();
  const Shape& out = result->shape();
  if (!xs.IsArray() || !IsFloatType(xs.type()) || !rs.IsArray() ||
      !IsUnsignedIntType(rs.type()) || ElementTypeSize(rs.type()) != ElementTypeSize(xs.type()) ||
      rs.dims() != xs.dims()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stochastic-convert takes a float array and unsigned random bits of its width and "
        "shape, got ", xs.ToString(), " and ", rs.ToString()));
  }
  if (!out.IsArray() || !IsSignedIntType(out.type()) || out.dims() != xs.dims()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stochastic-convert gives a signed integer array of its operand's shape, not ",
        out.ToString()));
  }
  Emitter emit(comp, result->name() + ".sc");
  auto add = [&](Opcode op, const Shape& s, std::vector<Instruction*> ops) {
    return emit.Add(op, s, ops);
  };
  auto compare = [&](Instruction* a, Instruction* b, ComparisonDirection d) {
    Instruction* c = add(Opcode::kCompare, Shape(ElementType::kPred, xs.dims()), {a, b});
    c->mutable_attrs().direction = d;
    return c;
  };
  Instruction* negative =
      compare(add(Opcode::kSign, xs, {x}), emit.Splat<double>(xs, 0), ComparisonDirection::kLt);
  Instruction* magnitude = add(Opcode::kAbs, xs, {x});
  Instruction* whole = add(Opcode::kFloor, xs, {magnitude});
  Instruction* fraction = add(Opcode::kSubtract, xs, {magnitude, whole});
  // f16 cannot hold 2^16: the fraction is scaled in f32.
  if (xs.type() == ElementType::kF16) {
    fraction = add(Opcode::kConvert, Shape(ElementType::kF32, xs.dims()), {fraction});
  }
  const Shape& fs = fraction->shape();
  Instruction* fixed = add(Opcode::kMultiply, fs,
                           {fraction, emit.Splat<double>(fs, std::ldexp(1.0, 8 * ElementTypeSize(rs.type())))});
  Instruction* up = compare(random, add(Opcode::kConvert, rs, {fixed}), ComparisonDirection::kLt);
  Instruction* truncated = add(Opcode::kConvert, out, {whole});
  Instruction* rounded = add(Opcode::kSelect, out,
                             {up, add(Opcode::kAdd, out, {truncated, emit.Splat<int64_t>(out, 1)}),
                              truncated});
  Instruction* signed_value =
      add(Opcode::kSelect, out, {negative, add(Opcode::kNegate, out, {rounded}), rounded});
  // The type's limits: as integers for the result, as floats (rounded as
  // the float type rounds them) for the comparisons.
  const int bits = 8 * ElementTypeSize(out.type());
  const int64_t min = static_cast<int64_t>(~uint64_t{0} << (bits - 1));
  const int64_t max = static_cast<int64_t>((uint64_t{1} << (bits - 1)) - 1);
  Instruction* clamped_low = add(
      Opcode::kSelect, out,
      {compare(x, emit.Splat<double>(xs, static_cast<double>(min)), ComparisonDirection::kLe),
       emit.Splat<int64_t>(out, min), signed_value});
  result->mutable_attrs() = Attributes();
  result->AddOperand(
      compare(x, emit.Splat<double>(xs, static_cast<double>(max)), ComparisonDirection::kGe));
  result->AddOperand(emit.Splat<int64_t>(out, max));
  result->AddOperand(clamped_low);
  return absl::OkStatus();
}

bool IsGemmTarget(absl::string_view target) {
  return target == "__cublas$gemm" || target == "__cublas$lt$matmul";
}

absl::Status LowerGemmCall(Computation* comp, Instruction* result,
                           const std::vector<Instruction*>& operands,
                           absl::string_view backend_config) {
  const std::string target = result->attrs().custom_call_target;
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("custom-call '", target, "': ", why));
  };
  if (backend_config.empty()) {
    return refuse("has no backend_config, which holds the dot's dimension numbers");
  }
  absl::StatusOr<JsonValue> json = ReadBackendConfigJson(backend_config);
  if (!json.ok()) return refuse(json.status().message());
  const JsonValue* config = json->Find("gemm_backend_config");
  if (config == nullptr) config = &*json;  // the older, flat form
  const JsonValue* numbers = config->Find("dot_dimension_numbers");
  if (numbers == nullptr || !numbers->is_object()) {
    return refuse("backend_config has no dot_dimension_numbers");
  }
  DotDims dims;
  const std::pair<const char*, std::vector<int64_t>*> lists[] = {
      {"lhs_contracting_dimensions", &dims.lhs_contracting},
      {"rhs_contracting_dimensions", &dims.rhs_contracting},
      {"lhs_batch_dimensions", &dims.lhs_batch},
      {"rhs_batch_dimensions", &dims.rhs_batch}};
  for (const auto& [key, list] : lists) {
    const JsonValue* v = numbers->Find(key);
    if (v == nullptr) continue;  // protobuf's JSON leaves empty lists out
    if (v->AsArray() == nullptr) return refuse(absl::StrCat(key, " is not a list"));
    for (const JsonValue& d : *v->AsArray()) {
      std::optional<int64_t> i = d.AsInt();
      if (!i.has_value()) return refuse(absl::StrCat(key, " holds a non-integer"));
      list->push_back(*i);
    }
  }
  ASSIGN_OR_RETURN(const double alpha, ConfigNumber(*config, "alpha_real", 1, target));
  ASSIGN_OR_RETURN(const double alpha_imag, ConfigNumber(*config, "alpha_imag", 0, target));
  ASSIGN_OR_RETURN(const double beta, ConfigNumber(*config, "beta", 0, target));
  if (alpha_imag != 0) return refuse("a complex alpha (complex types are not supported)");
  std::string epilogue = "DEFAULT";
  if (const JsonValue* e = config->Find("epilogue"); e != nullptr) {
    if (e->AsString() == nullptr) return refuse("epilogue is not a string");
    epilogue = *e->AsString();
  }
  const bool bias = epilogue == "BIAS" || epilogue == "BIAS_RELU" || epilogue == "BIAS_GELU";
  const bool relu = epilogue == "RELU" || epilogue == "BIAS_RELU";
  const bool gelu = epilogue == "GELU" || epilogue == "BIAS_GELU";
  if (!bias && !relu && !gelu && epilogue != "DEFAULT") {
    return refuse(absl::StrCat("epilogue ", epilogue, " is not supported (Kiln reads DEFAULT, "
                               "BIAS, RELU, BIAS_RELU, GELU and BIAS_GELU)"));
  }
  const size_t want = 2 + (beta != 0 ? 1 : 0) + (bias ? 1 : 0);
  if (operands.size() != want) {
    return refuse(absl::StrCat("takes ", want, " operands with beta ", beta, " and epilogue ",
                               epilogue, ", got ", operands.size()));
  }
  const Shape& declared = result->shape();
  const bool tuple = declared.IsTuple();
  if (tuple && (declared.tuple_shapes().size() != 2 || !declared.tuple_shape(0).IsArray() ||
                !declared.tuple_shape(1).IsArray() ||
                declared.tuple_shape(1).type() != ElementType::kS8 ||
                declared.tuple_shape(1).rank() != 1)) {
    return refuse(absl::StrCat("returns ", declared.ToString(),
                               ", not an array or (array, s8[workspace])"));
  }
  const Shape out = tuple ? declared.tuple_shape(0) : declared;
  if (!out.IsArray() || out.rank() < 1) {
    return refuse(absl::StrCat("returns ", declared.ToString(), ", not an array of rank 1 or more"));
  }
  for (const Instruction* o : operands) {
    if (!o->shape().IsArray()) return refuse("takes arrays");
  }
  const ElementType t = out.type();
  const std::string base = result->name();
  Emitter emit(comp, base + ".gemm");
  auto add = [&](Opcode op, const Shape& s, std::vector<Instruction*> ops) {
    return emit.Add(op, s, ops);
  };
  auto as_out_type = [&](Instruction* v) { return emit.Convert(v, t); };
  auto scalar = [&](double value) { return emit.Splat<double>(out, value); };
  Instruction* a = operands[0];
  Instruction* b = operands[1];
  if (a->shape().type() != b->shape().type()) {
    a = as_out_type(a);
    b = as_out_type(b);
  }
  Instruction* value = add(Opcode::kDot, out, {a, b});
  value->mutable_attrs().dot = dims;
  absl::StatusOr<Shape> inferred = InferShape(*value);
  if (!inferred.ok()) return refuse(inferred.status().message());
  if (*inferred != out) {
    return refuse(absl::StrCat("its dimension numbers make ", inferred->ToString(),
                               " of the operands, but it returns ", out.ToString()));
  }
  if (alpha != 1) value = add(Opcode::kMultiply, out, {value, scalar(alpha)});
  size_t next = 2;
  if (beta != 0) {
    Instruction* c = operands[next++];
    if (c->shape().dims() != out.dims()) {
      return refuse(absl::StrCat("its addend is ", c->shape().ToString(), ", not of the result's ",
                                 out.ToString()));
    }
    value = add(Opcode::kAdd, out, {value, add(Opcode::kMultiply, out, {as_out_type(c), scalar(beta)})});
  }
  if (bias) {
    Instruction* v = operands[next++];
    const int64_t last = out.rank() - 1;
    if (v->shape().rank() != 1 || v->shape().dim(0) != out.dim(static_cast<int>(last))) {
      return refuse(absl::StrCat("its bias is ", v->shape().ToString(),
                                 ", not a vector along the result's last dimension of ",
                                 out.ToString()));
    }
    Instruction* spread = add(Opcode::kBroadcast, out, {as_out_type(v)});
    spread->mutable_attrs().dimensions = {last};
    value = add(Opcode::kAdd, out, {value, spread});
  }
  if (relu) value = add(Opcode::kMaximum, out, {value, scalar(0)});
  if (gelu) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as cuBLASLt's GELU.
    Instruction* x = value;
    Instruction* cube = add(Opcode::kMultiply, out, {add(Opcode::kMultiply, out, {x, x}), x});
    Instruction* inner = add(Opcode::kAdd, out, {x, add(Opcode::kMultiply, out,
                                                        {cube, scalar(0.044715)})});
    Instruction* th = add(Opcode::kTanh, out, {add(Opcode::kMultiply, out,
                                                   {inner, scalar(0.7978845608028654)})});
    value = add(Opcode::kMultiply, out,
                {add(Opcode::kMultiply, out, {x, scalar(0.5)}),
                 add(Opcode::kAdd, out, {th, scalar(1)})});
  }
  return EndLibraryCall(comp, result, value);
}

namespace {

// The convolution that computes a gradient of the forward convolution
// `forward` (its window, dim_labels and group counts): of its input
// (`input_gradient`: from the output gradient `first` [the forward output's
// shape] and the kernel `second`, read reversed) or of its kernel (from the
// input `first` and the output gradient `second`); `out` is the gradient's
// shape.
absl::StatusOr<Attributes> ConvGradientAttributes(const Attributes& forward, bool input_gradient,
                                                  const Shape& first, const Shape& second,
                                                  const Shape& out) {
  const ConvDims& f = forward.conv;
  const size_t spatial = f.input_spatial.size();
  if (forward.window.size() != spatial || f.kernel_spatial.size() != spatial ||
      f.output_spatial.size() != spatial) {
    return absl::InvalidArgumentError("its window and dim_labels disagree on the spatial dimensions");
  }
  if (forward.batch_group_count != 1) {
    return absl::InvalidArgumentError("a gradient of a convolution with batch_group_count > 1");
  }
  const int64_t groups = forward.feature_group_count;
  if (groups < 1 || groups > kMaxElements) {
    return absl::InvalidArgumentError(absl::StrCat("feature_group_count ", groups, " is out of range"));
  }
  // The window's numbers are the client's: bounded before any arithmetic
  // (shape inference checks the result again).
  for (const WindowDim& w : forward.window) {
    for (int64_t v : {w.size, w.stride, w.base_dilation, w.window_dilation}) {
      if (v < 1 || v > kMaxElements) {
        return absl::InvalidArgumentError(
            absl::StrCat("a window size, stride or dilation of ", v, " is out of range"));
      }
    }
    if (w.pad_lo < -kMaxElements || w.pad_lo > kMaxElements || w.pad_hi < -kMaxElements ||
        w.pad_hi > kMaxElements) {
      return absl::InvalidArgumentError("a window padding is out of range");
    }
  }
  // Every dimension dim_labels names exists in the operand it names.
  const Shape& input = input_gradient ? out : first;
  const Shape& kernel = input_gradient ? second : out;
  const Shape& output = input_gradient ? first : second;
  auto fits = [](const Shape& s, const std::vector<int64_t>& dims) {
    if (!s.IsArray() || s.rank() != static_cast<int64_t>(dims.size())) return false;
    for (int64_t d : dims) {
      if (d < 0 || d >= s.rank()) return false;
    }
    return true;
  };
  auto with = [](std::vector<int64_t> dims, std::initializer_list<int64_t> more) {
    dims.insert(dims.end(), more);
    return dims;
  };
  if (!fits(input, with(f.input_spatial, {f.input_batch, f.input_feature})) ||
      !fits(kernel, with(f.kernel_spatial, {f.kernel_input_feature, f.kernel_output_feature})) ||
      !fits(output, with(f.output_spatial, {f.output_batch, f.output_feature}))) {
    return absl::InvalidArgumentError("its dim_labels do not fit its operands");
  }
  // A padding computed in 128 bits, within shape inference's bounds.
  auto padding = [](__int128 v) -> absl::StatusOr<int64_t> {
    if (v < -static_cast<__int128>(kMaxElements) || v > static_cast<__int128>(kMaxElements)) {
      return absl::InvalidArgumentError("the gradient's window padding is out of range");
    }
    return static_cast<int64_t>(v);
  };
  using Wide = __int128;
  Attributes g;
  g.window.resize(spatial);
  if (input_gradient) {
    // dx = conv(dy dilated by the stride, kernel reversed with its features
    // swapped), padded so that every input position gets its terms.
    for (size_t i = 0; i < spatial; ++i) {
      const WindowDim& w = forward.window[i];
      if (w.base_dilation != 1) {
        return absl::InvalidArgumentError("a gradient of a convolution with lhs dilation");
      }
      const int64_t o = first.dim(static_cast<int>(f.output_spatial[i]));
      const int64_t in = out.dim(static_cast<int>(f.input_spatial[i]));
      const Wide span = Wide{w.size - 1} * w.window_dilation;
      WindowDim& d = g.window[i];
      d.size = w.size;
      d.stride = 1;
      d.base_dilation = w.stride;
      d.window_dilation = w.window_dilation;
      ASSIGN_OR_RETURN(d.pad_lo, padding(span - w.pad_lo));
      ASSIGN_OR_RETURN(d.pad_hi, padding(Wide{in} - Wide{o - 1} * w.stride - 1 + w.pad_lo));
    }
    g.conv.input_batch = f.output_batch;
    g.conv.input_feature = f.output_feature;
    g.conv.input_spatial = f.output_spatial;
    g.conv.kernel_input_feature = f.kernel_output_feature;
    g.conv.kernel_output_feature = f.kernel_input_feature;
    g.conv.kernel_spatial = f.kernel_spatial;
    g.conv.output_batch = f.input_batch;
    g.conv.output_feature = f.input_feature;
    g.conv.output_spatial = f.input_spatial;
    return g;
  }
  // dw = conv(x with batch and features swapped, dy as the kernel), the
  // window the size of dy, stepping by the forward dilation.
  for (size_t i = 0; i < spatial; ++i) {
    const WindowDim& w = forward.window[i];
    if (w.base_dilation != 1) {
      return absl::InvalidArgumentError("a gradient of a convolution with lhs dilation");
    }
    const int64_t in = first.dim(static_cast<int>(f.input_spatial[i]));
    const int64_t o = second.dim(static_cast<int>(f.output_spatial[i]));
    const int64_t k = out.dim(static_cast<int>(f.kernel_spatial[i]));
    WindowDim& d = g.window[i];
    d.size = o;
    d.stride = w.window_dilation;
    d.base_dilation = 1;
    d.window_dilation = w.stride;
    d.pad_lo = w.pad_lo;
    ASSIGN_OR_RETURN(d.pad_hi, padding(Wide{k - 1} * w.window_dilation + Wide{o - 1} * w.stride +
                                       1 - in - w.pad_lo));
  }
  g.conv.input_batch = f.input_feature;
  g.conv.input_feature = f.input_batch;
  g.conv.input_spatial = f.input_spatial;
  g.conv.kernel_input_feature = f.output_batch;
  g.conv.kernel_output_feature = f.output_feature;
  g.conv.kernel_spatial = f.output_spatial;
  g.conv.output_batch = f.kernel_input_feature;
  g.conv.output_feature = f.kernel_output_feature;
  g.conv.output_spatial = f.kernel_spatial;
  // Grouped: each group's input features meet its own output features.
  g.batch_group_count = groups;
  return g;
}

}  // namespace

bool IsCudnnConvTarget(absl::string_view target) {
  return absl::StartsWith(target, "__cudnn$conv");
}

absl::Status LowerCudnnConvCall(Computation* comp, Instruction* result,
                                const std::vector<Instruction*>& operands,
                                absl::string_view backend_config) {
  const std::string target = result->attrs().custom_call_target;
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("custom-call '", target, "': ", why));
  };
  const bool backward_input = target == "__cudnn$convBackwardInput";
  const bool backward_filter = target == "__cudnn$convBackwardFilter";
  const bool forward = target == "__cudnn$convForward" || backward_input || backward_filter;
  const bool fused = target == "__cudnn$convBiasActivationForward";
  if (!forward && !fused) {
    return refuse("is a cuDNN call that Kiln does not read (it reads convForward, "
                  "convBiasActivationForward, convBackwardInput and convBackwardFilter)");
  }
  JsonValue json;
  if (!backend_config.empty()) {
    absl::StatusOr<JsonValue> read = ReadBackendConfigJson(backend_config);
    if (!read.ok()) return refuse(read.status().message());
    json = *std::move(read);
  }
  const JsonValue* config = json.Find("cudnn_conv_backend_config");
  if (config == nullptr) config = &json;  // the older, flat form
  ASSIGN_OR_RETURN(const double scale, ConfigNumber(*config, "conv_result_scale", 1, target));
  ASSIGN_OR_RETURN(const double side_scale, ConfigNumber(*config, "side_input_scale", 0, target));
  ASSIGN_OR_RETURN(const double leaky_alpha, ConfigNumber(*config, "leakyrelu_alpha", 0, target));
  // stream_executor's ActivationMode, by name or by number.
  std::string activation = "kNone";
  if (const JsonValue* v = config->Find("activation_mode"); v != nullptr) {
    static const char* const kByNumber[] = {"kNone", "kSigmoid", "kRelu",     "kRelu6",
                                            "kReluX", "kTanh",   "kBandPass", "kElu",
                                            "kLeakyRelu", "kGeluExact"};
    if (std::optional<int64_t> i = v->AsInt(); i.has_value() && *i >= 0 && *i < 10) {
      activation = kByNumber[*i];
    } else if (v->AsString() != nullptr) {
      activation = *v->AsString();
    } else {
      return refuse("activation_mode is neither a name nor a number");
    }
  }
  static const absl::flat_hash_set<absl::string_view> kActivations = {
      "kNone", "kRelu", "kRelu6", "kTanh", "kSigmoid", "kElu", "kLeakyRelu"};
  if (!kActivations.contains(activation)) {
    return refuse(absl::StrCat("activation_mode ", activation, " is not supported"));
  }
  if (forward && activation != "kNone") {
    return refuse("takes no activation");
  }
  const size_t min_operands = forward ? 2 : 3;
  const size_t max_operands = forward ? 2 : 4;
  if (operands.size() < min_operands || operands.size() > max_operands) {
    return refuse(absl::StrCat("takes ", min_operands,
                               max_operands > min_operands ? absl::StrCat(" or ", max_operands) : "",
                               " operands, got ", operands.size()));
  }
  for (const Instruction* o : operands) {
    if (!o->shape().IsArray()) return refuse("takes arrays");
  }
  const Shape& declared = result->shape();
  const bool tuple = declared.IsTuple();
  if (tuple && declared.tuple_shapes().size() != 2) {
    return refuse(absl::StrCat("returns ", declared.ToString(),
                               ", not an array or (array, u8[scratch])"));
  }
  const Shape out = tuple ? declared.tuple_shape(0) : declared;
  if (!out.IsArray() || !IsFloatType(out.type())) {
    return refuse(absl::StrCat("returns ", declared.ToString(), ", not a floating-point array"));
  }
  const ElementType t = out.type();
  const std::string base = result->name();
  Emitter emit(comp, base + ".conv");
  auto add = [&](Opcode op, const Shape& s, std::vector<Instruction*> ops) {
    return emit.Add(op, s, ops);
  };
  auto as_out_type = [&](Instruction* v) { return emit.Convert(v, t); };
  auto scalar = [&](double value) { return emit.Splat<double>(out, value); };
  // The convolution the call's own attributes describe (for the gradient
  // calls, the forward one whose gradient it is).
  const Attributes& call = result->attrs();
  Instruction* value = add(Opcode::kConvolution, out,
                           {as_out_type(operands[0]), as_out_type(operands[1])});
  Attributes& attrs = value->mutable_attrs();
  if (backward_input || backward_filter) {
    absl::StatusOr<Attributes> read = ConvGradientAttributes(
        call, backward_input, operands[0]->shape(), operands[1]->shape(), out);
    if (!read.ok()) return refuse(read.status().message());
    Attributes gradient = *std::move(read);
    if (backward_input && call.feature_group_count > 1) {
      // Each group's kernel with its features swapped: w [.., ci, G*og]
      // becomes [spatial..., og, G*ci], so that output feature g*ci + i
      // reads group g's og features of dy.
      const ConvDims& f = call.conv;
      const int64_t g_count = call.feature_group_count;
      Instruction* w = value->operand(1);
      const Shape& ws = w->shape();
      const int64_t ci = ws.dim(static_cast<int>(f.kernel_input_feature));
      const int64_t o = ws.dim(static_cast<int>(f.kernel_output_feature));
      if (o % g_count != 0) {
        return refuse(absl::StrCat("its kernel's ", o, " output features do not split into ",
                                   g_count, " groups"));
      }
      if (g_count > o || ci > kMaxElements / g_count) {
        return refuse(absl::StrCat("feature_group_count ", g_count, " does not fit its kernel"));
      }
      const int64_t og = o / g_count;
      std::vector<int64_t> order = f.kernel_spatial;
      std::vector<int64_t> spatial_dims;
      for (int64_t d : f.kernel_spatial) spatial_dims.push_back(ws.dim(static_cast<int>(d)));
      const int64_t n = static_cast<int64_t>(spatial_dims.size());
      order.push_back(f.kernel_input_feature);
      order.push_back(f.kernel_output_feature);
      auto dims_with = [&](std::initializer_list<int64_t> tail) {
        std::vector<int64_t> dims = spatial_dims;
        dims.insert(dims.end(), tail);
        return Shape(t, dims);
      };
      Instruction* canonical = add(Opcode::kTranspose, dims_with({ci, o}), {w});
      canonical->mutable_attrs().dimensions = order;
      Instruction* split = add(Opcode::kReshape, dims_with({ci, g_count, og}), {canonical});
      std::vector<int64_t> swap(n);
      std::iota(swap.begin(), swap.end(), 0);
      for (int64_t d : {n + 2, n + 1, n}) swap.push_back(d);
      Instruction* swapped = add(Opcode::kTranspose, dims_with({og, g_count, ci}), {split});
      swapped->mutable_attrs().dimensions = swap;
      Instruction* merged = add(Opcode::kReshape, dims_with({og, g_count * ci}), {swapped});
      value->ReplaceOperand(1, merged);
      gradient.conv.kernel_spatial.resize(n);
      std::iota(gradient.conv.kernel_spatial.begin(), gradient.conv.kernel_spatial.end(), 0);
      gradient.conv.kernel_input_feature = n;
      gradient.conv.kernel_output_feature = n + 1;
      gradient.feature_group_count = g_count;
    }
    if (backward_input) {
      // The kernel read back to front along its window.
      Instruction* reversed = add(Opcode::kReverse, value->operand(1)->shape(),
                                  {value->operand(1)});
      reversed->mutable_attrs().dimensions = gradient.conv.kernel_spatial;
      value->ReplaceOperand(1, reversed);
    }
    attrs = std::move(gradient);
  } else {
    attrs.window = call.window;
    attrs.conv = call.conv;
    attrs.feature_group_count = call.feature_group_count;
    attrs.batch_group_count = call.batch_group_count;
  }
  attrs.operand_precision = call.operand_precision;
  absl::StatusOr<Shape> inferred = InferShape(*value);
  if (!inferred.ok()) return refuse(inferred.status().message());
  if (*inferred != out) {
    return refuse(absl::StrCat("its window and dim_labels make ", inferred->ToString(),
                               ", but it returns ", out.ToString()));
  }
  if (scale != 1) value = add(Opcode::kMultiply, out, {value, scalar(scale)});
  if (fused) {
    if (operands.size() == 4 && side_scale != 0) {
      Instruction* side = operands[3];
      if (side->shape().dims() != out.dims()) {
        return refuse(absl::StrCat("its side input is ", side->shape().ToString(),
                                   ", not of the result's ", out.ToString()));
      }
      value = add(Opcode::kAdd, out,
                  {value, add(Opcode::kMultiply, out, {as_out_type(side), scalar(side_scale)})});
    }
    Instruction* bias = operands[2];
    const int64_t feature = call.conv.output_feature;
    if (bias->shape().rank() != 1 || feature < 0 || feature >= out.rank() ||
        bias->shape().dim(0) != out.dim(static_cast<int>(feature))) {
      return refuse(absl::StrCat("its bias is ", bias->shape().ToString(),
                                 ", not a vector along the output features of ", out.ToString()));
    }
    Instruction* spread = add(Opcode::kBroadcast, out, {as_out_type(bias)});
    spread->mutable_attrs().dimensions = {feature};
    value = add(Opcode::kAdd, out, {value, spread});
    if (activation == "kRelu") {
      value = add(Opcode::kMaximum, out, {value, scalar(0)});
    } else if (activation == "kRelu6") {
      value = add(Opcode::kMinimum, out, {add(Opcode::kMaximum, out, {value, scalar(0)}),
                                          scalar(6)});
    } else if (activation == "kTanh") {
      value = add(Opcode::kTanh, out, {value});
    } else if (activation == "kSigmoid") {
      value = add(Opcode::kLogistic, out, {value});
    } else if (activation == "kElu") {
      // x for x > 0, exp(x) - 1 otherwise.
      Instruction* positive = add(Opcode::kCompare, Shape(ElementType::kPred, out.dims()),
                                  {value, scalar(0)});
      positive->mutable_attrs().direction = ComparisonDirection::kGt;
      value = add(Opcode::kSelect, out,
                  {positive, value, add(Opcode::kExpm1, out, {value})});
    } else if (activation == "kLeakyRelu") {
      Instruction* positive = add(Opcode::kCompare, Shape(ElementType::kPred, out.dims()),
                                  {value, scalar(0)});
      positive->mutable_attrs().direction = ComparisonDirection::kGt;
      value = add(Opcode::kSelect, out,
                  {positive, value, add(Opcode::kMultiply, out, {value, scalar(leaky_alpha)})});
    }
  }
  return EndLibraryCall(comp, result, value);
}

absl::Status LowerXlaMarkerCall(Instruction* call, const std::vector<Instruction*>& operands) {
  const std::string target = call->attrs().custom_call_target;
  if (IsGemmTarget(target) || IsCudnnConvTarget(target)) return absl::OkStatus();
  if (absl::StrContains(target, "python") && absl::StrContains(target, "callback")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom-call '", target, "' calls back into the Python process that traced the "
        "module (jax.debug.print, pure_callback, io_callback); it cannot run in Kiln"));
  }
  // Calls into a GPU or TPU library or kernel that XLA's backend passes (or
  // jaxlib's GPU lowerings, or Pallas) put in a module: they only run on
  // that backend's runtime.
  static constexpr absl::string_view kDevicePrefixes[] = {
      "__cublas", "__cudnn", "__cusolver", "__triton", "__gpu", "cublas_", "cusolver_",
      "cusparse_", "cu_threefry", "cu_lu_pivots", "hipsolver_", "hipblas_", "hip_threefry",
      "hip_lu_pivots", "tpu_custom_call", "mosaic_gpu"};
  for (absl::string_view prefix : kDevicePrefixes) {
    if (absl::StartsWith(target, prefix)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "custom-call '", target, "' is a call into a GPU or TPU library that XLA's device "
          "backend (or jaxlib or Pallas for that device) inserted; Kiln reads modules as JAX "
          "lowers them or as XLA's CPU compiler runs them"));
    }
  }
  const bool sharding = target == "Sharding";
  const bool spmd = target == "SPMDFullToShardShape" || target == "SPMDShardToFullShape";
  if (!sharding && !spmd) return absl::OkStatus();
  if (operands.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("custom-call '", target, "' takes one operand, got ", operands.size()));
  }
  if (operands[0]->shape() != call->shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom-call '", target, "' turns ", operands[0]->shape().ToString(), " into ",
        call->shape().ToString(), ": a module partitioned across devices (SPMD), which Kiln "
        "runs only as one partition"));
  }
  call->set_opcode(Opcode::kCopy);
  call->mutable_attrs() = Attributes();
  return absl::OkStatus();
}

}  // namespace kiln::ir
