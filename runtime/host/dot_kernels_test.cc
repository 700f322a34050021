// Dot kernels: a dot fusion's GEMM that accumulates into its addend, and
// a dot bias fusion's product with its bias and relu, against the product
// and the add apart.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/passes/cpu_pipeline.h"
#include "compiler/passes/dot_bias_fusion.h"
#include "compiler/passes/dot_fusion.h"
#include "gtest/gtest.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_device.h"
#include "runtime/host/kernel.h"
#include "runtime/host/test_util.h"

namespace kiln::host {
namespace {

// SGD with momentum on a [K, N] weight: v' = beta v + x^T g, w' = w - lr v'.
std::string MomentumModule(int64_t batch, int64_t k, int64_t n,
                           const char* beta) {
  return absl::Substitute(R"(
HloModule m
ENTRY main {
  x = f32[$0,$1] parameter(0)
  g = f32[$0,$2] parameter(1)
  v = f32[$1,$2] parameter(2)
  w = f32[$1,$2] parameter(3)
  d = f32[$1,$2] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  beta = f32[] constant($3)
  b = f32[$1,$2] broadcast(beta), dimensions={}
  scaled = f32[$1,$2] multiply(v, b)
  v2 = f32[$1,$2] add(scaled, d)
  lr = f32[] constant(0.01)
  lb = f32[$1,$2] broadcast(lr), dimensions={}
  step = f32[$1,$2] multiply(v2, lb)
  w2 = f32[$1,$2] subtract(w, step)
  ROOT t = (f32[$1,$2], f32[$1,$2]) tuple(v2, w2)
}
)",
                          batch, k, n, beta);
}

// Runs `text` after the CPU pipeline (`fuse_dots`) or after loop fusion
// alone, on `args`; counts the dot fusions the pipeline made.
absl::StatusOr<ir::Literal> RunModule(const std::string& text,
                                      const std::vector<ir::Literal>& args,
                                      bool fuse_dots,
                                      int* dot_fusions = nullptr) {
  return RunAfterPasses(text, args, fuse_dots, passes::IsDotFusion, dot_fusions);
}

TEST(DotFusionKernelTest, TheMomentumUpdateMatchesTheProductAndAddApart) {
  std::mt19937_64 rng(7);
  // Sizes below and within the timed range (2^20 to 2^27 multiply-adds:
  // 128 x 128 x 128 is timed on both libraries), and a negative momentum.
  for (const auto& [batch, k, n, beta] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, const char*>>{
           {16, 24, 8, "0.9"},
           {128, 128, 128, "0.9"},
           {33, 17, 5, "1"},
           {8, 40, 12, "-1.5"}}) {
    const std::string text = MomentumModule(batch, k, n, beta);
    std::vector<ir::Literal> args = {
        RandomLiteral(ir::Shape(ir::ElementType::kF32, {batch, k}), rng),
        RandomLiteral(ir::Shape(ir::ElementType::kF32, {batch, n}), rng),
        RandomLiteral(ir::Shape(ir::ElementType::kF32, {k, n}), rng),
        RandomLiteral(ir::Shape(ir::ElementType::kF32, {k, n}), rng)};
    int fusions = 0;
    auto fused = RunModule(text, args, /*fuse_dots=*/true, &fusions);
    auto apart = RunModule(text, args, /*fuse_dots=*/false);
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_TRUE(apart.ok()) << apart.status();
    EXPECT_EQ(fusions, 1) << text;
    for (int e = 0; e < 2; ++e) {
      const std::vector<double> got = Values(fused->tuple_elements()[e]);
      const std::vector<double> want = Values(apart->tuple_elements()[e]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        // The sum of `batch` products of values in [-2, 2], rounded once
        // together with the addend instead of apart.
        ASSERT_NEAR(got[i], want[i],
                    1e-5 * (1 + std::fabs(want[i])) * std::sqrt(batch))
            << "element " << e << " at " << i << " beta " << beta;
      }
    }
  }
}

// A zero momentum is not a GEMM's beta (with beta 0 it would not read the
// velocity, where 0 times a NaN or an infinity is NaN): the scaled
// velocity is computed, and the GEMM adds into it.
TEST(DotFusionKernelTest, AZeroScaleKeepsTheNaNsOfTheAddend) {
  const std::string text = MomentumModule(4, 3, 2, "0");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<ir::Literal> args = {F32({4, 3}, std::vector<float>(12, 1.0f)),
                                   F32({4, 2}, std::vector<float>(8, 1.0f)),
                                   F32({3, 2}, {nan, inf, 1, 2, 3, 4}),
                                   F32({3, 2}, std::vector<float>(6, 0.0f))};
  int fusions = -1;
  auto out = RunModule(text, args, /*fuse_dots=*/true, &fusions);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(fusions, 1);
  const std::vector<double> v = Values(out->tuple_elements()[0]);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 4.0);
}

