// An executable that runs a compiled Program on the host: the CPU backend's,
// and (with a cost model) the TPU simulator's.
#ifndef KILN_RUNTIME_CPU_EXECUTABLE_H_
#define KILN_RUNTIME_CPU_EXECUTABLE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/cpu/program.h"
#include "runtime/device.h"

namespace kiln::cpu {

// Thread-safe: concurrent executions share only immutable state.
class ProgramExecutable : public runtime::Executable {
 public:
  // Turns the counters an execution accumulated into its profile;
  // `replica_count` prices the all-reduces over every replica.
  using ProfileFn = std::function<runtime::ExecutionProfile(const runtime::CostCounters&,
                                                            int replica_count)>;
  // `device` (borrowed, must outlive the executable) gives the default
  // memory and queues. `profile` null: executions report no profile.
  ProgramExecutable(std::shared_ptr<const Program> entry, ir::Shape result,
                    std::vector<ir::Shape> params, uint64_t seed, runtime::Device* device,
                    ProfileFn profile = nullptr);

  absl::StatusOr<runtime::BufferPtr> Execute(const std::vector<runtime::BufferPtr>& args,
                                             const runtime::ExecuteOptions& options) override;
  const ir::Shape& result_shape() const override { return result_shape_; }
  const std::vector<ir::Shape>& parameter_shapes() const override {
    return parameter_shapes_;
  }
  bool has_cost_model() const override { return profile_ != nullptr; }

 private:
  std::shared_ptr<const Program> entry_;
  ir::Shape result_shape_;
  std::vector<ir::Shape> parameter_shapes_;
  uint64_t seed_;
  std::atomic<uint64_t> executions_{0};
  runtime::Device* device_;
  ProfileFn profile_;
};

}  // namespace kiln::cpu

#endif  // KILN_RUNTIME_CPU_EXECUTABLE_H_
