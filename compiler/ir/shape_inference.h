// Shape rules of every op in the op table.
#ifndef KILN_COMPILER_IR_SHAPE_INFERENCE_H_
#define KILN_COMPILER_IR_SHAPE_INFERENCE_H_

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::ir {

// Computes the result shape of `instr` from its operands' shapes, its
// attributes and its called computations. Ops whose result type or dims are
// not implied by the operands (parameter, constant, iota, convert, broadcast,
// reshape, rng, infeed, custom-call, dot's result type) take them from the
// instruction's declared shape, after checking it is consistent.
// Returns InvalidArgument describing the problem (without the instruction's
// name; the verifier adds it), also when the declared shape or the result
// is not a valid shape (negative dims, over kMaxElements).
absl::StatusOr<Shape> InferShape(const Instruction& instr);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_SHAPE_INFERENCE_H_
