#include "runtime/host/executable.h"

#include <optional>
#include <random>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/host/cancel.h"
#include "runtime/host/compute_workers.h"

namespace kiln::host {
namespace {

// Programs with at least this much work (elements produced plus the
// multiply-adds of dots and convolutions: about a millisecond) run on
// compute workers; the handoff costs tens of microseconds of wake-ups, too
// much for smaller ones.
constexpr int64_t kComputeWorkerWork = int64_t{1} << 25;

// The work of `instr` in the units above.
int64_t WorkOf(const ir::Instruction& instr) {
  const ir::Shape& shape = instr.shape();
  if (shape.IsTuple()) return 0;
  int64_t work = shape.ElementCount();
  if (instr.opcode() == ir::Opcode::kDot) {
    const ir::Shape& lhs = instr.operand(0)->shape();
    int64_t contracted = 1;
    for (int64_t d : instr.attrs().dot.lhs_contracting) contracted *= lhs.dim(d);
    work += shape.ElementCount() * contracted;
  } else if (instr.opcode() == ir::Opcode::kConvolution) {
    const ir::Shape& kernel = instr.operand(1)->shape();
    const int64_t out_features = kernel.dim(instr.attrs().conv.kernel_output_feature);
    if (out_features > 0) work += shape.ElementCount() * (kernel.ElementCount() / out_features);
  }
  return work;
}

}  // namespace

ProgramExecutable::ProgramExecutable(std::string kind, std::shared_ptr<const Program> entry,
                                     ir::Shape result, std::vector<ir::Shape> params,
                                     uint64_t seed, bool uses_feeds, bool uses_rng,
                                     bool on_worker, ProfileFn profile)
    : kind_(std::move(kind)),
      entry_(std::move(entry)),
      result_shape_(std::move(result)),
      parameter_shapes_(std::move(params)),
      seed_(seed),
      uses_feeds_(uses_feeds),
      uses_rng_(uses_rng),
      on_worker_(on_worker),
      profile_(std::move(profile)) {}

absl::StatusOr<runtime::ExecutionProfile> ProgramExecutable::Estimate(int replica_count) const {
  if (profile_ == nullptr) {
    return absl::UnimplementedError("this backend has no cost model to price programs with");
  }
  if (!estimate_.ok()) return estimate_.status();
  return profile_(*estimate_, replica_count, 1);
}

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
  absl::InlinedVector<HostBufferPtr, 4> host_args(args.size());
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
  args.clear();
  absl::StatusOr<HostBufferPtr> result;  // UNKNOWN until the program ran
  auto run = [&] {
    CancelScope cancel_scope(&options.cancelled);
    result = entry_->Run(state, absl::MakeSpan(host_args));
  };
  // Programs with real work run on a warm compute worker; a small one (an
  // eager op) costs less than the handoff.
  if (on_worker_) {
    RunOnComputeWorker(run);
  } else {
    run();
  }
  if (!result.ok()) return result.status();
  if (profile_ && options.profile != nullptr) {
    *options.profile = profile_(cost, options.replica_count, options.hosts);
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
  // A program with little work (an eager op, a small step) is cheaper to
  // run in place than to hand to a worker.
  int64_t work = 0, constant_bytes = 0;
  for (const auto& computation : module.computations()) {
    for (const auto& instr : computation->instructions()) {
      work += WorkOf(*instr);
      if (instr->opcode() == ir::Opcode::kConstant) {
        constant_bytes += static_cast<int64_t>(instr->attrs().literal.bytes().size());
      }
      uses_feeds = uses_feeds || instr->opcode() == ir::Opcode::kInfeed ||
                   instr->opcode() == ir::Opcode::kOutfeed;
      uses_rng = uses_rng || instr->opcode() == ir::Opcode::kRng;
    }
  }
  auto executable = std::make_shared<ProgramExecutable>(
      kind, entry, module.entry()->root()->shape(), module.entry()->ParameterShapes(),
      options.rng_seed, uses_feeds, uses_rng, work >= kComputeWorkerWork,
      std::move(profile));
  // The kernels keep a buffer per constant of the module they were built
  // from (after the backend's passes).
  executable->set_held_bytes(constant_bytes);
  return executable;
}

}  // namespace kiln::host
