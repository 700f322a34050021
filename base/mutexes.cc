#include "base/mutexes.h"

#include "absl/synchronization/mutex.h"

namespace kiln {

void ConfigureMutexes() {
#if !defined(KILN_MUTEX_DEADLOCK_DETECTION)
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace kiln
