// A sequence of passes run in order, optionally to a fixed point, with the
// verifier between them.
#ifndef KILN_COMPILER_PASSES_PIPELINE_H_
#define KILN_COMPILER_PASSES_PIPELINE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/passes/pass.h"

namespace kiln::passes {

// Debug builds verify between passes unless told otherwise.
#ifdef NDEBUG
inline constexpr bool kVerifyBetweenPasses = false;
#else
inline constexpr bool kVerifyBetweenPasses = true;
#endif

struct PipelineOptions {
  // Rounds over the passes: 1 runs each pass once; more repeats the whole
  // sequence until a round changes nothing or this many rounds have run
  // (reaching the bound is not an error: the module is valid after every
  // round).
  int max_iterations = 1;
  // Runs ir::Verify on the module before the first pass and after each.
  bool verify = kVerifyBetweenPasses;
};

// A pipeline is itself a pass, so a fixed-point group of passes can sit
// inside a larger pipeline. Not thread-safe.
class Pipeline : public Pass {
 public:
  explicit Pipeline(std::string name, PipelineOptions options = {})
      : name_(std::move(name)), options_(options) {}

  // Appends a pass constructed from `args`; returns it (owned by the
  // pipeline).
  template <typename T, typename... Args>
  T& AddPass(Args&&... args) {
    auto pass = std::make_unique<T>(std::forward<Args>(args)...);
    T& ref = *pass;
    passes_.push_back(std::move(pass));
    return ref;
  }

  absl::string_view name() const override { return name_; }
  const PipelineOptions& options() const { return options_; }
  // The passes' names in order, nested pipelines as "name(a, b)".
  std::string Describe() const;

  // Runs the passes. Errors name the pass that failed: its own error, or
  // INTERNAL when verification finds the module it left invalid or when it
  // changed the entry computation's parameter or result shapes (which
  // callers report to clients). An invalid module given to a verifying
  // pipeline is INVALID_ARGUMENT.
  absl::StatusOr<bool> Run(ir::Module* module) override;

 private:
  std::string name_;
  PipelineOptions options_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace kiln::passes

#endif  // KILN_COMPILER_PASSES_PIPELINE_H_
