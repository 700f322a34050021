// What the client needs to drive a group of servers: one call per server,
// all at once, none left hanging (once one call fails, the others fail
// within the group's timeout, as their exchanges between the servers
// break; a call that has not returned `grace` after the first failure, a
// stalled server's, is cancelled), and random group ids and secrets.
#ifndef KILN_CLIENT_FAN_OUT_H_
#define KILN_CLIENT_FAN_OUT_H_

#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/transport.h"

namespace kiln::client {

// Runs f(0..n-1) on threads of their own and waits for all.
template <typename F>
void ForEachInParallel(int n, F f) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) threads.emplace_back(f, i);
  for (std::thread& t : threads) t.join();
}

// Runs call(m, canceller) for every m in [0, n) on threads of their own and
// returns the results by m. A call cancelled for being late gets
// DEADLINE_EXCEEDED saying so, and stalled[m] (when given) is set.
// `cancel` (borrowed, may be null) cancels every call.
template <typename T>
std::vector<absl::StatusOr<T>> FanOut(
    int n, absl::Duration grace, CallCanceller* cancel,
    const std::function<absl::StatusOr<T>(int, CallCanceller*)>& call,
    std::vector<bool>* stalled = nullptr) {
  std::vector<absl::StatusOr<T>> results(n, absl::UnknownError("not run"));
  std::vector<CallCanceller> cancellers(n);
  absl::Mutex mu;
  std::vector<bool> finished(n, false);
  std::vector<bool> late(n, false);
  int remaining = n;
  absl::Time first_failure = absl::InfiniteFuture();
  if (cancel != nullptr) {
    cancel->SetHook([&] {
      for (CallCanceller& c : cancellers) c.Cancel();
    });
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int m = 0; m < n; ++m) {
    threads.emplace_back([&, m] {
      absl::StatusOr<T> result = call(m, &cancellers[m]);
      absl::MutexLock lock(&mu);
      if (!result.ok() && first_failure == absl::InfiniteFuture()) first_failure = absl::Now();
      results[m] = std::move(result);
      finished[m] = true;
      --remaining;
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all_done = [&]() { return remaining == 0; };
    while (!all_done()) {
      mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Milliseconds(100));
      if (all_done() || absl::Now() <= first_failure + grace) continue;
      for (int m = 0; m < n; ++m) {
        if (!finished[m] && !late[m]) {
          late[m] = true;
          cancellers[m].Cancel();
        }
      }
    }
  }
  for (std::thread& t : threads) t.join();
  if (cancel != nullptr) cancel->ClearHook();
  for (int m = 0; m < n; ++m) {
    if (late[m] && !results[m].ok()) {
      results[m] = absl::DeadlineExceededError(absl::StrCat(
          "did not finish within ", absl::FormatDuration(grace),
          " after another member failed (stalled?); its call was cancelled"));
    }
  }
  if (stalled != nullptr) {
    for (int m = 0; m < n; ++m) late[m] = late[m] && !results[m].ok();
    *stalled = late;
  }
  return results;
}

// Joins group `group_id` on its n members at once: join(m, canceller) for
// each. Once one join fails, the others are cancelled rather than left
// waiting for it until the group's timeout; `cancel` (borrowed, may be
// null) cancels them all. OK, or the first failure's code with every
// failed member's outcome, each named by describe(m).
inline absl::Status JoinAll(int n, CallCanceller* cancel,
                            const std::function<absl::Status(int, CallCanceller*)>& join,
                            const std::function<std::string(int)>& describe,
                            const std::string& group_id) {
  std::vector<bool> cut_short;
  std::vector<absl::StatusOr<bool>> joined = FanOut<bool>(
      n, absl::ZeroDuration(), cancel,
      [&](int m, CallCanceller* canceller) -> absl::StatusOr<bool> {
        absl::Status s = join(m, canceller);
        if (!s.ok()) return s;
        return true;
      },
      &cut_short);
  std::vector<std::string> errors;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (int m = 0; m < n; ++m) {
    if (joined[m].ok()) continue;
    if (cut_short[m]) {
      errors.push_back(
          absl::StrCat(describe(m), ": its join was cancelled when another member's failed"));
      continue;
    }
    if (code == absl::StatusCode::kOk) code = joined[m].status().code();
    errors.push_back(absl::StrCat(describe(m), ": ", joined[m].status().message()));
  }
  if (errors.empty()) return absl::OkStatus();
  if (code == absl::StatusCode::kOk) code = absl::StatusCode::kCancelled;
  return absl::Status(code,
                      absl::StrCat("forming group ", group_id, ": ", absl::StrJoin(errors, "; ")));
}

// `bytes` random bytes in hex, for group ids and secrets.
inline std::string RandomHex(int bytes) {
  std::random_device random;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", random() & 0xff);
  return out;
}

}  // namespace kiln::client

#endif  // KILN_CLIENT_FAN_OUT_H_
