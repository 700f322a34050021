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
#include "base/logging.h"
#include "base/status_macros.h"
#include "runtime/arena_plan.h"
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
    case Opcode::kOutfeed: case Opcode::kAfterAll: case Opcode::kReplicaId:
    case Opcode::kCustomCall: case Opcode::kPartitionId: case Opcode::kReducePrecision:
    case Opcode::kRngBitGenerator: case Opcode::kCholesky: case Opcode::kTriangularSolve:
      return true;
    default:
      // Collectives meet at the host's rendezvous.
      return ir::IsCollective(op);
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
          : ir::IsCollective(op)   ? host::MakeCollectiveKernel(instr)
          : op == Opcode::kCholesky || op == Opcode::kTriangularSolve
              ? host::MakeLinalgKernel(instr)
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
  // Where kernels and library calls are queued: the device's stream, or
  // the stream a graph is captured from.
  cudaStream_t stream = nullptr;
  // While a graph is captured: the buffer each kernel and GEMM writes, by
  // slot (their bytes in the graph's arena), instead of a new allocation.
  const std::vector<GpuBufferPtr>* planned = nullptr;
};

// What launching a kernel or library call costs the host, in bytes of
// device-to-device copying that take as long: a replay copies the
// arguments into the graph's own buffers, which pays only where the steps
// it saves launching cost more (about 4 us each against 2 bytes moved per
// argument byte at about 2 TB/s).
constexpr int64_t kArgumentBytesPerLaunch = int64_t{4} << 20;

// Whether executions of `p` should replay a CUDA graph: straight-line
// device work (nothing that reads values back to the host or runs there)
// whose launches cost more than copying its arguments.
bool WorthAGraph(const Program& p, const std::vector<ir::Shape>& parameters) {
  int64_t launches = 0;
  for (const Step& step : p.steps) {
    switch (step.kind) {
      case StepKind::kKernel:
        launches += static_cast<int64_t>(step.launches.size());
        break;
      case StepKind::kGemm:
        ++launches;
        break;
      case StepKind::kView: case StepKind::kTuple: case StepKind::kElement:
      case StepKind::kConstant:
        break;
      default:
        return false;
    }
  }
  int64_t argument_bytes = 0;
  for (const ir::Shape& shape : parameters) {
    if (!shape.IsArray()) return false;  // copied in as one array each
    argument_bytes += shape.ByteSize();
  }
  return launches >= 2 && argument_bytes <= launches * kArgumentBytesPerLaunch;
}

// A straight-line program's buffers, worked out before it runs: which
// arena blocks each slot's value is made of (a kernel's or GEMM's output is
// new blocks; views, tuples and tuple elements reuse their operands'), and
// when each block is written and last read.
class GraphLayout {
 public:
  // A slot's value: a block (>= 0), outside the arena (-1: a parameter or
  // constant), or a tuple of such values.
  struct Value {
    int block = -1;
    std::vector<Value> elements;
  };

  explicit GraphLayout(const Program& p) : values_(p.num_slots) {
    const int end = static_cast<int>(p.steps.size());
    for (int s = 0; s < end; ++s) {
      const Step& step = p.steps[s];
      for (int in : step.inputs) Use(values_[in], s);
      Value& out = values_[step.output];
      switch (step.kind) {
        case StepKind::kKernel: case StepKind::kGemm:
          out = Define(step.shape, s);
          break;
        case StepKind::kView:
          out = values_[step.inputs[0]];
          break;
        case StepKind::kTuple:
          out.elements.clear();
          for (int in : step.inputs) out.elements.push_back(values_[in]);
          break;
        case StepKind::kElement: {
          const Value& tuple = values_[step.inputs[0]];
          out = step.tuple_index < static_cast<int64_t>(tuple.elements.size())
                    ? tuple.elements[step.tuple_index]
                    : Value{};
          break;
        }
        default:
          out = Value{};
      }
    }
    Use(values_[p.root_slot], end);  // read by the copy-out after the graph
  }

