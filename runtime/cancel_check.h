// How long waits and executions learn that their caller gave up.
#ifndef KILN_RUNTIME_CANCEL_CHECK_H_
#define KILN_RUNTIME_CANCEL_CHECK_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"

namespace kiln::runtime {

// Polled by long waits and by executions between steps: true once the
// caller gave up (an RPC cancelled, a session closed). Must be cheap and
// thread-safe.
using CancelCheck = std::function<bool()>;

// Asks a slow check on a thread of its own, so that the threads polling
// `check()` read a flag. Asking gRPC whether a client cancelled its call
// costs tens of microseconds and can wait on gRPC's poller: asked by a
// program's compute thread after its steps, it took several percent of a
// training step. One process-wide thread asks every watched check once per
// `period` (longer when there are many), the first time a period after the
// watch starts, so calls shorter than that are never asked. A true answer
// stays true.
//
// Scoped to the call that owns what `slow` looks at: once the destructor
// returns, `slow` is never asked again, while copies of `check()` keep the
// last answer.
class CancelWatch {
 public:
  explicit CancelWatch(CancelCheck slow, absl::Duration period = absl::Milliseconds(5));
  ~CancelWatch();
  CancelWatch(const CancelWatch&) = delete;
  CancelWatch& operator=(const CancelWatch&) = delete;

  // Cheap and thread-safe: the last answer of `slow`, false before the
  // first. Never cancels when `slow` is empty.
  CancelCheck check() const;

  struct Entry;

 private:
  std::shared_ptr<Entry> entry_;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_CANCEL_CHECK_H_
