// The backend interfaces: Device (memory, transfers, queues), Executable
// (a compiled module) and the compile entry point. Each backend lives in its
// own folder (cpu/, tpusim/, gpu/) and implements these.
#ifndef KILN_RUNTIME_DEVICE_H_
#define KILN_RUNTIME_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compiler/ir/instruction.h"
#include "runtime/buffer.h"
#include "runtime/collectives.h"
#include "runtime/cost.h"
#include "runtime/feed_queue.h"
#include "runtime/memory.h"

namespace kiln::runtime {

struct CompileOptions {
  // Seed of the rng op's generator (each execution advances it).
  uint64_t rng_seed = 42;
};

struct ExecuteOptions {
  // How long an infeed may wait for data before the program fails.
  absl::Duration infeed_timeout = absl::Seconds(30);
  // How long an outfeed may wait for room before the program fails.
  absl::Duration outfeed_timeout = absl::Seconds(30);
  // Replicated execution: this replica's id, how many run the program, and
  // where they meet for all-reduce (borrowed; null: a single replica).
  int replica_id = 0;
  int replica_count = 1;
  ReplicaRendezvous* rendezvous = nullptr;
  // The memory the execution charges (borrowed); null: the memory of the
  // device that compiled the program. A replica runs on its own device's.
  MemoryTracker* memory = nullptr;
  // The queues infeed and outfeed use; null: the device's own.
  FeedQueue* infeed = nullptr;
  FeedQueue* outfeed = nullptr;
  // Filled by backends with a cost model (tpusim) when set; borrowed.
  ExecutionProfile* profile = nullptr;
  // Polled between loop iterations and while waiting on a queue: once it
  // returns true the program stops with CANCELLED.
  CancelCheck cancelled;
};

// A compiled module, ready to run many times. Thread-safe: concurrent
// executions do not share mutable state.
class Executable {
 public:
  virtual ~Executable() = default;
  // Runs with `args` (one per entry parameter, shapes checked) and returns the
  // result buffer. Errors: InvalidArgument for wrong arguments; whatever a
  // kernel reports (RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED on a starved
  // infeed, ...), with the instruction that failed.
  virtual absl::StatusOr<BufferPtr> Execute(const std::vector<BufferPtr>& args,
                                            const ExecuteOptions& options) = 0;
  virtual const ir::Shape& result_shape() const = 0;
  virtual const std::vector<ir::Shape>& parameter_shapes() const = 0;
  // True when executions fill ExecuteOptions::profile (a backend with a
  // cost model, such as tpusim).
  virtual bool has_cost_model() const { return false; }
};

// Thread-safe.
class Device {
 public:
  virtual ~Device() = default;
  virtual const std::string& name() const = 0;  // "cpu:0"
  virtual const std::string& kind() const = 0;  // "cpu"
  virtual int ordinal() const = 0;

  virtual MemoryTracker* memory() = 0;
  MemoryStats memory_stats() { return memory()->Stats(); }

  // Copies a host literal into device memory.
  virtual absl::StatusOr<BufferPtr> TransferToDevice(const ir::Literal& value) {
    return Buffer::FromLiteral(value, memory());
  }
  virtual ir::Literal TransferFromDevice(const Buffer& buffer) {
    return buffer.ToLiteral();
  }

  // Compiles a module that has passed the verifier; the module need not
  // outlive the executable. Errors name the instruction a backend cannot run.
  virtual absl::StatusOr<std::shared_ptr<Executable>> Compile(
      const ir::Module& module, const CompileOptions& options) = 0;

  virtual FeedQueue& infeed() = 0;
  virtual FeedQueue& outfeed() = 0;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_DEVICE_H_