// The kernel, called as a program calls it: the addend is updated in place
// when nothing else holds it, and copied when the caller still does.
TEST(DotFusionKernelTest, TheAddendIsUpdatedInPlaceOnlyWhenNothingElseHoldsIt) {
  auto module = ir::ParseModule(MomentumModule(4, 3, 2, "0.5"));
  ASSERT_TRUE(module.ok()) << module.status();
  passes::DotFusion pass;
  ASSERT_TRUE(pass.Run(module->get()).ok());
  const ir::Instruction* call = nullptr;
  for (const auto& instr : (*module)->entry()->instructions()) {
    if (instr->opcode() == ir::Opcode::kCall) call = instr.get();
  }
  ASSERT_NE(call, nullptr);
  absl::StatusOr<Kernel> kernel = MakeDotFusionKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  auto make = [](std::vector<int64_t> dims, float first) {
    auto b = Buffer::Allocate(ir::Shape(ir::ElementType::kF32, std::move(dims)),
                              nullptr);
    float* v = (*b)->as<float>();
    for (int64_t i = 0; i < (*b)->shape().ElementCount(); ++i) v[i] = first + i;
    return *b;
  };
  // x [4,3] (contracted over 4), g [4,2]: d[i][j] = sum_b x[b][i] g[b][j].
  const BufferPtr x = make({4, 3}, 1), g = make({4, 2}, -2);
  std::vector<double> want(6);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int b = 0; b < 4; ++b) s += (1.0 + b * 3 + i) * (-2.0 + b * 2 + j);
      want[i * 2 + j] = s + 0.5 * (10.0 + i * 2 + j);
    }
  }
  ExecState st;
  {
    std::vector<BufferPtr> ops = {x, g, make({3, 2}, 10)};
    const float* addend = ops[2]->as<float>();
    auto out = (*kernel)(st, ops);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)->as<float>(), addend) << "not updated in place";
    for (int i = 0; i < 6; ++i)
      EXPECT_FLOAT_EQ((*out)->as<float>()[i], want[i]) << i;
  }
  {
    const BufferPtr held = make({3, 2}, 10);
    std::vector<BufferPtr> ops = {x, g, held};
    auto out = (*kernel)(st, ops);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NE((*out)->as<float>(), held->as<float>());
    for (int i = 0; i < 6; ++i) {
      EXPECT_FLOAT_EQ((*out)->as<float>()[i], want[i]) << i;
      EXPECT_EQ(held->as<float>()[i], 10.0f + i)
          << "the caller's addend changed";
    }
  }
  // Not a dot fusion: a clear error.
  const ir::Instruction* root = (*module)->entry()->root();
  absl::StatusOr<Kernel> refused = MakeDotFusionKernel(*root);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

