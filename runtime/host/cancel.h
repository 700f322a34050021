// Cancellation inside running kernels. An execution installs its cancel
// check for the thread that runs it (CancelScope); long kernels poll
// Cancelled() between blocks of work (about a millisecond each) and stop
// early when it is true. The program then ends with CANCELLED at the next
// step boundary, where Program::Run checks again: a partial result never
// escapes.
#ifndef KILN_RUNTIME_HOST_CANCEL_H_
#define KILN_RUNTIME_HOST_CANCEL_H_

#include <algorithm>
#include <bit>
#include <cstdint>

#include "runtime/device.h"

namespace kiln::host {

// Installs `check` (may be null or empty) for the calling thread until the
// scope ends; scopes nest (a called program's scope restores the caller's).
class CancelScope {
 public:
  explicit CancelScope(const runtime::CancelCheck* check);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const runtime::CancelCheck* previous_;
};

// True when the execution running on this thread was cancelled.
bool Cancelled();

// Cancelled(), asked only on every `period`-th call (by a loop counter
// `i`): for loops whose single iteration is too short to poll each time.
inline bool CancelledEvery(int64_t i, int64_t period) { return i % period == 0 && Cancelled(); }

// For loops over rows of `row_elements` elements each: polls at row `row`
// about once per million elements. Called once per row, so no division: the
// rows between polls are a power of two and the test a mask.
inline bool CancelledAtRow(int64_t row, int64_t row_elements) {
  const int log2_elements =
      std::bit_width(static_cast<uint64_t>(std::max<int64_t>(1, row_elements))) - 1;
  const int64_t mask = (int64_t{1} << (20 - std::min(20, log2_elements))) - 1;
  return row > 0 && (row & mask) == 0 && Cancelled();
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_CANCEL_H_
