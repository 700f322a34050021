#include "compiler/passes/pipeline.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"

namespace kiln::passes {
namespace {

struct Signature {
  std::vector<ir::Shape> parameters;
  ir::Shape result;
  bool operator==(const Signature&) const = default;
};

Signature EntrySignature(const ir::Module& module) {
  const ir::Computation* entry = module.entry();
  if (entry == nullptr || entry->root() == nullptr) return {};
  return {entry->ParameterShapes(), entry->root()->shape()};
}

std::string SignatureText(const Signature& s) {
  std::vector<std::string> params;
  for (const ir::Shape& p : s.parameters) params.push_back(p.ToString());
  return absl::StrCat("(", absl::StrJoin(params, ", "), ") -> ",
                      s.result.ToString());
}

}  // namespace

std::string Pipeline::Describe() const {
  std::vector<std::string> parts;
  for (const auto& pass : passes_) {
    if (const auto* nested = dynamic_cast<const Pipeline*>(pass.get())) {
      parts.push_back(nested->Describe());
    } else {
      parts.emplace_back(pass->name());
    }
  }
  return absl::StrCat(name_, "(", absl::StrJoin(parts, ", "), ")");
}

absl::StatusOr<bool> Pipeline::Run(ir::Module* module) {
  if (options_.verify) {
    RETURN_IF_ERROR(WithContext(
        ir::Verify(*module),
        absl::StrCat("module given to pipeline ", name_, " is invalid")));
  }
  const Signature signature = EntrySignature(*module);
  bool changed_any = false;
  for (int round = 0; round < options_.max_iterations; ++round) {
    bool changed = false;
    for (const auto& pass : passes_) {
      absl::StatusOr<bool> pass_changed = pass->Run(module);
      if (!pass_changed.ok()) {
        return WithContext(pass_changed.status(),
                           absl::StrCat("pass ", pass->name()));
      }
      changed = changed || *pass_changed;
      if (options_.verify) {
        absl::Status st = ir::Verify(*module);
        if (!st.ok()) {
          return absl::InternalError(
              absl::StrCat("pass ", pass->name(), " in pipeline ", name_,
                           " left an invalid module: ", st.message()));
        }
      }
      const Signature after = EntrySignature(*module);
      if (!(after == signature)) {
        return absl::InternalError(absl::StrCat(
            "pass ", pass->name(), " in pipeline ", name_,
            " changed the entry signature from ", SignatureText(signature),
            " to ", SignatureText(after)));
      }
    }
    changed_any = changed_any || changed;
    if (!changed) break;
  }
  return changed_any;
}

}  // namespace kiln::passes