// A dense layer, relu(dot(x, w) + bias), `x` stored transposed when
// `transposed`; with `pre_out` the sum is an output too (the relu then
// stays outside the call).
std::string DenseModule(int64_t batch, int64_t k, int64_t n, bool transposed, bool pre_out) {
  return absl::Substitute(R"(
HloModule m
ENTRY main {
  x = f32[$0] parameter(0)
  w = f32[$2,$3] parameter(1)
  bias = f32[$3] parameter(2)
  d = f32[$1,$3] dot(x, w), lhs_contracting_dims={$4}, rhs_contracting_dims={0}
  b = f32[$1,$3] broadcast(bias), dimensions={1}
  pre = f32[$1,$3] add(d, b)
  zero = f32[] constant(0)
  z = f32[$1,$3] broadcast(zero), dimensions={}
  r = f32[$1,$3] maximum(pre, z)
  ROOT t = (f32[$1,$3], f32[$1,$3]) tuple($5, r)
}
)",
                          transposed ? absl::StrCat(k, ",", batch) : absl::StrCat(batch, ",", k),
                          batch, k, n, transposed ? 0 : 1, pre_out ? "pre" : "r");
}

// The layer's call (the bias, and the relu where it joins) against the
// product, add and maximum apart; a NaN in the bias stays NaN and the
// relu's zeros are +0, as the maximum's.
TEST(DotBiasFusionKernelTest, TheLayerMatchesTheProductAddAndMaximumApart) {
  std::mt19937_64 rng(11);
  for (const bool pre_out : {false, true}) {
    for (const auto& [batch, k, n, transposed] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
             {16, 24, 8, false}, {128, 128, 128, false}, {33, 17, 5, true}, {1, 7, 3, false}}) {
      const std::string text = DenseModule(batch, k, n, transposed, pre_out);
      ir::Literal x = RandomLiteral(
          ir::Shape(ir::ElementType::kF32, transposed ? std::vector<int64_t>{k, batch}
                                                      : std::vector<int64_t>{batch, k}),
          rng);
      std::vector<ir::Literal> args = {
          std::move(x), RandomLiteral(ir::Shape(ir::ElementType::kF32, {k, n}), rng),
          RandomLiteral(ir::Shape(ir::ElementType::kF32, {n}), rng)};
      args[2].SetFromDouble(0, std::nan(""));
      int fusions = 0;
      auto fused = RunAfterPasses(text, args, /*full_pipeline=*/true, passes::IsDotBiasFusion,
                                  &fusions);
      auto apart = RunAfterPasses(text, args, /*full_pipeline=*/false);
      ASSERT_TRUE(fused.ok()) << fused.status();
      ASSERT_TRUE(apart.ok()) << apart.status();
      EXPECT_EQ(fusions, 1) << text;
      for (int e = 0; e < 2; ++e) {
        const std::vector<double> got = Values(fused->tuple_elements()[e]);
        const std::vector<double> want = Values(apart->tuple_elements()[e]);
        ASSERT_EQ(got.size(), want.size());
        int nans = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << "element " << e << " at " << i << "\n" << text;
            ++nans;
            continue;
          }
          // The same product (perhaps by the other library), the same sum.
          ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])) * std::sqrt(k))
              << "element " << e << " at " << i << "\n" << text;
          if (e == 1 && got[i] == 0) ASSERT_FALSE(std::signbit(got[i])) << i;
        }
        EXPECT_EQ(nans, batch) << "element " << e;
      }
    }
  }
}

TEST(DotBiasFusionKernelTest, ACallOfAnythingElseIsRefused) {
  auto module = ir::ParseModule(MomentumModule(4, 3, 2, "0.5"));
  ASSERT_TRUE(module.ok()) << module.status();
  passes::DotFusion pass;
  ASSERT_TRUE(pass.Run(module->get()).ok());
  for (const auto& instr : (*module)->entry()->instructions()) {
    if (instr->opcode() != ir::Opcode::kCall) continue;
    absl::StatusOr<Kernel> refused = MakeDotBiasFusionKernel(*instr);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<Kernel> refused = MakeDotBiasFusionKernel(*(*module)->entry()->root());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::host
