#include "runtime/gpu/gpu_executable.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/gpu/blas.h"
#include "runtime/gpu/codegen.h"
#include "runtime/gpu/cuda_check.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/nvrtc.h"
#include "runtime/host/host_buffer.h"
#include "runtime/host/kernel.h"
#include "runtime/host/program.h"

namespace kiln::gpu {
namespace {

using ir::Instruction;
using ir::Opcode;

enum class StepKind {
  kKernel, kGemm, kView, kTuple, kElement, kConstant, kHost, kWhile, kConditional, kCall
};

struct Step {
  StepKind kind;
  std::string name;  // the instruction's, for errors
  std::string opcode;
  ir::Shape shape;
  std::vector<int> inputs;
  int output = 0;
  std::vector<int> release;  // slots whose last reader this step is
  std::vector<Launch> launches;
  std::vector<cudaKernel_t> kernels;  // one per launch, once loaded
  std::shared_ptr<const Gemm> gemm;
  int64_t tuple_index = 0;
  int constant = -1;
  host::Kernel host_kernel;
  std::vector<int> programs;  // called programs
  bool by_pred = false;       // conditional: a pred selects the branch
};

struct Program {
  std::string name;
  std::vector<Step> steps;
  int num_slots = 0;
  std::vector<int> param_slots;
  int root_slot = 0;
};

bool RunsOnHost(Opcode op) {
  switch (op) {
    case Opcode::kSort: case Opcode::kScatter: case Opcode::kRng: case Opcode::kInfeed:
    case Opcode::kOutfeed: case Opcode::kAfterAll: case Opcode::kAllReduce:
    case Opcode::kReplicaId: case Opcode::kCustomCall:
      return true;
    default:
      return false;
  }
}

// Turns the computations of a module into programs and their kernels into
// one CUDA translation unit.
class Builder {
 public:
  absl::StatusOr<int> Build(const ir::Computation& c) {
    if (auto it = index_.find(&c); it != index_.end()) return it->second;
    Program p;
    p.name = c.name();
    p.num_slots = c.instruction_count();
    for (const Instruction* param : c.parameters()) p.param_slots.push_back(param->index());
    p.root_slot = c.root()->index();
    const absl::flat_hash_set<const Instruction*> fused = Fusible(c);
    for (const auto& owned : c.instructions()) {
      const Instruction& instr = *owned;
      if (instr.opcode() == Opcode::kParameter || fused.contains(&instr)) continue;
      Step step;
      step.name = instr.name();
      step.opcode = std::string(ir::OpcodeName(instr.opcode()));
      step.shape = instr.shape();
      step.output = instr.index();
      for (const Instruction* o : instr.operands()) step.inputs.push_back(o->index());
      RETURN_IF_ERROR(Fill(instr, fused, step));
      p.steps.push_back(std::move(step));
    }
    // Release each slot after its last reader (never the root).
    std::vector<int> last(p.num_slots, -1);
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (int in : p.steps[s].inputs) last[in] = static_cast<int>(s);
    }
    for (int slot = 0; slot < p.num_slots; ++slot) {
      if (last[slot] >= 0 && slot != p.root_slot) p.steps[last[slot]].release.push_back(slot);
    }
    programs_.push_back(std::move(p));
    const int id = static_cast<int>(programs_.size()) - 1;
    index_[&c] = id;
    return id;
  }

  std::vector<Program>& programs() { return programs_; }
  std::vector<ir::Literal>& constants() { return constants_; }
  KernelEmitter& emitter() { return emitter_; }
  int host_steps() const { return host_steps_; }
  int gemms() const { return gemms_; }

 private:
  // How deep a fused expression may nest: a longer chain is cut into
  // several kernels, so that no generated expression grows without bound.
  static constexpr int kMaxFusionDepth = 24;

