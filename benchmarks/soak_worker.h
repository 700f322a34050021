// One client of the soak (benchmarks/soak.cc): a process of its own that
// trains a small MLP through a kiln-server and reports on stdout, one line
// each: "session ID" once connected, "progress N" every ten steps,
// "error MESSAGE" (C-escaped) for a failed call, and "done N" just before
// its session closes.
#ifndef KILN_BENCHMARKS_SOAK_WORKER_H_
#define KILN_BENCHMARKS_SOAK_WORKER_H_

#include <cstdint>
#include <string>

namespace kiln::bench {

struct SoakWorkerOptions {
  std::string server;  // address of the kiln-server
  int steps = 1000;
  // The worker stops after this long even if its steps are not done.
  double time_limit_seconds = 300;
  uint64_t seed = 1;  // of the weights and the batches
};

// Runs the client to the end; returns the process exit code (0: every step
// and the final release succeeded). The process dies with its parent.
int RunSoakWorker(const SoakWorkerOptions& options);

}  // namespace kiln::bench

#endif  // KILN_BENCHMARKS_SOAK_WORKER_H_
