// The CPU backend compiles through the pass pipeline: every corpus module
// still computes what NumPy computed, and exactly what the host interpreter
// computes on the module as given; the caller's module and the program's
// signature stay as they were.
#include "runtime/cpu/cpu_backend.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"
#include "runtime/host/artifact.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_buffer.h"
#include "runtime/host/host_device.h"
#include "runtime/host/test_util.h"
#include "tests/hlo_corpus.h"

namespace kiln::cpu {
namespace {

using host::RandomLiteral;

std::unique_ptr<ir::Module> Parse(absl::string_view text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  absl::Status verified = ir::Verify(**module);
  EXPECT_TRUE(verified.ok()) << verified;
  return verified.ok() ? *std::move(module) : nullptr;
}

// Runs `executable` on `device` with `inputs`.
absl::StatusOr<ir::Literal> Execute(runtime::Executable& executable,
                                    runtime::Device& device,
                                    const std::vector<ir::Literal>& inputs) {
  std::vector<runtime::BufferPtr> args;
  for (const ir::Literal& in : inputs) {
    absl::StatusOr<runtime::BufferPtr> b = device.TransferToDevice(in);
    if (!b.ok()) return b.status();
    args.push_back(*std::move(b));
  }
  runtime::ExecuteOptions options;
  options.infeed_timeout = absl::Seconds(1);
  absl::StatusOr<runtime::BufferPtr> out =
      executable.Execute(device, args, options);
  if (!out.ok()) return out.status();
  return host::HostBuffer::Cast(*out)->ToLiteral();
}

// Tuple results flattened depth-first, as `kiln run` writes them.
void Flatten(const ir::Literal& lit, std::vector<ir::Literal>* out) {
  if (!lit.shape().IsTuple()) {
    out->push_back(lit);
    return;
  }
  for (const ir::Literal& e : lit.tuple_elements()) Flatten(e, out);
}

// Expects the same shape and the same bytes, naming the first element that
// differs.
void ExpectIdentical(const ir::Literal& got, const ir::Literal& want,
                     const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (got.bytes() == want.bytes()) return;
  const int size = ir::ElementTypeSize(want.shape().type());
  for (int64_t i = 0; i < want.element_count(); ++i) {
    if (std::memcmp(got.bytes().data() + i * size,
                    want.bytes().data() + i * size, size) != 0) {
      ADD_FAILURE() << what << " element " << i << ": "
                    << ir::FormatElement(got, i) << " vs "
                    << ir::FormatElement(want, i);
      return;
    }
  }
}

// Whether `module` holds a convolution: the host picks a convolution's
// kernel by timing candidates at compile time, so two compiles of one
// module may sum in different orders.
// Whether the optimized module may round differently from the plain one:
// convolutions pick their algorithm per shape, and a dot that reads a
// transpose runs as a GEMM of the untransposed operand once the simplifier
// folds the transpose into its dimension numbers, summing in another order.
bool MayRoundDifferently(const ir::Module& module) {
  for (const auto& c : module.computations()) {
    for (const auto& instr : c->instructions()) {
      if (instr->opcode() == ir::Opcode::kConvolution) return true;
      if (instr->opcode() == ir::Opcode::kDot) {
        for (const ir::Instruction* o : instr->operands()) {
          if (o->opcode() == ir::Opcode::kTranspose) return true;
        }
      }
    }
  }
  return false;
}

// The value as NumPy holds it (bf16 widened to float32, as `kiln run`
// writes it).
ir::Literal AsNumpy(const ir::Literal& value) {
  absl::StatusOr<std::string> bytes = client::EncodeNpy(value);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<ir::Literal> back = client::ParseNpy(bytes.ok() ? *bytes : "");
  EXPECT_TRUE(back.ok()) << back.status();
  return back.ok() ? *std::move(back) : ir::Literal();
}

class CpuCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuCorpusTest, MatchesNumpyAndTheUnoptimizedModule) {
  const std::string name = GetParam();
  std::ifstream in(kCorpus / (name + ".hlo"));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  std::unique_ptr<ir::Module> module = Parse(text);
  ASSERT_NE(module, nullptr);
  const std::vector<ir::Shape> params = module->entry()->ParameterShapes();
  std::vector<ir::Literal> inputs;
  for (int i = 0; fs::exists(kCorpus / name / absl::StrCat("in_", i, ".npy"));
       ++i) {
    auto npy = client::ReadNpyFile(
        (kCorpus / name / absl::StrCat("in_", i, ".npy")).string());
    ASSERT_TRUE(npy.ok()) << npy.status();
    ASSERT_LT(i, static_cast<int>(params.size()));
    auto lit = client::AdaptToParameter(*npy, params[i]);
    ASSERT_TRUE(lit.ok()) << lit.status();
    inputs.push_back(*std::move(lit));
  }

