// A reduction fusion (compiler/passes/reduction_fusion.h) run as one pass:
// the loop computes its values a chunk of whole result rows at a time and
// the reduction folds each chunk while it is in cache.
#ifndef KILN_RUNTIME_HOST_FUSED_REDUCE_H_
#define KILN_RUNTIME_HOST_FUSED_REDUCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "compiler/ir/opcode.h"
#include "compiler/ir/shape.h"
#include "runtime/host/elementwise.h"
#include "runtime/host/kernel.h"

namespace kiln::host {

// The buffers a loop writes its outputs (of `shapes`) into: output j takes
// the first of its `in_place` inputs that nothing else holds
// (Program::Run dropped its slot: this is its last reader) and no earlier
// output took, saving an allocation and its page faults; the others are
// allocated.
absl::StatusOr<absl::InlinedVector<BufferPtr, 2>> LoopOutputs(
    ExecState& st, const std::vector<std::vector<int>>& in_place,
    const std::vector<BufferPtr>& ops, const std::vector<ir::Shape>& shapes);

struct FusedReduce {
  // The loop. Its outputs are the loop's results that the call writes out
  // (results.size() of them, in order), then, when it is none of them, the
  // reduced value.
  std::shared_ptr<const FusedGroup> group;
  std::vector<std::vector<int>> in_place;  // per result (LoopOutputs)
  std::vector<ir::Shape> results;
  int value_output = 0;  // the group output that is the reduced value
  ir::Opcode op = ir::Opcode::kAdd;  // a reducer WithReducer knows
  // Leading: `rows` rows of `length` columns fold into `length` results;
  // else `rows` runs of `length` elements fold into one result each.
  bool leading = false;
  int64_t rows = 0;
  int64_t length = 0;
  ir::Shape reduce_shape;
};

// The kernel: operands are the group's inputs, then the initial value; the
// result is the reduce's, or a tuple of the loop's results and the reduce's
// when there are loop results. The same bits as the loop and the reduce
// kernel run one after the other, at any thread count.
Kernel MakeFusedReduceKernel(FusedReduce spec);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_FUSED_REDUCE_H_