  const std::vector<runtime::ArenaBlock>& blocks() const { return blocks_; }

  // The buffers a capture writes: each kernel and GEMM output as views of
  // `arena` at the planned offsets.
  std::vector<GpuBufferPtr> Planned(const Program& p, const GpuBufferPtr& arena,
                                    const std::vector<int64_t>& offsets) const {
    std::vector<GpuBufferPtr> planned(p.num_slots);
    for (const Step& step : p.steps) {
      if (step.kind == StepKind::kKernel || step.kind == StepKind::kGemm) {
        planned[step.output] = Materialize(step.shape, values_[step.output], arena, offsets);
      }
    }
    return planned;
  }

 private:
  Value Define(const ir::Shape& shape, int step) {
    Value v;
    if (shape.IsTuple()) {
      for (const ir::Shape& e : shape.tuple_shapes()) v.elements.push_back(Define(e, step));
      return v;
    }
    v.block = static_cast<int>(blocks_.size());
    blocks_.push_back({shape.IsArray() ? shape.ByteSize() : 0, step, step});
    return v;
  }

  void Use(const Value& v, int step) {
    if (v.block >= 0) blocks_[v.block].last = std::max(blocks_[v.block].last, step);
    for (const Value& e : v.elements) Use(e, step);
  }

  static GpuBufferPtr Materialize(const ir::Shape& shape, const Value& v,
                                  const GpuBufferPtr& arena,
                                  const std::vector<int64_t>& offsets) {
    if (shape.IsTuple()) {
      std::vector<GpuBufferPtr> elements;
      for (int i = 0; i < static_cast<int>(shape.tuple_shapes().size()); ++i) {
        elements.push_back(Materialize(shape.tuple_shape(i), v.elements[i], arena, offsets));
      }
      return GpuBuffer::Tuple(std::move(elements));
    }
    if (shape.IsToken()) return GpuBuffer::Token();
    return GpuBuffer::Slice(shape, arena, offsets[v.block]);
  }

  std::vector<Value> values_;
  std::vector<runtime::ArenaBlock> blocks_;
};

// The entry program captured as a CUDA graph on one device: its
// intermediates in one arena planned ahead, its parameters in buffers of
// their own that each execution fills first, its result read out of the
// arena into new buffers after the replay.
struct Graph {
  absl::Mutex mu;
  int eager_runs ABSL_GUARDED_BY(mu) = 0;
  bool refused ABSL_GUARDED_BY(mu) = false;  // capture failed: executions stay eager
  GpuBufferPtr arena ABSL_GUARDED_BY(mu);
  std::vector<GpuBufferPtr> params ABSL_GUARDED_BY(mu);
  GpuBufferPtr root ABSL_GUARDED_BY(mu);  // views of the arena, parameters, constants
  cudaGraphExec_t exec ABSL_GUARDED_BY(mu) = nullptr;