  // The instructions computed inside the kernel of their only user.
  static absl::flat_hash_set<const Instruction*> Fusible(const ir::Computation& c) {
    absl::flat_hash_map<const Instruction*, int> uses;
    absl::flat_hash_map<const Instruction*, const Instruction*> user;
    for (const auto& instr : c.instructions()) {
      for (const Instruction* o : instr->operands()) {
        ++uses[o];
        user[o] = instr.get();
      }
    }
    absl::flat_hash_set<const Instruction*> fused;
    // The nesting of each instruction's expression: 1 plus that of its
    // deepest fused operand (instructions come in operand-first order).
    absl::flat_hash_map<const Instruction*, int> depth;
    for (const auto& instr : c.instructions()) {
      int d = 1;
      for (const Instruction* o : instr->operands()) {
        if (fused.contains(o)) d = std::max(d, depth[o] + 1);
      }
      depth[instr.get()] = d;
      if (instr.get() != c.root() && uses[instr.get()] == 1 && d < kMaxFusionDepth &&
          CanFuse(*instr, *user[instr.get()])) {
        fused.insert(instr.get());
      }
    }
    return fused;
  }

  absl::Status Fill(const Instruction& instr,
                    const absl::flat_hash_set<const Instruction*>& fused, Step& step) {
    const Opcode op = instr.opcode();
    auto annotate = [&](absl::Status s) {
      return absl::Status(s.code(), absl::StrCat(instr.name(), ": ", s.message()));
    };
    if (op == Opcode::kDot) {
      if (std::optional<GemmShape> shape = PlanGemm(instr)) {
        // Without cuBLASLt the dot keeps its generated kernel.
        if (absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create(*shape); gemm.ok()) {
          step.kind = StepKind::kGemm;
          step.gemm = *std::move(gemm);
          ++gemms_;
          return absl::OkStatus();
        }
      }
    }
    if (HasKernel(instr)) {
      absl::StatusOr<KernelInfo> info = emitter_.Emit(instr, fused);
      if (!info.ok()) return annotate(info.status());
      step.kind = StepKind::kKernel;
      step.launches = info->launches;
      step.inputs.clear();
      for (const Instruction* in : info->inputs) step.inputs.push_back(in->index());
      return absl::OkStatus();
    }
    switch (op) {
      case Opcode::kConstant:
        step.kind = StepKind::kConstant;
        step.constant = static_cast<int>(constants_.size());
        constants_.push_back(instr.attrs().literal);
        return absl::OkStatus();
      case Opcode::kReshape: case Opcode::kBitcastConvert: case Opcode::kCopy:
        step.kind = StepKind::kView;
        return absl::OkStatus();
      case Opcode::kTuple:
        step.kind = StepKind::kTuple;
        return absl::OkStatus();
      case Opcode::kGetTupleElement:
        step.kind = StepKind::kElement;
        step.tuple_index = instr.attrs().tuple_index;
        return absl::OkStatus();
      case Opcode::kWhile: case Opcode::kConditional: case Opcode::kCall: {
        step.kind = op == Opcode::kWhile         ? StepKind::kWhile
                    : op == Opcode::kConditional ? StepKind::kConditional
                                                 : StepKind::kCall;
        step.by_pred = op == Opcode::kConditional &&
                       instr.operand(0)->shape().type() == ElementType::kPred;
        for (const ir::Computation* called : instr.called()) {
          ASSIGN_OR_RETURN(int id, Build(*called));
          step.programs.push_back(id);
        }
        return absl::OkStatus();
      }
      default:
        break;
    }
    if (RunsOnHost(op)) {
      absl::StatusOr<host::Kernel> kernel =
          op == Opcode::kSort      ? host::MakeSortKernel(instr, host_programs_)
          : op == Opcode::kScatter ? host::MakeGatherScatterKernel(instr, host_programs_)
                                   : host::MakeControlKernel(instr, host_programs_);
      if (!kernel.ok()) return annotate(kernel.status());
      step.kind = StepKind::kHost;
      step.host_kernel = *std::move(kernel);
      ++host_steps_;
      return absl::OkStatus();
    }
    return absl::UnimplementedError(absl::StrCat(instr.name(), ": the GPU backend cannot run ",
                                                 ir::OpcodeName(op)));
  }

