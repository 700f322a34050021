// Builds computations op by op with shapes inferred as it goes.
//
// The first error sticks: every method returns nullptr once an error has
// happened, and Build() reports that first error. Not thread-safe.
#ifndef KILN_COMPILER_IR_BUILDER_H_
#define KILN_COMPILER_IR_BUILDER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

class Builder {
 public:
  // `module` receives the built computation; it must outlive the builder.
  Builder(Module* module, std::string name);

  Instruction* Parameter(int64_t number, const Shape& shape,
                         std::string name = "");
  Instruction* Constant(Literal literal);
  template <typename T>
  Instruction* ConstantScalar(ElementType type, T value) {
    return Constant(Literal::Scalar(type, value));
  }
  Instruction* Iota(const Shape& shape, int64_t dimension);
  Instruction* Unary(Opcode op, Instruction* x);
  Instruction* Binary(Opcode op, Instruction* a, Instruction* b);
  Instruction* Compare(Instruction* a, Instruction* b, ComparisonDirection d);
  Instruction* Select(Instruction* pred, Instruction* t, Instruction* f);
  Instruction* Clamp(Instruction* lo, Instruction* x, Instruction* hi);
  Instruction* Convert(Instruction* x, ElementType to);
  Instruction* Broadcast(Instruction* x, std::vector<int64_t> out_dims,
                         std::vector<int64_t> broadcast_dims);
  Instruction* Reshape(Instruction* x, std::vector<int64_t> dims);
  Instruction* Transpose(Instruction* x, std::vector<int64_t> permutation);
  Instruction* Slice(Instruction* x, std::vector<SliceDim> slice);
  Instruction* Concatenate(std::vector<Instruction*> xs, int64_t dimension);
  Instruction* Pad(Instruction* x, Instruction* value, std::vector<PadDim> pad);
  Instruction* Reverse(Instruction* x, std::vector<int64_t> dims);
  Instruction* Reduce(Instruction* x, Instruction* init,
                      std::vector<int64_t> dims, Computation* reducer);
  Instruction* ReduceWindow(Instruction* x, Instruction* init,
                            std::vector<WindowDim> window, Computation* reducer);
  Instruction* Dot(Instruction* a, Instruction* b, DotDims dims);
  Instruction* Convolution(Instruction* in, Instruction* kernel,
                           std::vector<WindowDim> window, ConvDims dims,
                           int64_t feature_group_count = 1);
  Instruction* Tuple(std::vector<Instruction*> xs);
  Instruction* GetTupleElement(Instruction* t, int64_t index);
  Instruction* While(Computation* cond, Computation* body, Instruction* init);
  Instruction* Call(Computation* c, std::vector<Instruction*> args);

  // Adds any op: `attrs` and `called` as the op documents; `declared` gives
  // the result shape for ops whose shape is not implied by the operands.
  Instruction* AddOp(Opcode op, std::vector<Instruction*> operands,
                     Attributes attrs = {}, std::vector<Computation*> called = {},
                     const Shape& declared = Shape());

  // Finishes the computation with `root` (default: the last instruction).
  // Returns the computation (owned by the module) or the first error.
  absl::StatusOr<Computation*> Build(Instruction* root = nullptr);

  // A scalar binary computation such as add or max, for reducers.
  static Computation* ScalarBinary(Module* module, Opcode op, ElementType type);

  const absl::Status& status() const { return status_; }

 private:
  Instruction* Add(std::unique_ptr<Instruction> instr);

  Module* module_;
  std::unique_ptr<Computation> comp_;
  absl::Status status_;
  int next_id_ = 0;
};

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_BUILDER_H_