  ~Graph() {
    absl::MutexLock lock(&mu);
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

// New buffers on `device` holding a copy of `value`, queued on its stream.
absl::StatusOr<GpuBufferPtr> CopyOut(GpuDevice& device, const GpuBufferPtr& value) {
  const ir::Shape& shape = value->shape();
  if (shape.IsTuple()) {
    std::vector<GpuBufferPtr> elements;
    for (int i = 0; i < value->tuple_size(); ++i) {
      ASSIGN_OR_RETURN(GpuBufferPtr e, CopyOut(device, value->element(i)));
      elements.push_back(std::move(e));
    }
    return GpuBuffer::Tuple(std::move(elements));
  }
  if (shape.IsToken()) return GpuBuffer::Token();
  ASSIGN_OR_RETURN(GpuBufferPtr out, device.AllocateBuffer(shape));
  if (out->size_bytes() > 0) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->data(), value->data(), out->size_bytes(),
                                         cudaMemcpyDeviceToDevice, device.stream()));
  }
  return out;
}

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
    {
      absl::MutexLock lock(&graphs_mu_);
      graphs_.clear();  // their kernels live in the library
    }
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
    ctx.stream = gpu->stream();
    ASSIGN_OR_RETURN(ctx.constants, ConstantsOn(*gpu));
    absl::StatusOr<GpuBufferPtr> result;
    bool replayed = false;
    if (Graph* graph = GraphOn(*gpu); graph != nullptr && graph->mu.TryLock()) {
      // An execution that finds the graph busy (another on the same device)
      // runs step by step instead of waiting.
      absl::StatusOr<std::optional<GpuBufferPtr>> r = Replay(*graph, ctx, gpu_args);
      graph->mu.Unlock();
      if (!r.ok()) {
        result = r.status();
        replayed = true;
      } else if (r->has_value()) {
        result = **std::move(r);
        replayed = true;
      }
    }
    if (!replayed) result = Run(programs_[entry_], ctx, gpu_args);
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

  // The graph of the entry program on `device`, made on first use; null
  // where executions are not captured (control flow, host steps,
  // profiling, KILN_GPU_GRAPHS=0).
  Graph* GraphOn(GpuDevice& device) {
    if (!capturable_) return nullptr;
    absl::MutexLock lock(&graphs_mu_);
    std::unique_ptr<Graph>& graph = graphs_[&device];
    if (graph == nullptr) graph = std::make_unique<Graph>();
    return graph.get();
  }

  // Runs the entry program as its graph: captured at the second execution
  // on the device (the first one sets up the libraries' handles and
  // algorithm choices, which a capture may not do), replayed after that.
  // Returns nothing where the execution is to run step by step.
  absl::StatusOr<std::optional<GpuBufferPtr>> Replay(Graph& graph, Context& ctx,
                                                     const std::vector<GpuBufferPtr>& args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(graph.mu) {
    GpuDevice& device = *ctx.device;
    if (graph.refused) return std::nullopt;
    if (graph.exec == nullptr) {
      if (graph.eager_runs++ < 1) return std::nullopt;
      if (absl::Status captured = Capture(graph, ctx); !captured.ok()) {
        logging::Warn("{} runs step by step on {}: its CUDA graph could not be made: {}",
                      programs_[entry_].name, device.name(), std::string(captured.message()));
        graph.refused = true;
        graph.arena.reset();
        graph.params.clear();
        graph.root.reset();
        return std::nullopt;
      }
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (graph.params[i]->size_bytes() == 0) continue;
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(graph.params[i]->data(), args[i]->data(),
                                           graph.params[i]->size_bytes(),
                                           cudaMemcpyDeviceToDevice, device.stream()));
    }
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph.exec, device.stream()));
    ASSIGN_OR_RETURN(GpuBufferPtr out, CopyOut(device, graph.root));
    return std::optional<GpuBufferPtr>(std::move(out));
  }

  // Plans the arena, allocates it and the parameters' buffers (charged to
  // the device while the executable lives), and records the entry
  // program's launches and GEMMs on a stream of its own into a graph.
  absl::Status Capture(Graph& graph, Context& ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(graph.mu) {
    GpuDevice& device = *ctx.device;
    const Program& entry = programs_[entry_];
    const GraphLayout layout(entry);
    const runtime::ArenaPlan plan = runtime::PlanArena(layout.blocks(), 256);
    // A graph keeps its memory while the executable lives: it may take a
    // quarter of the device at most, and only while half stays free for
    // everything else.
    const runtime::MemoryStats memory = device.memory()->Stats();
    int64_t argument_bytes = 0;
    for (const ir::Shape& shape : parameter_shapes_) argument_bytes += shape.ByteSize();
    const int64_t keeps = plan.total_bytes + argument_bytes;
    if (keeps > memory.capacity_bytes / 4 ||
        memory.bytes_in_use + keeps > memory.capacity_bytes / 2) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "it would keep ", keeps, " bytes of ", device.name(), " (", memory.bytes_in_use,
          " of ", memory.capacity_bytes, " in use)"));
    }
    // Library handles are made outside the capture (it may not allocate).
    if (has_gemms_) RETURN_IF_ERROR(device.blas().status());
    ASSIGN_OR_RETURN(graph.arena,
                     device.AllocateBuffer(ir::Shape(ElementType::kU8, {plan.total_bytes})));
    graph.params.clear();
    for (const ir::Shape& shape : parameter_shapes_) {
      ASSIGN_OR_RETURN(GpuBufferPtr p, device.AllocateBuffer(shape));
      graph.params.push_back(std::move(p));
    }
    const std::vector<GpuBufferPtr> planned = layout.Planned(entry, graph.arena, plan.offsets);
    cudaStream_t stream = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Context capture = ctx;
    capture.stream = stream;
    capture.planned = &planned;
    absl::StatusOr<GpuBufferPtr> root;
    cudaGraph_t recorded = nullptr;
    cudaError_t error = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (error == cudaSuccess) {
      root = Run(entry, capture, graph.params);
      error = cudaStreamEndCapture(stream, &recorded);
    }
    cudaStreamDestroy(stream);
    if (error != cudaSuccess) {
      cudaGetLastError();
      if (recorded != nullptr) cudaGraphDestroy(recorded);
      return CudaStatus(error, "capturing the program");
    }
    if (!root.ok()) {
      cudaGetLastError();  // a launch refused during the capture
      cudaGraphDestroy(recorded);
      return root.status();
    }
    error = cudaGraphInstantiate(&graph.exec, recorded, 0);
    cudaGraphDestroy(recorded);
    if (error != cudaSuccess) {
      graph.exec = nullptr;
      cudaGetLastError();
      return CudaStatus(error, "instantiating the graph");
    }
    graph.root = *std::move(root);
    return absl::OkStatus();
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
        return Launch(step, ctx, in);
      case StepKind::kGemm: {
        ASSIGN_OR_RETURN(GpuDevice::Blas blas, device.blas());
        ASSIGN_OR_RETURN(GpuBufferPtr out, Output(step, ctx));
        RETURN_IF_ERROR(step.gemm->Run(blas.handle, blas.workspace, blas.workspace_bytes,
                                       in[0]->data(), in[1]->data(), out->data(), ctx.stream));
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

  // The buffer a kernel or GEMM step writes: planned while a graph is
  // captured, else new.
  static absl::StatusOr<GpuBufferPtr> Output(const Step& step, Context& ctx) {
    if (ctx.planned != nullptr) return (*ctx.planned)[step.output];
    return ctx.device->AllocateBuffer(step.shape);
  }

  absl::StatusOr<GpuBufferPtr> Launch(const Step& step, Context& ctx,
                                      const std::vector<GpuBufferPtr>& in) const {
    ASSIGN_OR_RETURN(GpuBufferPtr out, Output(step, ctx));
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
                                            0, ctx.stream));
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
  // Executions replay a CUDA graph where the entry program allows it and it
  // pays, unless profiling or KILN_GPU_GRAPHS=0 asks for step-by-step runs.
  const bool capturable_ =
      !profiling_ && GraphsEnabled() && WorthAGraph(programs_[entry_], parameter_shapes_);
  const bool has_gemms_ = std::any_of(
      programs_[entry_].steps.begin(), programs_[entry_].steps.end(),
      [](const Step& step) { return step.kind == StepKind::kGemm; });
  static bool GraphsEnabled() {
    const char* flag = std::getenv("KILN_GPU_GRAPHS");
    return flag == nullptr || std::string(flag) != "0";
  }
  absl::Mutex graphs_mu_;
  absl::flat_hash_map<const GpuDevice*, std::unique_ptr<Graph>> graphs_
      ABSL_GUARDED_BY(graphs_mu_);
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
