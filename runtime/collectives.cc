#include "runtime/collectives.h"

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

absl::StatusOr<std::vector<std::vector<BufferPtr>>> ReplicaRendezvous::Exchange(
    int replica, std::vector<BufferPtr> operands, const CancelCheck& cancelled) {
  if (replica < 0 || replica >= replica_count_) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", replica, " of ", replica_count_));
  }
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  const int64_t number = next_round_[replica]++;
  Round& round = rounds_[number % 2];
  if (round.number != number) {
    round.number = number;
    round.arrived = 0;
    round.values.assign(replica_count_, {});
  }
  round.values[replica] = std::move(operands);
  ++round.arrived;
  auto complete = [&]() {
    return !aborted_.ok() || (round.number == number && round.arrived == replica_count_);
  };
  const absl::Time deadline = absl::Now() + timeout_;
  while (!complete()) {
    // Wake a few times a second to poll `cancelled`.
    mu_.AwaitWithTimeout(absl::Condition(&complete), absl::Milliseconds(50));
    if (complete()) break;
    if (cancelled && cancelled()) return absl::CancelledError("cancelled in a collective");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "replica ", replica, " waited ", absl::FormatDuration(timeout_),
          " for the other replicas at collective ", number, " (", round.arrived, " of ",
          replica_count_, " arrived)"));
    }
  }
  if (!aborted_.ok()) return aborted_;
  return round.values;
}

void ReplicaRendezvous::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = std::move(status);
}

}  // namespace kiln::runtime
