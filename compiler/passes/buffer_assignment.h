// Buffer assignment: which buffers a computation's values take when it runs
// in instruction order (the host interpreter's schedule), by liveness. An
// analysis, not a rewrite: the host's program builder (runtime/host) drops
// each value where the assignment says its last reader runs and lets a
// result take an input's buffer only where the assignment allows it.
#ifndef KILN_COMPILER_PASSES_BUFFER_ASSIGNMENT_H_
#define KILN_COMPILER_PASSES_BUFFER_ASSIGNMENT_H_

#include <string>
#include <vector>

#include "compiler/ir/instruction.h"

namespace kiln::passes {

struct BufferAssignment {
  // Per instruction (by index): the values (instruction indices) it reads
  // for the last time. They are released before it runs, so that its
  // result may take one's buffer. The root is never released.
  std::vector<std::vector<int>> released_by;

  // Per instruction, per result it writes (the one array of an elementwise
  // instruction, each output of a call of a loop fusion, IsLoopFusion, or
  // each result of a reduction fusion's loop before its reduce's,
  // IsReductionFusion),
  // the operands (operand numbers, in order) whose buffer that result may
  // take in place: an array of the result's shape, of more than one
  // element, that the instruction reads for the last time, once (a value
  // passed twice to a loop fusion is held twice while it runs), and that
  // no node of the loop reads after the one computing that result. A
  // backend takes it only when nothing else holds it at run time (a
  // parameter does when the caller donated it). Empty for other
  // instructions.
  std::vector<std::vector<std::vector<int>>> in_place;

  // A donation alias: an output of the computation (the root's tuple
  // element, or 0 for an array root) written over a parameter the caller
  // donates: the operand its instruction takes in place when every
  // candidate is free (each result, in order, takes the first of its
  // candidates an earlier result has not), and that operand a parameter.
  struct Alias {
    int output = 0;
    int64_t parameter = 0;
    bool operator==(const Alias&) const = default;
  };
  std::vector<Alias> donation_aliases;

  // The arrays a backend may place in one arena per run of the computation
  // (runtime/arena_plan.h lays them out), with how long each lives: a
  // slice per array an instruction writes fresh (FreshResult: the
  // instruction's array, or each array element of a fusion's tuple), except
  // results that may be computed in place and values an output of the
  // computation may hold. A value lives from its instruction to its last
  // reader, and on to the end of every value that may hold its buffer: the
  // tuple, call, loop or reshape it is passed to, or the result computed in
  // its place (an element of a tuple only as long as that element). Slices
  // live at the same time must not share bytes; others may.
  struct Slice {
    int instruction = 0;
    int result = -1;  // the tuple element; -1 for an array result
    int64_t bytes = 0;
    int live_until = 0;  // the last instruction (index) it may be live in
  };
  std::vector<Slice> slices;  // in instruction order, then result order

  // One line: how many values, how many may be computed in place, the
  // arena's arrays, the donation aliases.
  std::string Summary() const;
};

// The assignment of `c` run in instruction order.
BufferAssignment AssignBuffers(const ir::Computation& c);

// Whether a backend writes `instr`'s result into new memory (an
// elementwise op, a data movement that copies, a reduction, a window, a dot
// or convolution, a call of a fusion) rather than possibly handing on an
// operand's buffer (a tuple, get-tuple-element, reshape, call, loop, or an
// instruction this analysis does not know). Its results computed in place
// (BufferAssignment::in_place) and a dot fusion's accumulator are the
// exceptions.
bool FreshResult(const ir::Instruction& instr);


}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_BUFFER_ASSIGNMENT_H_
