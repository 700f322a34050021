// Helpers for host interpreter tests: run HLO text on literals.
#ifndef KILN_RUNTIME_HOST_TEST_UTIL_H_
#define KILN_RUNTIME_HOST_TEST_UTIL_H_

#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/literal.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/cpu_pipeline.h"
#include "compiler/passes/fusion.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_buffer.h"
#include "runtime/host/host_device.h"

namespace kiln::host {

// Transfers `args` to `device`, runs `exe` there with `options`, and
// returns the result as a literal.
inline absl::StatusOr<ir::Literal> ExecuteOn(runtime::Executable& exe, runtime::Device& device,
                                             const std::vector<ir::Literal>& args,
                                             const runtime::ExecuteOptions& options = {}) {
  std::vector<runtime::BufferPtr> buffers;
  for (const ir::Literal& a : args) {
    auto b = device.TransferToDevice(a);
    if (!b.ok()) return b.status();
    buffers.push_back(*b);
  }
  auto out = exe.Execute(device, buffers, options);
  if (!out.ok()) return out.status();
  return HostBuffer::Cast(*out)->ToLiteral();
}

// Compiles with `compiler` and runs on `device` (both null: the host
// interpreter, after loop fusion, on a fresh "cpu" host device); fills `profile` when the
// backend has a cost model.
inline absl::StatusOr<ir::Literal> RunHlo(absl::string_view text,
                                          const std::vector<ir::Literal>& args,
                                          runtime::Device* device = nullptr,
                                          runtime::Compiler* compiler = nullptr,
                                          runtime::ExecutionProfile* profile = nullptr) {
  HostDevice local("cpu", 0, int64_t{8} << 30, 64);
  if (device == nullptr) device = &local;
  auto module = ir::ParseModule(text);
  if (!module.ok()) return module.status();
  if (absl::Status st = ir::Verify(**module); !st.ok()) return st;
  // Without a compiler, the module runs as the CPU pipeline would leave its
  // elementwise work: fused into loops.
  if (compiler == nullptr) {
    if (auto fused = passes::LoopFusion().Run(module->get()); !fused.ok()) return fused.status();
  }
  auto exe = compiler != nullptr ? compiler->Compile(**module, {})
                                 : CompileProgram(device->kind(), **module, {});
  if (!exe.ok()) return exe.status();
  runtime::ExecuteOptions options;
  options.infeed_timeout = absl::Milliseconds(100);
  options.profile = profile;
  return ExecuteOn(**exe, *device, args, options);
}

// Runs `text` on a fresh "cpu" host device after the whole CPU pipeline
// (`full_pipeline`) or after loop fusion alone, on `args`; `count`, when
// given, receives how many computations `counted` accepts after the passes.
inline absl::StatusOr<ir::Literal> RunAfterPasses(const std::string& text,
                                                  const std::vector<ir::Literal>& args,
                                                  bool full_pipeline,
                                                  bool (*counted)(const ir::Computation&) = nullptr,
                                                  int* count = nullptr) {
  auto module = ir::ParseModule(text);
  if (!module.ok()) return module.status();
  if (full_pipeline) {
    std::unique_ptr<passes::Pipeline> cpu = passes::CpuPipeline(/*verify=*/true);
    if (auto changed = cpu->Run(module->get()); !changed.ok()) return changed.status();
  } else if (auto fused = passes::LoopFusion().Run(module->get()); !fused.ok()) {
    return fused.status();
  }
  if (count != nullptr && counted != nullptr) {
    *count = 0;
    for (const auto& c : (*module)->computations()) *count += counted(*c) ? 1 : 0;
  }
  HostDevice device("cpu", 0, int64_t{1} << 30, 64);
  auto exe = CompileProgram(device.kind(), **module, {});
  if (!exe.ok()) return exe.status();
  return ExecuteOn(**exe, device, args);
}

template <typename T>
ir::Literal Lit(ir::ElementType type, std::vector<int64_t> dims,
                std::vector<T> values) {
  return ir::Literal::FromVector<T>(type, std::move(dims), values);
}

inline ir::Literal F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Lit<float>(ir::ElementType::kF32, std::move(dims), std::move(v));
}
inline ir::Literal S32(std::vector<int64_t> dims, std::vector<int64_t> v) {
  return Lit<int64_t>(ir::ElementType::kS32, std::move(dims), std::move(v));
}

// All elements as doubles, for compact expectations.
inline std::vector<double> Values(const ir::Literal& lit) {
  std::vector<double> out;
  for (int64_t i = 0; i < lit.element_count(); ++i) out.push_back(lit.GetAsDouble(i));
  return out;
}

// Random values of `shape` (tuples element by element): floats in [-2, 2],
// integers in [-9, 9] (or [0, 9] when unsigned), preds either way.
inline ir::Literal RandomLiteral(const ir::Shape& shape, std::mt19937_64& rng) {
  if (shape.IsTuple()) {
    std::vector<ir::Literal> elements;
    for (const ir::Shape& s : shape.tuple_shapes()) elements.push_back(RandomLiteral(s, rng));
    return ir::Literal::Tuple(std::move(elements));
  }
  ir::Literal lit(shape);
  std::uniform_real_distribution<double> real(-2, 2);
  std::uniform_int_distribution<int> small(IsUnsignedIntType(shape.type()) ? 0 : -9, 9);
  for (int64_t i = 0; i < lit.element_count(); ++i) {
    if (IsFloatType(shape.type())) lit.SetFromDouble(i, real(rng));
    else if (shape.type() == ElementType::kPred) lit.SetFromDouble(i, small(rng) > 0);
    else lit.SetFromDouble(i, small(rng));
  }
  return lit;
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_TEST_UTIL_H_
