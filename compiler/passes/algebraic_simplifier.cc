#include "compiler/passes/algebraic_simplifier.h"

#include <vector>

#include "base/status_macros.h"
#include "compiler/passes/rewriter.h"
#include "compiler/passes/side_effects.h"

namespace kiln::passes {
namespace {

using ir::Instruction;
using ir::Literal;
using ir::Opcode;

template <typename T>
Literal Probe(ir::ElementType type, T value) {
  return Literal::Scalar<T>(type, value);
}

bool IsIdentityPermutation(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// x + c and c + x give x when c is the additive identity: -0.0 for floats
// (+0.0 is not one: -0 + +0 = +0), 0 for integers.
Instruction* SimplifyAdd(Instruction* instr) {
  const ir::ElementType t = instr->shape().type();
  Literal zero;
  if (ir::IsFloatType(t)) {
    zero = Probe<double>(t, -0.0);
  } else if (ir::IsIntegralType(t)) {
    zero = Probe<int64_t>(t, 0);
  } else {
    return nullptr;
  }
  if (IsUniform(instr->operand(1), zero)) return instr->operand(0);
  if (IsUniform(instr->operand(0), zero)) return instr->operand(1);
  return nullptr;
}

// x op c (and c op x when `commutes`) give x when c is `probe`.
Instruction* RightOrLeftIdentity(Instruction* instr, const Literal& probe,
                                 bool commutes) {
  if (IsUniform(instr->operand(1), probe)) return instr->operand(0);
  if (commutes && IsUniform(instr->operand(0), probe)) return instr->operand(1);
  return nullptr;
}

Instruction* SimplifyBinaryIdentity(Instruction* instr) {
  const ir::ElementType t = instr->shape().type();
  const bool is_float = ir::IsFloatType(t);
  const bool is_int = ir::IsIntegralType(t);
  const bool is_pred = t == ir::ElementType::kPred;
  switch (instr->opcode()) {
    case Opcode::kAdd:
      return SimplifyAdd(instr);
    case Opcode::kSubtract:
      // x - (+0) = x + (-0) = x.
      if (!is_float && !is_int) return nullptr;
      return RightOrLeftIdentity(instr, Probe<int64_t>(t, 0), false);
    case Opcode::kMultiply:
      if (!is_float && !is_int) return nullptr;
      return RightOrLeftIdentity(instr, Probe<int64_t>(t, 1), true);
    case Opcode::kDivide:
      if (!is_float && !is_int) return nullptr;
      return RightOrLeftIdentity(instr, Probe<int64_t>(t, 1), false);
    case Opcode::kOr:
    case Opcode::kXor:
      if (!is_int && !is_pred) return nullptr;
      if (instr->opcode() == Opcode::kOr &&
          instr->operand(0) == instr->operand(1)) {
        return instr->operand(0);
      }
      return RightOrLeftIdentity(instr, Probe<int64_t>(t, 0), true);
    case Opcode::kAnd:
      if (!is_int && !is_pred) return nullptr;
      if (instr->operand(0) == instr->operand(1)) return instr->operand(0);
      // -1 converts to all ones for every integer type, and to true.
      return RightOrLeftIdentity(instr, Probe<int64_t>(t, -1), true);
    case Opcode::kShiftLeft:
    case Opcode::kShiftRightLogical:
    case Opcode::kShiftRightArithmetic:
      if (!is_int) return nullptr;
      return RightOrLeftIdentity(instr, Probe<int64_t>(t, 0), false);
    case Opcode::kMaximum:
    case Opcode::kMinimum:
      // max(x, x) returns one of two equal bit patterns (a NaN: the first).
      if (instr->operand(0) == instr->operand(1)) return instr->operand(0);
      return nullptr;
    default:
      return nullptr;
  }
}

Instruction* SimplifySelect(Instruction* instr, SideEffects& effects) {
  Instruction* pred = instr->operand(0);
  Instruction* on_true = instr->operand(1);
  Instruction* on_false = instr->operand(2);
  if (on_true == on_false && !effects.DependsOnSideEffect(*pred)) {
    return on_true;
  }
  const ir::ElementType t = ir::ElementType::kPred;
  if (IsUniform(pred, Probe<int64_t>(t, 1)) &&
      !effects.DependsOnSideEffect(*on_false)) {
    return on_true;
  }
  if (IsUniform(pred, Probe<int64_t>(t, 0)) &&
      !effects.DependsOnSideEffect(*on_true)) {
    return on_false;
  }
  return nullptr;
}

Instruction* SimplifyGetTupleElement(Instruction* instr, SideEffects& effects) {
  Instruction* tuple = instr->operand(0);
  if (tuple->opcode() != Opcode::kTuple) return nullptr;
  const int64_t index = instr->attrs().tuple_index;
  for (int i = 0; i < tuple->operand_count(); ++i) {
    if (i != index && effects.DependsOnSideEffect(*tuple->operand(i))) {
      return nullptr;
    }
  }
  return tuple->operand(static_cast<int>(index));
}

Instruction* SimplifyReshape(Instruction* instr) {
  Instruction* x = instr->operand(0);
  if (x->opcode() == Opcode::kReshape &&
      UpdateIfShapeHolds(instr, {x->operand(0)}, instr->attrs())) {
    x = instr->operand(0);
    if (x->shape().dims() == instr->shape().dims()) return x;
    return instr;
  }
  if (x->shape().dims() == instr->shape().dims()) return x;
  return nullptr;
}

Instruction* SimplifyTranspose(Instruction* instr) {
  Instruction* x = instr->operand(0);
  const std::vector<int64_t>& perm = instr->attrs().dimensions;
  if (x->opcode() == Opcode::kTranspose) {
    // Result dim i is x's dim perm[i], which is its operand's
    // inner[perm[i]].
    const std::vector<int64_t>& inner = x->attrs().dimensions;
    ir::Attributes attrs = instr->attrs();
    for (size_t i = 0; i < perm.size(); ++i) {
      attrs.dimensions[i] = inner[perm[i]];
    }
    Instruction* source = x->operand(0);
    if (IsIdentityPermutation(attrs.dimensions)) return source;
    if (UpdateIfShapeHolds(instr, {source}, attrs)) return instr;
    return nullptr;
  }
  if (IsIdentityPermutation(perm)) return x;
  return nullptr;
}

Instruction* SimplifyBroadcast(Instruction* instr) {
  Instruction* x = instr->operand(0);
  const std::vector<int64_t>& dims = instr->attrs().dimensions;
  auto is_identity = [&](const Instruction* source,
                         const std::vector<int64_t>& d) {
    return source->shape().dims() == instr->shape().dims() &&
           IsIdentityPermutation(d);
  };
  if (x->opcode() == Opcode::kBroadcast) {
    // The source's dim i became x's dim inner[i], which became the
    // result's dim dims[inner[i]].
    const std::vector<int64_t>& inner = x->attrs().dimensions;
    ir::Attributes attrs = instr->attrs();
    attrs.dimensions.resize(inner.size());
    for (size_t i = 0; i < inner.size(); ++i) {
      attrs.dimensions[i] = dims[inner[i]];
    }
    Instruction* source = x->operand(0);
    if (is_identity(source, attrs.dimensions)) return source;
    if (UpdateIfShapeHolds(instr, {source}, attrs)) return instr;
    return nullptr;
  }
  if (is_identity(x, dims)) return x;
  return nullptr;
}

// Dimensions of an operand of rank `rank` that are neither batch nor
// contracting, in increasing order.
std::vector<int64_t> FreeDims(int rank, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<bool> used(rank, false);
  for (int64_t d : batch) used[d] = true;
  for (int64_t d : contracting) used[d] = true;
  std::vector<int64_t> free;
  for (int d = 0; d < rank; ++d) {
    if (!used[d]) free.push_back(d);
  }
  return free;
}

// If `operand` is a transpose whose free dimensions keep their order,
// renames `batch` and `contracting` to the transpose's operand's dims and
// returns that operand; otherwise nullptr.
Instruction* FoldTransposeIntoDot(Instruction* operand,
                                  std::vector<int64_t>* batch,
                                  std::vector<int64_t>* contracting) {
  if (operand->opcode() != Opcode::kTranspose) return nullptr;
  // The operand's dim j is the transpose's source dim perm[j].
  const std::vector<int64_t>& perm = operand->attrs().dimensions;
  int64_t last = -1;
  for (int64_t d : FreeDims(operand->shape().rank(), *batch, *contracting)) {
    if (perm[d] <= last) return nullptr;
    last = perm[d];
  }
  for (int64_t& d : *batch) d = perm[d];
  for (int64_t& d : *contracting) d = perm[d];
  return operand->operand(0);
}

Instruction* SimplifyDot(Instruction* instr) {
  ir::Attributes attrs = instr->attrs();
  ir::DotDims& dims = attrs.dot;
  Instruction* lhs = instr->operand(0);
  Instruction* rhs = instr->operand(1);
  Instruction* new_lhs =
      FoldTransposeIntoDot(lhs, &dims.lhs_batch, &dims.lhs_contracting);
  Instruction* new_rhs =
      FoldTransposeIntoDot(rhs, &dims.rhs_batch, &dims.rhs_contracting);
  if (new_lhs == nullptr && new_rhs == nullptr) return nullptr;
  if (new_lhs == nullptr) new_lhs = lhs;
  if (new_rhs == nullptr) new_rhs = rhs;
  return UpdateIfShapeHolds(instr, {new_lhs, new_rhs}, attrs) ? instr : nullptr;
}

Instruction* SimplifyDataMovement(Instruction* instr) {
  Instruction* x = instr->operand(0);
  const ir::Attributes& at = instr->attrs();
  switch (instr->opcode()) {
    case Opcode::kSlice:
      for (int d = 0; d < x->shape().rank(); ++d) {
        const ir::SliceDim& s = at.slice[d];
        if (s.start != 0 || s.limit != x->shape().dim(d) || s.stride != 1) {
          return nullptr;
        }
      }
      return x;
    case Opcode::kPad:
      for (const ir::PadDim& p : at.padding) {
        if (p.lo != 0 || p.hi != 0 || p.interior != 0) return nullptr;
      }
      return x;
    case Opcode::kReverse:
      for (int64_t d : at.dimensions) {
        if (x->shape().dim(static_cast<int>(d)) > 1) return nullptr;
      }
      return x;
    case Opcode::kConcatenate:
      return instr->operand_count() == 1 ? x : nullptr;
    default:
      return nullptr;
  }
}

// op(broadcast(a), broadcast(b), ...) -> broadcast(op(a, b, ...)) for an
// elementwise op whose operands are all broadcasts the same way (the same
// operand dims and dimensions): each result element is op of the same
// source elements either way, and the op runs on the smaller arrays.
absl::StatusOr<Instruction*> SinkBroadcasts(Instruction* instr,
                                            Rewriter& rewriter) {
  if (!ir::IsElementwise(instr->opcode()) || instr->operand_count() == 0) {
    return nullptr;
  }
  const Instruction* first = instr->operand(0);
  if (first->opcode() != Opcode::kBroadcast) return nullptr;
  const std::vector<int64_t>& source_dims = first->operand(0)->shape().dims();
  if (source_dims == instr->shape().dims()) return nullptr;
  std::vector<Instruction*> sources;
  for (Instruction* op : instr->operands()) {
    if (op->opcode() != Opcode::kBroadcast ||
        op->attrs().dimensions != first->attrs().dimensions ||
        op->operand(0)->shape().dims() != source_dims) {
      return nullptr;
    }
    sources.push_back(op->operand(0));
  }
  auto small = std::make_unique<Instruction>(
      instr->opcode(), ir::Shape(instr->shape().type(), source_dims), "");
  for (Instruction* source : sources) small->AddOperand(source);
  small->mutable_attrs() = instr->attrs();
  ASSIGN_OR_RETURN(Instruction * op,
                   rewriter.Add(std::move(small), instr->name()));
  auto broadcast =
      std::make_unique<Instruction>(Opcode::kBroadcast, instr->shape(), "");
  broadcast->AddOperand(op);
  broadcast->mutable_attrs().dimensions = first->attrs().dimensions;
  return rewriter.Add(std::move(broadcast), instr->name());
}

Instruction* Simplify(Instruction* instr, SideEffects& effects) {
  switch (instr->opcode()) {
    case Opcode::kNegate:
    case Opcode::kNot: {
      Instruction* x = instr->operand(0);
      return x->opcode() == instr->opcode() ? x->operand(0) : nullptr;
    }
    case Opcode::kConvert: {
      Instruction* x = instr->operand(0);
      return x->shape().type() == instr->shape().type() ? x : nullptr;
    }
    case Opcode::kSelect:
      return SimplifySelect(instr, effects);
    case Opcode::kGetTupleElement:
      return SimplifyGetTupleElement(instr, effects);
    case Opcode::kReshape:
      return SimplifyReshape(instr);
    case Opcode::kTranspose:
      return SimplifyTranspose(instr);
    case Opcode::kBroadcast:
      return SimplifyBroadcast(instr);
    case Opcode::kDot:
      return SimplifyDot(instr);
    case Opcode::kSlice:
    case Opcode::kPad:
    case Opcode::kReverse:
    case Opcode::kConcatenate:
      return SimplifyDataMovement(instr);
    default:
      if (ir::OpcodeCategory(instr->opcode()) == ir::OpCategory::kBinary) {
        return SimplifyBinaryIdentity(instr);
      }
      return nullptr;
  }
}

}  // namespace

absl::StatusOr<bool> AlgebraicSimplifier::Run(ir::Module* module) {
  SideEffects effects(*module);
  bool changed = false;
  for (const auto& comp : module->computations()) {
    Rewriter rewriter(comp.get());
    ASSIGN_OR_RETURN(
        bool comp_changed,
        rewriter.Run([&](Instruction* instr) -> absl::StatusOr<Instruction*> {
          if (Instruction* simpler = Simplify(instr, effects)) return simpler;
          return SinkBroadcasts(instr, rewriter);
        }));
    changed = changed || comp_changed;
  }
  return changed;
}

}  // namespace kiln::passes
