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

  // One line: how many values, how many may be computed in place, the
  // donation aliases.
  std::string Summary() const;
};

// The assignment of `c` run in instruction order.
BufferAssignment AssignBuffers(const ir::Computation& c);

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_BUFFER_ASSIGNMENT_H_
