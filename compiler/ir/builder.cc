#include "compiler/ir/builder.h"

#include "absl/strings/str_cat.h"
#include "compiler/ir/shape_inference.h"

namespace kiln::ir {

Builder::Builder(Module* module, std::string name)
    : module_(module), comp_(std::make_unique<Computation>(std::move(name))) {}

Instruction* Builder::Add(std::unique_ptr<Instruction> instr) {
  if (!status_.ok()) return nullptr;
  for (const Instruction* op : instr->operands()) {
    if (op == nullptr || op->parent() != comp_.get()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          OpcodeName(instr->opcode()),
          ": operand is missing or from another computation"));
      return nullptr;
    }
  }
  absl::StatusOr<Shape> shape = InferShape(*instr);
  if (!shape.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        OpcodeName(instr->opcode()), ": ", shape.status().message()));
    return nullptr;
  }
  instr->set_shape(*shape);
  if (instr->name().empty()) {
    instr->set_name(absl::StrCat(OpcodeName(instr->opcode()), ".", next_id_));
  }
  ++next_id_;
  return comp_->AddInstruction(std::move(instr));
}

Instruction* Builder::AddOp(Opcode op, std::vector<Instruction*> operands,
                            Attributes attrs, std::vector<Computation*> called,
                            const Shape& declared) {
  if (!status_.ok()) return nullptr;
  auto instr = std::make_unique<Instruction>(op, declared, "");
  for (Instruction* o : operands) {
    if (o == nullptr) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat(OpcodeName(op), ": null operand"));
      return nullptr;
    }
    instr->AddOperand(o);
  }
  for (Computation* c : called) instr->AddCalled(c);
  instr->mutable_attrs() = std::move(attrs);
  return Add(std::move(instr));
}

Instruction* Builder::Parameter(int64_t number, const Shape& shape,
                                std::string name) {
  if (!status_.ok()) return nullptr;
  auto instr = std::make_unique<Instruction>(Opcode::kParameter, shape,
                                             std::move(name));
  instr->mutable_attrs().parameter_number = number;
  return Add(std::move(instr));
}

Instruction* Builder::Constant(Literal literal) {
  Attributes a;
  Shape s = literal.shape();
  a.literal = std::move(literal);
  return AddOp(Opcode::kConstant, {}, std::move(a), {}, s);
}

Instruction* Builder::Iota(const Shape& shape, int64_t dimension) {
  Attributes a;
  a.iota_dimension = dimension;
  return AddOp(Opcode::kIota, {}, std::move(a), {}, shape);
}

