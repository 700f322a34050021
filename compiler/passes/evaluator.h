// Evaluates single instructions on constant operands, for constant folding.
#ifndef KILN_COMPILER_PASSES_EVALUATOR_H_
#define KILN_COMPILER_PASSES_EVALUATOR_H_

#include <optional>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/ir/literal.h"

namespace kiln::passes {

// Whether Evaluate may produce a value for `opcode` (for some types).
bool IsEvaluable(ir::Opcode opcode);

// The value of `instr` given the values of its operands (`operands[i]` for
// operand i, borrowed; arrays of the operands' shapes), or nullopt when
// this evaluator does not compute it exactly as the backends' host
// interpreter does. Covered, with the interpreter's rules (integer
// arithmetic wraps, x / 0 = -1 and x % 0 = x for integers, NaN-propagating
// maximum and minimum with +0 above -0, conversions as ConvertValue, f16
// and bf16 computed in f32 and rounded once):
//   elementwise: abs, negate, sign, not, popcnt, count-leading-zeros,
//     floor, ceil, sqrt, round-nearest-afz, round-nearest-even, is-finite,
//     copy, convert, bitcast-convert; add, subtract, multiply, divide,
//     remainder, maximum, minimum, and, or, xor, the shifts, integer power,
//     compare; select, clamp;
//   data movement: broadcast, reshape, transpose, iota, slice, reverse,
//     concatenate.
// Left out: functions whose float results come from the math library
// (exp, log, tanh, power, atan2...), which the backends compute each their
// own way; float arithmetic on two NaN operands, whose payload depends on
// the order the machine instruction reads them in; and rounding, square
// root or sign of a signaling NaN, which vector instructions quiet and
// library functions may not.
std::optional<ir::Literal> Evaluate(
    const ir::Instruction& instr,
    const std::vector<const ir::Literal*>& operands);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_EVALUATOR_H_
