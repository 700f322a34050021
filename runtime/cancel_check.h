// How long waits and executions learn that their caller gave up.
#ifndef KILN_RUNTIME_CANCEL_CHECK_H_
#define KILN_RUNTIME_CANCEL_CHECK_H_

#include <functional>

#include "absl/time/time.h"

namespace kiln::runtime {

// Polled by long waits and by executions between steps: true once the
// caller gave up (an RPC cancelled, a session closed). Must be cheap and
// thread-safe.
using CancelCheck = std::function<bool()>;

// `check` asked at most once per `period`, the last answer given in between
// (a true answer stays true). For checks that cost microseconds, such as
// asking an RPC whether its client cancelled it, polled after every step of
// a program: cancellation is noticed up to `period` later. Thread-safe when
// `check` is; copies share the throttle.
CancelCheck Throttled(CancelCheck check, absl::Duration period);

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_CANCEL_CHECK_H_