Instruction* Builder::Unary(Opcode op, Instruction* x) { return AddOp(op, {x}); }
Instruction* Builder::Binary(Opcode op, Instruction* a, Instruction* b) {
  return AddOp(op, {a, b});
}
Instruction* Builder::Compare(Instruction* a, Instruction* b,
                              ComparisonDirection d) {
  Attributes at;
  at.direction = d;
  return AddOp(Opcode::kCompare, {a, b}, std::move(at));
}
Instruction* Builder::Select(Instruction* p, Instruction* t, Instruction* f) {
  return AddOp(Opcode::kSelect, {p, t, f});
}
Instruction* Builder::Clamp(Instruction* lo, Instruction* x, Instruction* hi) {
  return AddOp(Opcode::kClamp, {lo, x, hi});
}
Instruction* Builder::Convert(Instruction* x, ElementType to) {
  return AddOp(Opcode::kConvert, {x}, {}, {}, Shape(to, {}));
}
Instruction* Builder::Broadcast(Instruction* x, std::vector<int64_t> out_dims,
                                std::vector<int64_t> broadcast_dims) {
  Attributes a;
  a.dimensions = std::move(broadcast_dims);
  ElementType t = x != nullptr ? x->shape().type() : ElementType::kF32;
  return AddOp(Opcode::kBroadcast, {x}, std::move(a), {},
               Shape(t, std::move(out_dims)));
}
Instruction* Builder::Reshape(Instruction* x, std::vector<int64_t> dims) {
  ElementType t = x != nullptr ? x->shape().type() : ElementType::kF32;
  return AddOp(Opcode::kReshape, {x}, {}, {}, Shape(t, std::move(dims)));
}
Instruction* Builder::Transpose(Instruction* x, std::vector<int64_t> perm) {
  Attributes a;
  a.dimensions = std::move(perm);
  return AddOp(Opcode::kTranspose, {x}, std::move(a));
}
Instruction* Builder::Slice(Instruction* x, std::vector<SliceDim> slice) {
  Attributes a;
  a.slice = std::move(slice);
  return AddOp(Opcode::kSlice, {x}, std::move(a));
}
Instruction* Builder::Concatenate(std::vector<Instruction*> xs, int64_t dim) {
  Attributes a;
  a.dimensions = {dim};
  return AddOp(Opcode::kConcatenate, std::move(xs), std::move(a));
}
Instruction* Builder::Pad(Instruction* x, Instruction* value,
                          std::vector<PadDim> pad) {
  Attributes a;
  a.padding = std::move(pad);
  return AddOp(Opcode::kPad, {x, value}, std::move(a));
}
Instruction* Builder::Reverse(Instruction* x, std::vector<int64_t> dims) {
  Attributes a;
  a.dimensions = std::move(dims);
  return AddOp(Opcode::kReverse, {x}, std::move(a));
}
Instruction* Builder::Reduce(Instruction* x, Instruction* init,
                             std::vector<int64_t> dims, Computation* reducer) {
  Attributes a;
  a.dimensions = std::move(dims);
  return AddOp(Opcode::kReduce, {x, init}, std::move(a), {reducer});
}
Instruction* Builder::ReduceWindow(Instruction* x, Instruction* init,
                                   std::vector<WindowDim> window,
                                   Computation* reducer) {
  Attributes a;
  a.window = std::move(window);
  return AddOp(Opcode::kReduceWindow, {x, init}, std::move(a), {reducer});
}
Instruction* Builder::Dot(Instruction* a, Instruction* b, DotDims dims) {
  Attributes at;
  at.dot = std::move(dims);
  return AddOp(Opcode::kDot, {a, b}, std::move(at));
}
Instruction* Builder::Convolution(Instruction* in, Instruction* kernel,
                                  std::vector<WindowDim> window, ConvDims dims,
                                  int64_t feature_group_count) {
  Attributes a;
  a.window = std::move(window);
  a.conv = std::move(dims);
  a.feature_group_count = feature_group_count;
  return AddOp(Opcode::kConvolution, {in, kernel}, std::move(a));
}
Instruction* Builder::Tuple(std::vector<Instruction*> xs) {
  return AddOp(Opcode::kTuple, std::move(xs));
}
Instruction* Builder::GetTupleElement(Instruction* t, int64_t index) {
  Attributes a;
  a.tuple_index = index;
  return AddOp(Opcode::kGetTupleElement, {t}, std::move(a));
}
Instruction* Builder::While(Computation* cond, Computation* body,
                            Instruction* init) {
  return AddOp(Opcode::kWhile, {init}, {}, {cond, body});
}
Instruction* Builder::Call(Computation* c, std::vector<Instruction*> args) {
  return AddOp(Opcode::kCall, std::move(args), {}, {c});
}

absl::StatusOr<Computation*> Builder::Build(Instruction* root) {
  if (!status_.ok()) return status_;
  if (comp_ == nullptr) {
    return absl::FailedPreconditionError("Build() called twice");
  }
  if (comp_->instructions().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("computation ", comp_->name(), " is empty"));
  }
  comp_->set_root(root != nullptr ? root : comp_->instructions().back().get());
  if (comp_->root()->parent() != comp_.get()) {
    return absl::InvalidArgumentError("root from another computation");
  }
  if (absl::Status st = comp_->Canonicalize(); !st.ok()) return st;
  return module_->AddComputation(std::move(comp_));
}

Computation* Builder::ScalarBinary(Module* module, Opcode op, ElementType type) {
  Builder b(module, absl::StrCat(OpcodeName(op), "_", ElementTypeName(type),
                                 ".", module->computations().size()));
  Instruction* x = b.Parameter(0, Shape::Scalar(type), "x");
  Instruction* y = b.Parameter(1, Shape::Scalar(type), "y");
  b.Binary(op, x, y);
  absl::StatusOr<Computation*> c = b.Build();
  return c.ok() ? *c : nullptr;
}

}  // namespace kiln::ir
