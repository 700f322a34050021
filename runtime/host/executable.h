// An executable that runs a compiled Program on the host: the CPU backend's,
// and (with a cost model) the TPU simulator's.
#ifndef KILN_RUNTIME_HOST_EXECUTABLE_H_
#define KILN_RUNTIME_HOST_EXECUTABLE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/host/program.h"

namespace kiln::host {

// Thread-safe: concurrent executions share only immutable state.
class ProgramExecutable : public runtime::Executable {
 public:
  // Turns the counters an execution accumulated into its profile;
  // `replica_count` prices the all-reduces over every replica.
  using ProfileFn = std::function<runtime::ExecutionProfile(const runtime::CostCounters&,
                                                            int replica_count, int hosts)>;
  // Runs on devices of `kind` (host devices). `profile` null: executions
  // report no profile.
  // `uses_rng`: whether any computation draws from the rng (others skip
  // seeding a generator per execution). `on_worker`: whether executions run
  // on a compute worker (compute_workers.h) rather than the calling thread.
  ProgramExecutable(std::string kind, std::shared_ptr<const Program> entry, ir::Shape result,
                    std::vector<ir::Shape> params, uint64_t seed, bool uses_feeds,
                    bool uses_rng, bool on_worker, ProfileFn profile = nullptr);

  absl::StatusOr<runtime::BufferPtr> Execute(runtime::Device& device,
                                             const std::vector<runtime::BufferPtr>& args,
                                             const runtime::ExecuteOptions& options) override;
  absl::StatusOr<runtime::BufferPtr> ExecuteOwned(runtime::Device& device,
                                                  std::vector<runtime::BufferPtr>&& args,
                                                  const runtime::ExecuteOptions& options) override;
  const ir::Shape& result_shape() const override { return result_shape_; }
  const std::vector<ir::Shape>& parameter_shapes() const override {
    return parameter_shapes_;
  }
  bool has_cost_model() const override { return profile_ != nullptr; }
  absl::StatusOr<runtime::ExecutionProfile> Estimate(int replica_count) const override;
  // What one execution costs, priced when the program was built (or why it
  // cannot be), for Estimate.
  void set_estimate(absl::StatusOr<runtime::CostCounters> estimate) {
    estimate_ = std::move(estimate);
  }
  bool uses_feeds() const override { return uses_feeds_; }
  int64_t held_bytes() const override { return held_bytes_; }
  void set_held_bytes(int64_t bytes) { held_bytes_ = bytes; }

 private:
  const std::string kind_;
  std::shared_ptr<const Program> entry_;
  ir::Shape result_shape_;
  std::vector<ir::Shape> parameter_shapes_;
  uint64_t seed_;
  bool uses_feeds_;
  bool uses_rng_;
  bool on_worker_;
  int64_t held_bytes_ = 0;
  absl::StatusOr<runtime::CostCounters> estimate_ =
      absl::UnimplementedError("this backend has no cost model to price programs with");
  std::atomic<uint64_t> executions_{0};
  ProfileFn profile_;
};

// Compiles `module`'s entry computation into a ProgramExecutable for
// devices of `kind`: what the host backends' compilers share.
absl::StatusOr<std::shared_ptr<runtime::Executable>> CompileProgram(
    const std::string& kind, const ir::Module& module, const runtime::CompileOptions& options,
    ProgramOptions program_options = {}, ProgramExecutable::ProfileFn profile = nullptr);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_EXECUTABLE_H_
