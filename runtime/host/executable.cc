#include "runtime/host/executable.h"

#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/host/cancel.h"

namespace kiln::host {

ProgramExecutable::ProgramExecutable(std::string kind, std::shared_ptr<const Program> entry,
                                     ir::Shape result, std::vector<ir::Shape> params,
                                     uint64_t seed, bool uses_feeds, bool uses_rng,
                                     ProfileFn profile)
    : kind_(std::move(kind)),
      entry_(std::move(entry)),
      result_shape_(std::move(result)),
      parameter_shapes_(std::move(params)),
      seed_(seed),
      uses_feeds_(uses_feeds),
      uses_rng_(uses_rng),
      profile_(std::move(profile)) {}

absl::StatusOr<runtime::BufferPtr> ProgramExecutable::Execute(
    runtime::Device& device, const std::vector<runtime::BufferPtr>& args,
    const runtime::ExecuteOptions& options) {
  std::vector<runtime::BufferPtr> copy = args;  // the caller keeps its references
  return ExecuteOwned(device, std::move(copy), options);
}

absl::StatusOr<runtime::BufferPtr> ProgramExecutable::ExecuteOwned(
    runtime::Device& device, std::vector<runtime::BufferPtr>&& args,
    const runtime::ExecuteOptions& options) {
  if (device.kind() != kind_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the program was compiled for ", kind_, " devices, not ", device.name()));
  }
  if (args.size() != parameter_shapes_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program takes ", parameter_shapes_.size(), " arguments, got ", args.size()));
  }
  std::vector<HostBufferPtr> host_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == nullptr || args[i]->shape() != parameter_shapes_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " has shape ", args[i] ? args[i]->shape().ToString() : "null",
          ", the program expects ", parameter_shapes_[i].ToString()));
    }
    host_args[i] = HostBuffer::Cast(std::move(args[i]));
    if (host_args[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " is not in host memory"));
    }
  }
  // Every execution draws from its own stream so runs are reproducible for
  // a given seed and execution count.
  // Seeding the generator costs more than a small program: only programs
  // with an rng op get one.
  const uint64_t execution = executions_.fetch_add(1);
  std::optional<std::mt19937_64> rng;
  if (uses_rng_) rng.emplace(seed_ + 0x9e3779b97f4a7c15ULL * execution);
  ExecState state;
  state.memory = device.memory();
  state.infeed = options.infeed != nullptr ? options.infeed : &device.infeed();
  state.outfeed = options.outfeed != nullptr ? options.outfeed : &device.outfeed();
  state.options = &options;
  state.rng = rng.has_value() ? &*rng : nullptr;
  runtime::CostCounters cost;
  if (profile_) state.cost = &cost;
  CancelScope cancel_scope(&options.cancelled);
  args.clear();
  absl::StatusOr<HostBufferPtr> result = entry_->Run(state, std::move(host_args));
  if (!result.ok()) return result.status();
  if (profile_ && options.profile != nullptr) {
    *options.profile = profile_(cost, options.replica_count);
  }
  return runtime::BufferPtr(*std::move(result));
}

absl::StatusOr<std::shared_ptr<runtime::Executable>> CompileProgram(
    const std::string& kind, const ir::Module& module, const runtime::CompileOptions& options,
    ProgramOptions program_options, ProgramExecutable::ProfileFn profile) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  ProgramCache programs(std::move(program_options));
  ASSIGN_OR_RETURN(std::shared_ptr<const Program> entry, programs.Get(module.entry()));
  bool uses_feeds = false, uses_rng = false;
  for (const auto& computation : module.computations()) {
    for (const auto& instr : computation->instructions()) {
      uses_feeds = uses_feeds || instr->opcode() == ir::Opcode::kInfeed ||
                   instr->opcode() == ir::Opcode::kOutfeed;
      uses_rng = uses_rng || instr->opcode() == ir::Opcode::kRng;
    }
  }
  return std::make_shared<ProgramExecutable>(
      kind, entry, module.entry()->root()->shape(), module.entry()->ParameterShapes(),
      options.rng_seed, uses_feeds, uses_rng, std::move(profile));
}

}  // namespace kiln::host
