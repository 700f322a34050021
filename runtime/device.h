// The backend interfaces: Device (memory, buffers, transfers, queues),
// Executable (a compiled module) and Compiler (one per backend kind, whose
// executables run on any device of that kind). Each backend lives in its own
// folder (null/ is the template) and registers itself (backend.h).
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
  // Servers the replicas span (a group of servers; 1: this server alone).
  int hosts = 1;
  ReplicaRendezvous* rendezvous = nullptr;
  // The queues infeed and outfeed use; null: the device's own.
  FeedQueue* infeed = nullptr;
  FeedQueue* outfeed = nullptr;
  // Filled by backends with a cost model (tpusim) when set; borrowed.
  ExecutionProfile* profile = nullptr;
  // Polled between loop iterations and while waiting on a queue: once it
  // returns true the program stops with CANCELLED.
  CancelCheck cancelled;
};

class Device;

// A compiled module, ready to run many times. Thread-safe: concurrent
// executions do not share mutable state.
class Executable {
 public:
  virtual ~Executable() = default;
  // Runs on `device` (one of the kind the executable was compiled for;
  // borrowed) with `args` (one per entry parameter, living on `device`,
  // shapes checked) and returns the result buffer, charged to the device's
  // memory. Errors: INVALID_ARGUMENT for wrong arguments or a device of
  // another kind; whatever a kernel reports (RESOURCE_EXHAUSTED,
  // DEADLINE_EXCEEDED on a starved infeed, ...), with the instruction that
  // failed.
  virtual absl::StatusOr<BufferPtr> Execute(Device& device, const std::vector<BufferPtr>& args,
                                            const ExecuteOptions& options) = 0;
  // Execute, taking the arguments over: an argument the caller held the
  // only reference to (a donated buffer) may be reused for a result once
  // the program has read it for the last time. Backends that do not reuse
  // arguments need not override it.
  virtual absl::StatusOr<BufferPtr> ExecuteOwned(Device& device, std::vector<BufferPtr>&& args,
                                                 const ExecuteOptions& options) {
    return Execute(device, args, options);
  }
  virtual const ir::Shape& result_shape() const = 0;
  virtual const std::vector<ir::Shape>& parameter_shapes() const = 0;
  // True when executions fill ExecuteOptions::profile (a backend with a
  // cost model, such as tpusim).
  virtual bool has_cost_model() const { return false; }
  // The profile of one execution over `replica_count` replicas, priced
  // without running it (a backend with a cost model that can price the
  // program statically); UNIMPLEMENTED elsewhere.
  virtual absl::StatusOr<ExecutionProfile> Estimate(int replica_count) const {
    (void)replica_count;
    return absl::UnimplementedError("this backend has no cost model to price programs with");
  }
  // Whether the program reads its infeed or writes its outfeed (a backend
  // that cannot tell says true).
  virtual bool uses_feeds() const { return true; }
  // Host or device bytes the executable itself holds for its lifetime (its
  // constants), which caches of executables count against their budget.
  virtual int64_t held_bytes() const { return 0; }
};

// Turns verified modules into executables for every device of one backend
// kind. Thread-safe.
class Compiler {
 public:
  virtual ~Compiler() = default;
  // The module need not outlive the executable. Errors name the instruction
  // the backend cannot run.
  virtual absl::StatusOr<std::shared_ptr<Executable>> Compile(const ir::Module& module,
                                                              const CompileOptions& options) = 0;

  // For the persistent compile cache. A backend that can keep what makes
  // recompiling cheap returns it as `artifact` beside the executable, and
  // Load() turns an artifact back into an executable without the costly
  // steps (passes, autotuning, code generation). The defaults keep nothing:
  // an empty artifact, and Load() UNIMPLEMENTED.
  struct Compiled {
    std::shared_ptr<Executable> executable;
    std::string artifact;  // empty: nothing to keep
  };
  virtual absl::StatusOr<Compiled> CompileForCache(const ir::Module& module,
                                                   const CompileOptions& options) {
    absl::StatusOr<std::shared_ptr<Executable>> exe = Compile(module, options);
    if (!exe.ok()) return exe.status();
    return Compiled{*std::move(exe), ""};
  }
  // INVALID_ARGUMENT for an artifact this build cannot read.
  virtual absl::StatusOr<std::shared_ptr<Executable>> Load(const std::string& artifact,
                                                           const CompileOptions& options) {
    return absl::UnimplementedError("this backend keeps no compiled programs on disk");
  }
  // What else an artifact depends on, for the persistent cache's key: the
  // versions of the libraries that generate code or choose kernels, the
  // processor they chose for, and the passes that rewrote the module.
  virtual std::string ArtifactDependencies() const { return ""; }
};

// One device of a backend: its memory, buffers, transfers and the device's
// own feed queues. Thread-safe.
class Device {
 public:
  virtual ~Device() = default;
  virtual const std::string& name() const = 0;  // "cpu:0"
  virtual const std::string& kind() const = 0;  // "cpu"
  virtual int ordinal() const = 0;

  virtual MemoryTracker* memory() = 0;
  MemoryStats memory_stats() { return memory()->Stats(); }

  // An uninitialized array buffer of `shape` on this device, charged to its
  // memory. RESOURCE_EXHAUSTED past the capacity (naming the largest live
  // buffers); INVALID_ARGUMENT for a tuple or token shape.
  virtual absl::StatusOr<BufferPtr> Allocate(const ir::Shape& shape) = 0;
  // Copy `size` bytes between host memory and the array `buffer` (which
  // must live on this device) at byte `offset`. INVALID_ARGUMENT for a range
  // outside the buffer or a buffer of another device.
  virtual absl::Status CopyToBuffer(Buffer& buffer, int64_t offset, const void* src,
                                    int64_t size) = 0;
  virtual absl::Status CopyFromBuffer(const Buffer& buffer, int64_t offset, void* dst,
                                      int64_t size) = 0;

  // Whole arrays, through the two copies above in pieces of at most
  // `kTransferChunkBytes`.
  absl::StatusOr<BufferPtr> TransferToDevice(const ir::Literal& value);
  absl::StatusOr<ir::Literal> TransferFromDevice(const Buffer& buffer);

  virtual FeedQueue& infeed() = 0;
  virtual FeedQueue& outfeed() = 0;

  static constexpr int64_t kTransferChunkBytes = int64_t{4} << 20;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_DEVICE_H_
