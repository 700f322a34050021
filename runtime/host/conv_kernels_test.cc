// Convolution kernels: a convolution fusion's kernel (the convolution and
// its bias in one), against the convolution and the add apart.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/substitute.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/passes/convolution_fusion.h"
#include "compiler/passes/cpu_pipeline.h"
#include "gtest/gtest.h"
#include "runtime/host/conv_kernels.h"
#include "runtime/host/dnnl_conv.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_device.h"
#include "runtime/host/kernel.h"
#include "runtime/host/test_util.h"
#include "runtime/host/tuning.h"

namespace kiln::host {
namespace {

// relu(convolution(x, k) + bias), the pre-activation an output too (as a
// training step's relu gradient reads it), or with `relu_joins` the relu
// alone (its one reader: the relu joins the convolution).
std::string Layer(const std::string& x, const std::string& k, const std::string& out,
                  int64_t features, int feature_dim, const std::string& attrs,
                  bool relu_joins = false) {
  return absl::Substitute(R"(
HloModule m
ENTRY main {
  x = $0 parameter(0)
  k = $1 parameter(1)
  bias = f32[$3] parameter(2)
  c = $2 convolution(x, k), $5
  b = $2 broadcast(bias), dimensions={$4}
  pre = $2 add(c, b)
  zero = f32[] constant(0)
  z = $2 broadcast(zero), dimensions={}
  r = $2 maximum(pre, z)
  ROOT t = ($2, $2) tuple($6, r)
}
)",
                          x, k, out, features, feature_dim, attrs, relu_joins ? "r" : "pre");
}

// Runs `text` after the CPU pipeline (`fuse`) or after loop fusion alone,
// on `args`; counts the convolution fusions the pipeline made.
absl::StatusOr<ir::Literal> RunModule(const std::string& text, const std::vector<ir::Literal>& args,
                                      bool fuse, int* fusions = nullptr) {
  return RunAfterPasses(text, args, fuse, passes::IsConvolutionFusion, fusions);
}

struct LayerCase {
  std::string x, k, out;
  int64_t features;
  int feature_dim;
  std::string attrs;
};

std::vector<LayerCase> LayerCases() {
  return {
           {"f32[8,28,28,1]", "f32[5,5,1,6]", "f32[8,28,28,6]", 6, 3,
            "window={size=5x5 pad=2_2x2_2}, dim_labels=b01f_01io->b01f"},
           {"f32[8,14,14,6]", "f32[5,5,6,16]", "f32[8,10,10,16]", 16, 3,
            "window={size=5x5}, dim_labels=b01f_01io->b01f"},
           {"f32[2,3,11,10]", "f32[6,3,3,2]", "f32[2,6,5,5]", 6, 1,
            "window={size=3x2 stride=2x2 pad=1_0x0_1}, dim_labels=bf01_oi01->bf01"},
           {"f32[2,8,8,6]", "f32[3,3,2,9]", "f32[2,6,6,9]", 9, 3,
            "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=3"},
      // Large enough to split the bias's pass over the threads, channels
      // last and first.
      {"f32[16,28,28,1]", "f32[5,5,1,6]", "f32[16,28,28,6]", 6, 3,
       "window={size=5x5 pad=2_2x2_2}, dim_labels=b01f_01io->b01f"},
      {"f32[4,3,66,66]", "f32[8,3,3,3]", "f32[4,8,64,64]", 8, 1,
       "window={size=3x3}, dim_labels=bf01_oi01->bf01"},
  };
}

// A call of a convolution fusion, as a client may send one; with `relu`,
// one that takes the relu of the sum.
std::string FusedCall(const LayerCase& c, bool relu = false) {
  return absl::Substitute(R"(
HloModule m
fused_convolution {
  p0 = $0 parameter(0)
  p1 = $1 parameter(1)
  p2 = f32[$3] parameter(2)
  c = $2 convolution(p0, p1), $5
  b = $2 broadcast(p2), dimensions={$4}
  $6
}
ENTRY main {
  x = $0 parameter(0)
  k = $1 parameter(1)
  bias = f32[$3] parameter(2)
  ROOT f = $2 call(x, k, bias), to_apply=fused_convolution
}
)",
                          c.x, c.k, c.out, c.features, c.feature_dim, c.attrs,
                          relu ? absl::Substitute(R"(s = $0 add(c, b)
  zero = f32[] constant(0)
  z = $0 broadcast(zero), dimensions={}
  ROOT r = $0 maximum(s, z))",
                                                  c.out)
                               : absl::Substitute("ROOT s = $0 add(c, b)", c.out));
}