  CpuBackend backend;
  auto optimized = backend.compiler().Compile(*module, {});
  ASSERT_TRUE(optimized.ok()) << optimized.status();
  auto got = Execute(**optimized, *backend.device(0), inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*optimized)->parameter_shapes(), params);
  EXPECT_EQ((*optimized)->result_shape(), module->entry()->root()->shape());

  // The same module straight into the interpreter, on a device of its own
  // (its feed queues apart), with the same rng seed.
  host::HostDevice device("cpu", 0, int64_t{8} << 30, 64);
  auto plain = host::CompileProgram("cpu", *module, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto want = Execute(**plain, device, inputs);
  ASSERT_TRUE(want.ok()) << want.status();

  std::vector<ir::Literal> got_flat, want_flat;
  Flatten(*got, &got_flat);
  Flatten(*want, &want_flat);
  ASSERT_EQ(got_flat.size(), want_flat.size());
  const bool exact = !MayRoundDifferently(*module);
  for (size_t i = 0; i < got_flat.size(); ++i) {
    const std::string what = absl::StrCat(name, " output ", i);
    if (exact) {
      ExpectIdentical(got_flat[i], want_flat[i],
                      absl::StrCat(what, " against the unoptimized module"));
    } else {
      ExpectClose(got_flat[i], want_flat[i], ToleranceFor(name),
                  absl::StrCat(what, " against the unoptimized module"));
    }
    const fs::path expected =
        kCorpus / name / absl::StrCat("expected_", i, ".npy");
    ASSERT_TRUE(fs::exists(expected)) << expected;
    auto numpy = client::ReadNpyFile(expected.string());
    ASSERT_TRUE(numpy.ok()) << numpy.status();
    ExpectClose(AsNumpy(got_flat[i]), *numpy, ToleranceFor(name), what);
  }
}

// An executable keeps nothing from one execution to the next: run again on
// new inputs, it computes bit for bit what the unoptimized module computes
// on them (the interpreter's buffers are reused between executions, so a
// block handed out twice would show here).
TEST_P(CpuCorpusTest, RepeatedExecutionsMatchTheUnoptimizedModule) {
  const std::string name = GetParam();
  std::ifstream in(kCorpus / (name + ".hlo"));
  std::unique_ptr<ir::Module> module =
      Parse(std::string(std::istreambuf_iterator<char>(in), {}));
  ASSERT_NE(module, nullptr);
  if (MayRoundDifferently(*module)) GTEST_SKIP() << "kernel choice may change the summation order";
  CpuBackend backend;
  auto optimized = backend.compiler().Compile(*module, {});
  ASSERT_TRUE(optimized.ok()) << optimized.status();
  auto plain = host::CompileProgram("cpu", *module, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  host::HostDevice device("cpu", 0, int64_t{8} << 30, 64);
  std::mt19937_64 rng(3);
  for (int run = 0; run < 3; ++run) {
    std::vector<ir::Literal> inputs;
    for (const ir::Shape& s : module->entry()->ParameterShapes()) {
      inputs.push_back(RandomLiteral(s, rng));
    }
    auto got = Execute(**optimized, *backend.device(0), inputs);
    auto want = Execute(**plain, device, inputs);
    if (!want.ok()) {  // inputs this module refuses (an infeed, an index)
      EXPECT_EQ(got.status().code(), want.status().code()) << got.status();
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<ir::Literal> got_flat, want_flat;
    Flatten(*got, &got_flat);
    Flatten(*want, &want_flat);
    ASSERT_EQ(got_flat.size(), want_flat.size());
    for (size_t i = 0; i < got_flat.size(); ++i) {
      ExpectIdentical(got_flat[i], want_flat[i], absl::StrCat(name, " run ", run, " output ", i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CpuCorpusTest,
                         ::testing::ValuesIn(CaseNames()),
                         [](const auto& info) { return info.param; });

TEST(CpuBackendTest, CompileLeavesTheCallersModuleAsItWas) {
  std::unique_ptr<ir::Module> module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  one = f32[] constant(1)
  ones = f32[4] broadcast(one), dimensions={}
  dead = f32[4] exponential(x)
  ROOT r = f32[4] multiply(x, ones)
}
)");
  ASSERT_NE(module, nullptr);
  const std::string before = ir::PrintModule(*module);
  CpuBackend backend;
  auto exe = backend.compiler().Compile(*module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(ir::PrintModule(*module), before);
  // The root became the parameter itself; the signature is the module's.
  EXPECT_EQ((*exe)->parameter_shapes(), module->entry()->ParameterShapes());
  EXPECT_EQ((*exe)->result_shape(), module->entry()->root()->shape());
  auto out = Execute(**exe, *backend.device(0),
                     {ir::Literal::FromVector<float>(ir::ElementType::kF32, {4},
                                                     {1, -0.0f, 3, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->ToText(), "{1, -0, 3, 4}");
}

// A compile keeps the optimized module and the kernels it chose by timing;
// loading that artifact builds the same program without the pipeline and
// without timing, and computes the same values bit for bit.
TEST(CpuBackendTest, ArtifactsLoadIntoTheSameProgram) {
  std::unique_ptr<ir::Module> module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4,9,9,2] parameter(0)
  k = f32[3,3,2,3] parameter(1)
  c = f32[4,7,7,3] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f
  two = f32[] constant(2)
  t = f32[4,7,7,3] broadcast(two), dimensions={}
  ROOT r = f32[4,7,7,3] multiply(c, t)
}
)");
  ASSERT_NE(module, nullptr);
  CpuBackend backend;
  auto compiled = backend.compiler().CompileForCache(*module, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_FALSE(compiled->artifact.empty());
  auto decoded = host::DecodeArtifact(compiled->artifact);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  // The convolution had more than one kernel to choose from.
  EXPECT_EQ(decoded->tuning.size(), 1u) << decoded->tuning.Serialize();
  auto loaded = backend.compiler().Load(compiled->artifact, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->parameter_shapes(), module->entry()->ParameterShapes());
  std::vector<float> x(4 * 9 * 9 * 2), k(3 * 3 * 2 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 17);
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  const std::vector<ir::Literal> inputs = {
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {4, 9, 9, 2}, x),
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {3, 3, 2, 3}, k)};
  auto a = Execute(*compiled->executable, *backend.device(0), inputs);
  auto b = Execute(**loaded, *backend.device(0), inputs);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ToText(), b->ToText());

  for (const std::string& bad : {std::string("junk"), compiled->artifact.substr(0, 40),
                                 std::string("kiln-host-artifact 1\n99999\nxx")}) {
    auto refused = backend.compiler().Load(bad, {});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  }
}

// What the pipeline removes is never run: a dead instruction larger than
// the device's memory fails the module as given and not the compiled one.
TEST(CpuBackendTest, DeadInstructionsDoNotRun) {
  std::unique_ptr<ir::Module> module = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  huge = f32[1048576,4] broadcast(x), dimensions={1}
  ROOT r = f32[4] negate(x)
}
)");
  ASSERT_NE(module, nullptr);
  CpuBackendOptions options;
  options.memory_bytes = int64_t{1} << 20;
  CpuBackend backend(options);
  const std::vector<ir::Literal> inputs = {
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {4}, {1, 2, 3, 4})};

  auto plain = host::CompileProgram("cpu", *module, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto failed = Execute(**plain, *backend.device(0), inputs);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted)
      << failed.status();

  auto exe = backend.compiler().Compile(*module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto out = Execute(**exe, *backend.device(0), inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->ToText(), "{-1, -2, -3, -4}");
}

}  // namespace
}  // namespace kiln::cpu
