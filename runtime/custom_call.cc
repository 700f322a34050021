#include "runtime/custom_call.h"

namespace kiln::runtime {

CustomCallRegistry& CustomCallRegistry::Global() {
  static auto* const kRegistry = new CustomCallRegistry();
  return *kRegistry;
}

void CustomCallRegistry::Register(const std::string& target, CustomCallFn fn) {
  absl::MutexLock lock(&mu_);
  fns_[target] = std::make_unique<CustomCallFn>(std::move(fn));
}

const CustomCallFn* CustomCallRegistry::Find(const std::string& target) const {
  absl::MutexLock lock(&mu_);
  auto it = fns_.find(target);
  return it == fns_.end() ? nullptr : it->second.get();
}

}  // namespace kiln::runtime