// LeNet-5's two layers (one input channel, padded; six to sixteen
// channels), channels first with a stride, a grouped convolution and the
// cases above: the fused call gives the convolution and the add's result.
TEST(ConvolutionFusionKernelTest, TheBiasedConvolutionMatchesTheConvolutionAndAddApart) {
  std::mt19937_64 rng(3);
  for (const bool relu_joins : {false, true})
  for (const LayerCase& c : LayerCases()) {
    const std::string text =
        Layer(c.x, c.k, c.out, c.features, c.feature_dim, c.attrs, relu_joins);
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.status() << text;
    std::vector<ir::Literal> args;
    for (int i = 0; i < 3; ++i) {
      args.push_back(RandomLiteral((*module)->entry()->parameter(i)->shape(), rng));
    }
    int fusions = 0;
    auto fused = RunModule(text, args, /*fuse=*/true, &fusions);
    auto apart = RunModule(text, args, /*fuse=*/false);
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_TRUE(apart.ok()) << apart.status();
    EXPECT_EQ(fusions, 1) << text;
    for (int e = 0; e < 2; ++e) {
      const std::vector<double> got = Values(fused->tuple_elements()[e]);
      const std::vector<double> want = Values(apart->tuple_elements()[e]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        // Sums of up to 150 products of values in [-2, 2], in another
        // order and rounded with the bias.
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << "element " << e << " at " << i << "\n" << text;
      }
    }
  }
}

// Every kernel the call chooses from computes the convolution plus the
// bias: oneDNN's with the bias where it has one, each other kernel then
// the bias's pass.
TEST(ConvolutionFusionKernelTest, EveryCandidateAddsTheBias) {
  std::mt19937_64 rng(5);
  std::vector<LayerCase> cases = LayerCases();
  // A dilated input (as a data gradient reads it), which the pass leaves
  // alone but a client may send: no oneDNN forward convolution, so only
  // kernels followed by the bias's pass.
  cases.push_back({"f32[2,5,5,4]", "f32[3,3,3,4]", "f32[2,9,9,3]", 3, 3,
                   "window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f"});
  for (const bool relu : {false, true})
  for (const LayerCase& c : cases) {
    const std::string text = Layer(c.x, c.k, c.out, c.features, c.feature_dim, c.attrs);
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.status() << text;
    std::vector<ir::Literal> args;
    for (int i = 0; i < 3; ++i) {
      args.push_back(RandomLiteral((*module)->entry()->parameter(i)->shape(), rng));
    }
    // A NaN bias: the relu keeps the NaN, as the maximum does.
    args[2].SetFromDouble(0, std::nan(""));
    auto apart = RunModule(text, args, /*fuse=*/false);
    ASSERT_TRUE(apart.ok()) << apart.status();
    const std::vector<double> want = Values(apart->tuple_elements()[relu ? 1 : 0]);
    auto fused = ir::ParseModule(FusedCall(c, relu));
    ASSERT_TRUE(fused.ok()) << fused.status();
    const ir::Instruction& call = *(*fused)->entry()->root();
    auto candidates = ConvolutionFusionCandidates(call);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    std::vector<BufferPtr> ops;
    for (const ir::Literal& a : args) {
      auto b = Buffer::FromLiteral(a, nullptr);
      ASSERT_TRUE(b.ok());
      ops.push_back(*b);
    }
    int with_bias = 0, then_bias = 0;
    ExecState st;
    for (const NamedKernel& k : *candidates) {
      with_bias += k.name.rfind("onednn forward with bias", 0) == 0;
      then_bias += k.name.find(", then the bias") != std::string::npos;
      EXPECT_EQ(k.name.find("relu") != std::string::npos, relu) << k.name;
      auto got = k.kernel(st, ops);
      ASSERT_TRUE(got.ok()) << k.name << ": " << got.status();
      const std::vector<double> v = Values((*got)->ToLiteral());
      ASSERT_EQ(v.size(), want.size());
      int nans = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(v[i])) << k.name << " at " << i;
          ++nans;
          continue;
        }
        ASSERT_NEAR(v[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << k.name << " at " << i;
        // The relu's zeros are +0, as the maximum's.
        if (relu && v[i] == 0) {
          ASSERT_FALSE(std::signbit(v[i])) << k.name << " at " << i;
        }
      }
      EXPECT_GT(nans, 0) << k.name;
    }
    // oneDNN runs every one of these but the dilated input forward; our
    // own kernels run them all.
    EXPECT_EQ(with_bias > 0, c.attrs.find("lhs_dilate") == std::string::npos) << text;
    EXPECT_GT(then_bias, 0) << text;
  }
}

