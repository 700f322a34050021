#include "runtime/cpu/executable.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace kiln::cpu {

ProgramExecutable::ProgramExecutable(std::shared_ptr<const Program> entry, ir::Shape result,
                                     std::vector<ir::Shape> params, uint64_t seed,
                                     runtime::Device* device, ProfileFn profile)
    : entry_(std::move(entry)),
      result_shape_(std::move(result)),
      parameter_shapes_(std::move(params)),
      seed_(seed),
      device_(device),
      profile_(std::move(profile)) {}

absl::StatusOr<runtime::BufferPtr> ProgramExecutable::Execute(
    const std::vector<runtime::BufferPtr>& args, const runtime::ExecuteOptions& options) {
  if (args.size() != parameter_shapes_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program takes ", parameter_shapes_.size(), " arguments, got ", args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == nullptr || args[i]->shape() != parameter_shapes_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " has shape ", args[i] ? args[i]->shape().ToString() : "null",
          ", the program expects ", parameter_shapes_[i].ToString()));
    }
  }
  // Every execution draws from its own stream so runs are reproducible for
  // a given seed and execution count.
  std::mt19937_64 rng(seed_ + 0x9e3779b97f4a7c15ULL * executions_.fetch_add(1));
  ExecState state;
  state.memory = options.memory != nullptr ? options.memory : device_->memory();
  state.infeed = options.infeed != nullptr ? options.infeed : &device_->infeed();
  state.outfeed = options.outfeed != nullptr ? options.outfeed : &device_->outfeed();
  state.options = &options;
  state.rng = &rng;
  runtime::CostCounters cost;
  if (profile_) state.cost = &cost;
  absl::StatusOr<runtime::BufferPtr> result = entry_->Run(state, args);
  if (result.ok() && profile_ && options.profile != nullptr) {
    *options.profile = profile_(cost, options.replica_count);
  }
  return result;
}

}  // namespace kiln::cpu
