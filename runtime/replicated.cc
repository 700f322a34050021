#include "runtime/replicated.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/memory.h"

namespace kiln::runtime {

absl::StatusOr<std::vector<BufferPtr>> ExecuteReplicated(Executable& executable,
                                                         std::vector<ReplicaRun>& replicas,
                                                         absl::Duration collective_timeout,
                                                         const CrossHost* cross) {
  const int n = static_cast<int>(replicas.size());
  if (n == 0) return absl::InvalidArgumentError("a replicated execution needs a replica");
  const int offset = cross != nullptr ? cross->replica_offset : 0;
  const int total = cross != nullptr ? cross->replica_count : n;
  if (offset < 0 || offset + n > total) {
    return absl::InvalidArgumentError(absl::StrCat("replicas ", offset, " to ", offset + n - 1,
                                                   " of ", total, " replicas"));
  }
  ReplicaRendezvous rendezvous =
      cross == nullptr
          ? ReplicaRendezvous(n, collective_timeout)
          : ReplicaRendezvous(n, collective_timeout + cross->group->spec().timeout, *cross);
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first_error;
  std::vector<BufferPtr> results(n);
  // Every replica charges the caller's memory account.
  const std::shared_ptr<MemoryAccount> account = AccountScope::Current();
  auto run = [&](int r) {
    AccountScope scope(account);
    ReplicaRun& replica = replicas[r];
    ExecuteOptions options = replica.options;
    options.replica_id = offset + r;
    options.replica_count = total;
    options.hosts = cross != nullptr ? cross->group->size() : 1;
    options.rendezvous = &rendezvous;
    const CancelCheck outer = replica.options.cancelled;
    options.cancelled = [&failed, outer]() { return failed.load() || (outer && outer()); };
    // The arguments go with the execution: a donated one (nobody else holds
    // it) may take a result in place.
    absl::StatusOr<BufferPtr> out =
        executable.ExecuteOwned(*replica.device, std::move(replica.args), options);
    if (out.ok()) {
      results[r] = *std::move(out);
      return;
    }
    // A single execution's error reads as before; a replica names itself.
    absl::Status error =
        total == 1 ? out.status()
               : absl::Status(out.status().code(),
                              absl::StrCat("replica ", offset + r, " on ", replica.device->name(), ": ",
                                           out.status().message()));
    {
      absl::MutexLock lock(&mu);
      // The others fail in turn once stopped; the first failure is the cause.
      if (first_error.ok()) first_error = error;
    }
    failed = true;
    rendezvous.Abort(error);
  };
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& t : threads) t.join();
  if (!first_error.ok()) return first_error;
  return results;
}

}  // namespace kiln::runtime
