// Fused elementwise evaluation on the CPU.
//
// A FusedGroup is a chain (DAG) of elementwise ops that share one output
// element count. It runs in blocks of kBlock elements: for each block every
// node computes into a small scratch array, so the whole chain makes one pass
// over memory, and the per-op type dispatch happens once per block, never per
// element.
#ifndef KILN_RUNTIME_HOST_ELEMENTWISE_H_
#define KILN_RUNTIME_HOST_ELEMENTWISE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/ir/opcode.h"
#include "compiler/ir/shape.h"

namespace kiln::host {

inline constexpr int64_t kBlock = 1024;
// Scratch up to this size lives on the running thread's stack.
inline constexpr int64_t kLocalScratchBytes = 4096;
// Groups of at least this many elements run on all the compute threads.
inline constexpr int64_t kParallelElements = int64_t{1} << 16;

struct FusedNode {
  ir::Opcode op;
  ir::ElementType out_type;
  ir::ElementType in_type;  // type of the first operand (compare, convert)
  ir::ComparisonDirection direction = ir::ComparisonDirection::kEq;
  // Operands: index >= 0 names an earlier node, -1-k names group input k.
  std::vector<int> args;
  // A broadcast of a group input that is not a scalar: element e of the
  // output reads input element (e / broadcast_inner) % broadcast_size (the
  // input's dimensions are a contiguous run of the output's, as a bias is).
  // Zero for a broadcast of a scalar input, which is expanded once.
  int64_t broadcast_inner = 0;
  int64_t broadcast_size = 0;
};

struct FusedGroup {
  std::vector<FusedNode> nodes;  // topological; the last is an output
  // The nodes written out, in output order; empty: only the last.
  std::vector<int> outputs;
  std::vector<ir::ElementType> input_types;
  // Inputs with one element are broadcast over the whole output.
  std::vector<bool> input_is_scalar;
  int64_t element_count = 0;
};

// Evaluates `group` reading `inputs` (one pointer per group input) and
// writing `outs` (one per output). An output may be an input that is not a
// scalar (the group then runs in place) when no node after the output's
// reads that input. Thread-compatible; allocates its scratch per call.
void RunFusedGroup(const FusedGroup& group, absl::Span<const uint8_t* const> inputs,
                   absl::Span<uint8_t* const> outs);

// Runs elements [begin, end) of `group` on the calling thread, writing
// output k's element e at outs[k] + (e - begin) * its element size (outs
// point at element `begin`); checks for cancellation when `poll` (only on
// the thread that runs the execution).
void RunFusedGroupRange(const FusedGroup& group, absl::Span<const uint8_t* const> inputs,
                        absl::Span<uint8_t* const> outs, int64_t begin, int64_t end, bool poll);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_ELEMENTWISE_H_
