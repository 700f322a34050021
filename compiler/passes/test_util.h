// Helpers for the passes' tests: parse HLO text, run a pass, compare
// modules by structure.
#ifndef KILN_COMPILER_PASSES_TEST_UTIL_H_
#define KILN_COMPILER_PASSES_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/pass.h"
#include "gtest/gtest.h"

namespace kiln::passes {

// Parses and verifies `text`; nullptr (and a test failure) if either fails.
inline std::unique_ptr<ir::Module> Parse(absl::string_view text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status() << "\n" << text;
  if (!module.ok()) return nullptr;
  absl::Status verified = ir::Verify(**module);
  EXPECT_TRUE(verified.ok()) << verified << "\n" << text;
  return verified.ok() ? *std::move(module) : nullptr;
}

// Runs `pass` on `module`, expects success and a module that still
// verifies, and returns whether the pass changed it.
inline bool RunPass(Pass& pass, ir::Module& module) {
  absl::StatusOr<bool> changed = pass.Run(&module);
  EXPECT_TRUE(changed.ok()) << pass.name() << ": " << changed.status();
  absl::Status verified = ir::Verify(module);
  EXPECT_TRUE(verified.ok())
      << "after " << pass.name() << ": " << verified << "\n"
      << ir::PrintModule(module);
  return changed.ok() && *changed;
}

// Runs `pass`, then DCE to drop what it left behind; returns whether `pass`
// changed the module.
inline bool RunPassAndDce(Pass& pass, ir::Module& module) {
  const bool changed = RunPass(pass, module);
  Dce dce;
  RunPass(dce, module);
  return changed;
}

// The module's text with positions for names: equal for two modules of the
// same structure however their instructions are named.
inline std::string Structure(const ir::Module& module) {
  return ir::PrintModule(module, {.canonical_names = true});
}

// The structure of `text` (parsed and verified, so canonically ordered).
inline std::string Structure(absl::string_view text) {
  std::unique_ptr<ir::Module> module = Parse(text);
  return module == nullptr ? "" : Structure(*module);
}

// The instruction named `name` in any computation of `module`, or nullptr.
inline const ir::Instruction* Find(const ir::Module& module,
                                   absl::string_view name) {
  for (const auto& c : module.computations()) {
    for (const auto& instr : c->instructions()) {
      if (instr->name() == name) return instr.get();
    }
  }
  return nullptr;
}

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_TEST_UTIL_H_
