// Limits on the programs a client may compile (kiln-server flags). The IR
// has hard ceilings of its own (ir::kMaxRank, ir::kMaxCallDepth,
// ir::kMaxElements); these tighten them for a server and bound what a
// module may cost to decode and keep.
#ifndef KILN_SERVER_MODULE_LIMITS_H_
#define KILN_SERVER_MODULE_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "compiler/ir/instruction.h"
#include "compiler/ir/shape.h"
#include "compiler/ir/verifier.h"
#include "kiln/v1/hlo.pb.h"

namespace kiln::server {

struct ModuleLimits {
  int64_t module_bytes = int64_t{64} << 20;    // --max_module_bytes
  int64_t instructions = 1'000'000;            // --max_instructions
  int64_t computations = 10'000;               // --max_computations
  int64_t literal_bytes = int64_t{64} << 20;   // --max_literal_bytes, all constants together
  int call_depth = ir::kMaxCallDepth;          // --max_call_depth
  int rank = ir::kMaxRank;                     // --max_rank
};

// What the wire form shows before it is decoded: its size, its instruction
// and computation counts and its constants' bytes. INVALID_ARGUMENT naming
// the limit's flag.
absl::Status CheckModuleProto(const v1::ModuleProto& module, const ModuleLimits& limits);

// What needs the decoded, verified module: the rank of every shape and the
// longest chain of nested calls.
absl::Status CheckModule(const ir::Module& module, const ModuleLimits& limits);

}  // namespace kiln::server

#endif  // KILN_SERVER_MODULE_LIMITS_H_