  KernelEmitter emitter_;
  host::ProgramCache host_programs_;
  std::vector<Program> programs_;
  absl::flat_hash_map<const ir::Computation*, int> index_;
  std::vector<ir::Literal> constants_;
  int host_steps_ = 0;
  int gemms_ = 0;
};

// Per-execution state.
struct Context {
  GpuDevice* device;
  const runtime::ExecuteOptions* options;
  std::mt19937_64* rng;
  runtime::FeedQueue* infeed;
  runtime::FeedQueue* outfeed;
  std::vector<GpuBufferPtr> constants;
};

absl::StatusOr<host::HostBufferPtr> ToHost(GpuDevice& device, const GpuBufferPtr& buffer) {
  const ir::Shape& shape = buffer->shape();
  if (shape.IsTuple()) {
    std::vector<host::HostBufferPtr> elements;
    for (int i = 0; i < buffer->tuple_size(); ++i) {
      ASSIGN_OR_RETURN(host::HostBufferPtr e, ToHost(device, buffer->element(i)));
      elements.push_back(std::move(e));
    }
    return host::HostBuffer::MakeTuple(std::move(elements));
  }
  ASSIGN_OR_RETURN(host::HostBufferPtr out, host::HostBuffer::Allocate(shape, nullptr));
  if (shape.IsArray() && buffer->size_bytes() > 0) {
    RETURN_IF_ERROR(device.CopyFromBuffer(*buffer, 0, out->data(), buffer->size_bytes()));
  }
  return out;
}

absl::StatusOr<GpuBufferPtr> ToDevice(GpuDevice& device, const host::HostBuffer& buffer) {
  const ir::Shape& shape = buffer.shape();
  if (shape.IsTuple()) {
    std::vector<GpuBufferPtr> elements;
    for (const host::HostBufferPtr& e : buffer.tuple_elements()) {
      ASSIGN_OR_RETURN(GpuBufferPtr d, ToDevice(device, *e));
      elements.push_back(std::move(d));
    }
    return GpuBuffer::Tuple(std::move(elements));
  }
  ASSIGN_OR_RETURN(GpuBufferPtr out, device.AllocateBuffer(shape));
  if (shape.IsArray() && buffer.size_bytes() > 0) {
    RETURN_IF_ERROR(device.CopyToBuffer(*out, 0, buffer.data(), buffer.size_bytes()));
  }
  return out;
}

absl::StatusOr<int64_t> ReadScalar(GpuDevice& device, const GpuBufferPtr& buffer) {
  if (buffer->shape().type() == ElementType::kPred) {
    bool value = false;
    RETURN_IF_ERROR(device.CopyFromBuffer(*buffer, 0, &value, 1));
    return value ? 1 : 0;
  }
  int32_t value = 0;
  RETURN_IF_ERROR(device.CopyFromBuffer(*buffer, 0, &value, 4));
  return value;
}

class GpuExecutable final : public runtime::Executable {
 public:
  GpuExecutable(std::vector<Program> programs, int entry, std::vector<ir::Literal> constants,
                cudaLibrary_t library, ir::Shape result, std::vector<ir::Shape> params,
                uint64_t seed, bool uses_feeds)
      : programs_(std::move(programs)),
        entry_(entry),
        constants_(std::move(constants)),
        library_(library),
        result_shape_(std::move(result)),
        parameter_shapes_(std::move(params)),
        seed_(seed),
        uses_feeds_(uses_feeds) {}
  ~GpuExecutable() override {
    if (profiling_) PrintProfile();
    if (library_ != nullptr) cudaLibraryUnload(library_);
  }