// The kernel is timed among oneDNN's convolutions with the bias and every
// kernel of the convolution alone followed by the bias, and the choice is
// recorded under the call's name.
TEST(ConvolutionFusionKernelTest, TheChoiceIsTimedAndRecorded) {
  const std::string text =
      Layer("f32[4,12,12,3]", "f32[3,3,3,8]", "f32[4,12,12,8]", 8, 3,
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f");
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  std::unique_ptr<passes::Pipeline> cpu = passes::CpuPipeline(/*verify=*/true);
  ASSERT_TRUE(cpu->Run(module->get()).ok());
  const ir::Instruction* call = nullptr;
  for (const auto& instr : (*module)->entry()->instructions()) {
    if (instr->opcode() == ir::Opcode::kCall && passes::IsConvolutionFusion(*instr->called(0))) {
      call = instr.get();
    }
  }
  ASSERT_NE(call, nullptr) << ir::PrintModule(**module);
  TuningRecord record;
  {
    TuningScope scope(&record);
    ASSERT_TRUE(MakeConvolutionFusionKernel(*call).ok());
  }
  std::optional<std::string> chosen = record.Find(*call);
  ASSERT_TRUE(chosen.has_value());
  EXPECT_TRUE(chosen->rfind("onednn forward with bias", 0) == 0 ||
              chosen->find(", then the bias") != std::string::npos)
      << *chosen;
}

// A call of anything else is refused with a clear error.
TEST(ConvolutionFusionKernelTest, ACallOfAnythingElseIsRefused) {
  auto module = ir::ParseModule(R"(
HloModule m
other {
  p0 = f32[2,8,8,1] parameter(0)
  p1 = f32[3,3,1,4] parameter(1)
  p2 = f32[4] parameter(2)
  c = f32[2,8,8,4] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,8,8,4] broadcast(p2), dimensions={3}
  ROOT r = f32[2,8,8,4] subtract(c, b)
}
ENTRY main {
  x = f32[2,8,8,1] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  bias = f32[4] parameter(2)
  ROOT f = f32[2,8,8,4] call(x, k, bias), to_apply=other
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<Kernel> refused = MakeConvolutionFusionKernel(*(*module)->entry()->root());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("does not call a convolution fusion"),
            std::string::npos)
      << refused.status();
  // Compiled, the call runs its callee's instructions as steps.
  HostDevice device("cpu", 0, int64_t{1} << 30, 64);
  auto exe = CompileProgram(device.kind(), **module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto out = ExecuteOn(**exe, device,
                       {F32({2, 8, 8, 1}, std::vector<float>(128, 0.0f)),
                        F32({3, 3, 1, 4}, std::vector<float>(36, 1.0f)),
                        F32({4}, {1, 2, 3, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values(*out)[0], -1.0);
  EXPECT_EQ(Values(*out)[3], -4.0);
}

// Transposes around a convolution (convolution-layout folds them into its
// dimension numbers): strides, padding, dilation and feature groups, every
// operand and the result transposed; the same values as the module run
// with its transposes.
TEST(ConvolutionLayoutKernelTest, TheFoldedConvolutionComputesTheSameValues) {
  const std::string text = R"(
HloModule m
ENTRY main {
  x = f32[2,4,9,7] parameter(0)
  k = f32[6,2,3,2] parameter(1)
  xt = f32[2,9,7,4] transpose(x), dimensions={0,2,3,1}
  kt = f32[3,2,2,6] transpose(k), dimensions={2,3,1,0}
  c = f32[2,5,3,6] convolution(xt, kt), window={size=3x2 stride=2x2 pad=1_1x0_1 rhs_dilate=1x2}, dim_labels=b01f_01io->b01f, feature_group_count=2
  ROOT t = f32[6,2,3,5] transpose(c), dimensions={3,0,2,1}
}
)";
  std::mt19937_64 rng(13);
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<ir::Literal> args;
  for (const ir::Instruction* p : (*module)->entry()->parameters()) {
    args.push_back(RandomLiteral(p->shape(), rng));
  }
  // The CPU pipeline leaves no transpose.
  std::unique_ptr<passes::Pipeline> cpu = passes::CpuPipeline(/*verify=*/true);
  ASSERT_TRUE(cpu->Run(module->get()).ok());
  for (const auto& instr : (*module)->entry()->instructions()) {
    EXPECT_NE(instr->opcode(), ir::Opcode::kTranspose) << ir::PrintModule(**module);
  }
  auto folded = RunAfterPasses(text, args, /*full_pipeline=*/true);
  auto apart = RunAfterPasses(text, args, /*full_pipeline=*/false);
  ASSERT_TRUE(folded.ok()) << folded.status();
  ASSERT_TRUE(apart.ok()) << apart.status();
  const std::vector<double> got = Values(*folded), want = Values(*apart);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
  }
}

}  // namespace
}  // namespace kiln::host
