#include "client/transport.h"

namespace kiln::client {

void CallCanceller::Cancel() {
  cancelled_ = true;
  absl::MutexLock lock(&mu_);
  if (hook_) hook_();
}

void CallCanceller::SetHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hook_ = std::move(hook);
  if (cancelled_.load() && hook_) hook_();
}

void CallCanceller::ClearHook() {
  absl::MutexLock lock(&mu_);
  hook_ = nullptr;
}

}  // namespace kiln::client