  absl::StatusOr<runtime::BufferPtr> Execute(runtime::Device& device,
                                             const std::vector<runtime::BufferPtr>& args,
                                             const runtime::ExecuteOptions& options) override {
    auto* gpu = dynamic_cast<GpuDevice*>(&device);
    if (gpu == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("the program was compiled for gpu devices, not ", device.name()));
    }
    if (library_ == nullptr) {
      return absl::FailedPreconditionError("the program was compiled without loading it");
    }
    if (args.size() != parameter_shapes_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "program takes ", parameter_shapes_.size(), " arguments, got ", args.size()));
    }
    std::vector<GpuBufferPtr> gpu_args(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      gpu_args[i] = args[i] ? GpuBuffer::Cast(args[i]) : nullptr;
      if (gpu_args[i] == nullptr || args[i]->shape() != parameter_shapes_[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "argument ", i, " has shape ", args[i] ? args[i]->shape().ToString() : "null",
            ", the program expects ", parameter_shapes_[i].ToString(), " on a GPU"));
      }
    }
    RETURN_IF_ERROR(gpu->Activate());
    std::mt19937_64 rng(seed_ + 0x9e3779b97f4a7c15ULL * executions_.fetch_add(1));
    Context ctx{gpu, &options, &rng,
                options.infeed != nullptr ? options.infeed : &gpu->infeed(),
                options.outfeed != nullptr ? options.outfeed : &gpu->outfeed(),
                {}};
    ASSIGN_OR_RETURN(ctx.constants, ConstantsOn(*gpu));
    absl::StatusOr<GpuBufferPtr> result = Run(programs_[entry_], ctx, gpu_args);
    // Kernels run asynchronously: their errors show at the synchronization.
    const absl::Status synced = gpu->Synchronize();
    if (!result.ok()) return result.status();
    RETURN_IF_ERROR(synced);
    return runtime::BufferPtr(*std::move(result));
  }

  // The module's constants on `device`, uploaded by its first execution
  // there and charged to it while the executable lives.
  absl::StatusOr<std::vector<GpuBufferPtr>> ConstantsOn(GpuDevice& device) {
    absl::MutexLock lock(&constants_mu_);
    if (auto it = device_constants_.find(&device); it != device_constants_.end()) {
      return it->second;
    }
    std::vector<GpuBufferPtr> uploaded;
    for (const ir::Literal& c : constants_) {
      ASSIGN_OR_RETURN(host::HostBufferPtr h, host::HostBuffer::FromLiteral(c, nullptr));
      ASSIGN_OR_RETURN(GpuBufferPtr d, ToDevice(device, *h));
      uploaded.push_back(std::move(d));
    }
    device_constants_[&device] = uploaded;
    return uploaded;
  }

  const ir::Shape& result_shape() const override { return result_shape_; }
  const std::vector<ir::Shape>& parameter_shapes() const override { return parameter_shapes_; }
  bool uses_feeds() const override { return uses_feeds_; }

 private:
  absl::StatusOr<GpuBufferPtr> Run(const Program& p, Context& ctx,
                                   const std::vector<GpuBufferPtr>& args) const {
    std::vector<GpuBufferPtr> slots(p.num_slots);
    for (size_t i = 0; i < p.param_slots.size(); ++i) slots[p.param_slots[i]] = args[i];
    for (const Step& step : p.steps) {
      std::vector<GpuBufferPtr> in;
      in.reserve(step.inputs.size());
      for (int slot : step.inputs) in.push_back(slots[slot]);
      const absl::Time start = profiling_ ? absl::Now() : absl::Time();
      absl::StatusOr<GpuBufferPtr> out = RunStep(step, ctx, in);
      if (profiling_ && out.ok()) {
        RETURN_IF_ERROR(ctx.device->Synchronize());
        Record(step, absl::Now() - start);
      }
      if (!out.ok()) {
        return absl::Status(out.status().code(),
                            absl::StrCat(step.name, ": ", out.status().message()));
      }
      slots[step.output] = *std::move(out);
      for (int slot : step.release) slots[slot].reset();
    }
    return slots[p.root_slot];
  }

  absl::StatusOr<GpuBufferPtr> RunStep(const Step& step, Context& ctx,
                                       const std::vector<GpuBufferPtr>& in) const {
    GpuDevice& device = *ctx.device;
    switch (step.kind) {
      case StepKind::kKernel:
        return Launch(step, device, in);
      case StepKind::kGemm: {
        ASSIGN_OR_RETURN(GpuDevice::Blas blas, device.blas());
        ASSIGN_OR_RETURN(GpuBufferPtr out, device.AllocateBuffer(step.shape));
        RETURN_IF_ERROR(step.gemm->Run(blas.handle, blas.workspace, blas.workspace_bytes,
                                       in[0]->data(), in[1]->data(), out->data(),
                                       device.stream()));
        return out;
      }
      case StepKind::kView:
        return GpuBuffer::View(step.shape, in[0]);
      case StepKind::kTuple:
        return GpuBuffer::Tuple(in);
      case StepKind::kElement:
        return in[0]->element(static_cast<int>(step.tuple_index));
      case StepKind::kConstant:
        return ctx.constants[step.constant];
      case StepKind::kCall:
        return Run(programs_[step.programs[0]], ctx, in);
      case StepKind::kWhile: {
        const Program& cond = programs_[step.programs[0]];
        const Program& body = programs_[step.programs[1]];
        GpuBufferPtr state = in[0];
        while (true) {
          ASSIGN_OR_RETURN(GpuBufferPtr go, Run(cond, ctx, {state}));
          ASSIGN_OR_RETURN(int64_t keep_going, ReadScalar(device, go));
          if (keep_going == 0) return state;
          if (ctx.options->cancelled && ctx.options->cancelled()) {
            return absl::CancelledError("the execution was cancelled");
          }
          ASSIGN_OR_RETURN(state, Run(body, ctx, {state}));
        }
      }
      case StepKind::kConditional: {
        ASSIGN_OR_RETURN(int64_t index, ReadScalar(device, in[0]));
        const int64_t branches = static_cast<int64_t>(step.programs.size());
        if (step.by_pred) index = index != 0 ? 0 : 1;
        else if (index < 0 || index >= branches) index = branches - 1;
        return Run(programs_[step.programs[index]], ctx, {in[index + 1]});
      }
      case StepKind::kHost: {
        std::vector<host::HostBufferPtr> host_in;
        for (const GpuBufferPtr& b : in) {
          ASSIGN_OR_RETURN(host::HostBufferPtr h, ToHost(device, b));
          host_in.push_back(std::move(h));
        }
        host::ExecState state;
        state.infeed = ctx.infeed;
        state.outfeed = ctx.outfeed;
        state.options = ctx.options;
        state.rng = ctx.rng;
        ASSIGN_OR_RETURN(host::HostBufferPtr result, step.host_kernel(state, host_in));
        return ToDevice(device, *result);
      }
    }
    return absl::InternalError("unknown step");
  }

  absl::StatusOr<GpuBufferPtr> Launch(const Step& step, GpuDevice& device,
                                      const std::vector<GpuBufferPtr>& in) const {
    ASSIGN_OR_RETURN(GpuBufferPtr out, device.AllocateBuffer(step.shape));
    std::vector<void*> pointers;
    for (const GpuBufferPtr& b : in) pointers.push_back(b->data());
    if (step.shape.IsTuple()) {
      for (int i = 0; i < out->tuple_size(); ++i) pointers.push_back(out->element(i)->data());
    } else {
      pointers.push_back(out->data());
    }
    std::vector<void*> params;
    for (void*& p : pointers) params.push_back(&p);
    for (size_t k = 0; k < step.launches.size(); ++k) {
      const int64_t n = step.launches[k].iterations;
      if (n == 0) continue;
      constexpr int64_t kBlock = 256;
      constexpr int64_t kMaxBlocks = int64_t{1} << 16;  // the kernels loop over the rest
      const struct Launch& launch = step.launches[k];
      int64_t blocks = std::min((n + kBlock - 1) / kBlock, kMaxBlocks), threads = kBlock;
      if (launch.one_thread) blocks = threads = 1;
      if (launch.block_per_iteration > 0) {
        blocks = std::min(n, kMaxBlocks);
        threads = launch.block_per_iteration;
      }
      CUDA_RETURN_IF_ERROR(cudaLaunchKernel(reinterpret_cast<const void*>(step.kernels[k]),
                                            dim3(static_cast<unsigned>(blocks)),
                                            dim3(static_cast<unsigned>(threads)), params.data(),
                                            0, device.stream()));
    }
    return out;
  }

  std::vector<Program> programs_;
  int entry_;
  std::vector<ir::Literal> constants_;
  cudaLibrary_t library_;
  ir::Shape result_shape_;
  std::vector<ir::Shape> parameter_shapes_;
  uint64_t seed_;
  bool uses_feeds_;
  // With KILN_GPU_PROFILE set in the environment, every step is timed
  // (synchronizing after each) and the executable prints where its time
  // went when it is destroyed: a tool for finding slow kernels.
  struct StepTime {
    std::string opcode;
    int64_t calls = 0;
    absl::Duration total;
  };
  void Record(const Step& step, absl::Duration d) const {
    absl::MutexLock lock(&profile_mu_);
    StepTime& t = profile_[step.name];
    t.opcode = step.opcode;
    ++t.calls;
    t.total += d;
  }
  void PrintProfile() const {
    absl::MutexLock lock(&profile_mu_);
    std::vector<std::pair<std::string, StepTime>> rows(profile_.begin(), profile_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
    absl::Duration all;
    for (const auto& [name, t] : rows) all += t.total;
    std::fprintf(stderr, "GPU profile of %lld executions: %.3f ms per execution\n",
                 static_cast<long long>(executions_.load()),
                 absl::ToDoubleMilliseconds(all) / std::max<uint64_t>(1, executions_.load()));
    for (size_t i = 0; i < rows.size() && i < 20; ++i) {
      const StepTime& t = rows[i].second;
      std::fprintf(stderr, "  %-28s %-20s %8lld calls %10.3f ms %5.1f%%\n",
                   rows[i].first.c_str(), t.opcode.c_str(), static_cast<long long>(t.calls),
                   absl::ToDoubleMilliseconds(t.total), 100 * absl::FDivDuration(t.total, all));
    }
  }
  const bool profiling_ = std::getenv("KILN_GPU_PROFILE") != nullptr;
  mutable absl::Mutex profile_mu_;
  mutable absl::flat_hash_map<std::string, StepTime> profile_ ABSL_GUARDED_BY(profile_mu_);

  std::atomic<uint64_t> executions_{0};
  absl::Mutex constants_mu_;
  absl::flat_hash_map<const GpuDevice*, std::vector<GpuBufferPtr>> device_constants_
      ABSL_GUARDED_BY(constants_mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<runtime::Executable>> CompileForGpu(
    const ir::Module& module, const runtime::CompileOptions& options, const std::string& arch,
    bool load, GpuCompileReport* report) {
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError("module has no entry computation");
  }
  Builder builder;
  ASSIGN_OR_RETURN(int entry, builder.Build(*module.entry()));
  ASSIGN_OR_RETURN(std::string cubin, CompileToCubin(builder.emitter().source(), arch));
  if (report != nullptr) {
    report->kernels = builder.emitter().kernel_count();
    report->host_steps = builder.host_steps();
    report->gemms = builder.gemms();
    report->source = builder.emitter().source();
  }
  cudaLibrary_t library = nullptr;
  if (load) {
    CUDA_RETURN_IF_ERROR(cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0,
                                             nullptr, nullptr, 0));
    for (Program& p : builder.programs()) {
      for (Step& step : p.steps) {
        for (const Launch& launch : step.launches) {
          cudaKernel_t kernel;
          const cudaError_t error = cudaLibraryGetKernel(&kernel, library, launch.name.c_str());
          if (error != cudaSuccess) {
            cudaLibraryUnload(library);
            return CudaStatus(error, absl::StrCat("loading kernel ", launch.name).c_str());
          }
          step.kernels.push_back(kernel);
        }
      }
    }
  }
  bool uses_feeds = false;
  for (const auto& computation : module.computations()) {
    for (const auto& instr : computation->instructions()) {
      uses_feeds = uses_feeds || instr->opcode() == Opcode::kInfeed ||
                   instr->opcode() == Opcode::kOutfeed;
    }
  }
  return std::make_shared<GpuExecutable>(std::move(builder.programs()), entry,
                                         std::move(builder.constants()), library,
                                         module.entry()->root()->shape(),
                                         module.entry()->ParameterShapes(), options.rng_seed,
                                         uses_feeds);
}

}  // namespace kiln::gpu
