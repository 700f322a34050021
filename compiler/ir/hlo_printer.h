// Prints modules in XLA's HLO text syntax.
#ifndef KILN_COMPILER_IR_HLO_PRINTER_H_
#define KILN_COMPILER_IR_HLO_PRINTER_H_

#include <string>
#include <vector>

#include "compiler/ir/instruction.h"

namespace kiln::ir {

struct PrintOptions {
  // Replace every name by its position (instructions %0, %1...; computations
  // c0, c1...) and leave out the module name: the canonical form that the
  // fingerprint hashes.
  bool canonical_names = false;
};

// The module as HLO text, callees before callers, ENTRY last. Parsing the
// result gives a module that prints identically.
std::string PrintModule(const Module& module, const PrintOptions& options = {});
// The order in which PrintModule lists the computations.
std::vector<const Computation*> PrintOrder(const Module& module);

// The attribute text of one instruction ("dimensions={0}, to_apply=%add"),
// empty when it has none; computation names as given by `comp_name`.
std::string PrintAttributes(
    const Instruction& instr,
    const std::function<std::string(const Computation*)>& comp_name);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_HLO_PRINTER_H_
