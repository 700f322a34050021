// Registered extensions reachable through the custom-call op.
#ifndef KILN_RUNTIME_CUSTOM_CALL_H_
#define KILN_RUNTIME_CUSTOM_CALL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "compiler/ir/literal.h"

namespace kiln::runtime {

using CustomCallFn = std::function<absl::StatusOr<ir::Literal>(
    const std::vector<ir::Literal>& args)>;

// Thread-safe. Targets are registered at start-up; the CPU backend looks them
// up when it compiles a module.
class CustomCallRegistry {
 public:
  static CustomCallRegistry& Global();
  void Register(const std::string& target, CustomCallFn fn);
  // Borrowed; valid for the life of the process.
  const CustomCallFn* Find(const std::string& target) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<CustomCallFn>> fns_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_CUSTOM_CALL_H_
