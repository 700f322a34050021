// The scatter convolution gives what the im2col kernel gives, over kernel
// layouts, paddings (none, partial, beyond the kernel's reach), channel
// counts and kernel rows of several vectors; it refuses what it does not
// cover; infinities reach only the outputs they should.
#include <cmath>
#include <random>
#include <string>

#include "base/status_macros.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"
#include "runtime/compute_threads.h"
#include "runtime/host/cancel.h"
#include "runtime/host/conv_kernels.h"

namespace kiln::host {
namespace {

struct Case {
  std::string name, lhs, rhs, out, attrs;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

absl::StatusOr<std::unique_ptr<ir::Module>> Parse(const std::string& lhs,
                                                  const std::string& rhs,
                                                  const std::string& out,
                                                  const std::string& attrs) {
  const std::string text = "ENTRY e {\n  a = " + lhs +
                           " parameter(0)\n  b = " + rhs +
                           " parameter(1)\n  ROOT c = " + out +
                           " convolution(a, b), " + attrs + "\n}\n";
  auto module = ir::ParseModule(text);
  if (!module.ok()) return module.status();
  RETURN_IF_ERROR(ir::Verify(**module));
  return module;
}

// Random operands; with `zeros`, about that fraction of the input's
// elements are zero (as in a gradient behind ReLU and max pooling).
std::vector<BufferPtr> Operands(const ir::Instruction& conv, uint32_t seed,
                                double zeros = 0) {
  std::vector<BufferPtr> ops;
  for (int i = 0; i < 2; ++i) {
    const ir::Shape& shape = conv.operand(i)->shape();
    std::mt19937 gen(seed + i);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(shape.ElementCount());
    std::bernoulli_distribution zero(i == 0 ? zeros : 0.0);
    for (float& x : v) x = zero(gen) ? 0.0f : dist(gen);
    auto b = Buffer::FromLiteral(
        ir::Literal::FromVector<float>(ir::ElementType::kF32, shape.dims(), v),
        nullptr);
    EXPECT_TRUE(b.ok()) << b.status();
    if (b.ok()) ops.push_back(*b);
  }
  return ops;
}

class ScatterConvTest : public ::testing::TestWithParam<Case> {};

TEST_P(ScatterConvTest, MatchesIm2col) {
  const Case& c = GetParam();
  auto module = Parse(c.lhs, c.rhs, c.out, c.attrs);
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  // Dense, and mostly zeros (the kernel leaves out channels that are zero
  // in both pixels it takes at once, and whole pixels).
  for (double zeros : {0.0, 0.8}) {
    SCOPED_TRACE(zeros);
    std::vector<BufferPtr> ops = Operands(conv, 7, zeros);
    ASSERT_EQ(ops.size(), 2u);
    ExecState st;
    auto reference_kernel = MakeIm2colConvolutionKernel(conv);
    ASSERT_TRUE(reference_kernel.ok()) << reference_kernel.status();
    auto want = (*reference_kernel)(st, ops);
    ASSERT_TRUE(want.ok()) << want.status();
    auto kernel = MakeScatterConvolutionKernel(conv);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    // On one thread and on two (images split between them).
    for (int threads : {1, 2}) {
      runtime::SetComputeThreads(threads);
      auto got = (*kernel)(st, ops);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ((*got)->shape(), conv.shape());
      const float* v = (*got)->as<float>();
      const float* w = (*want)->as<float>();
      for (int64_t i = 0; i < conv.shape().ElementCount(); ++i) {
        ASSERT_NEAR(v[i], w[i], 1e-4 * (1 + std::abs(w[i])))
            << "at " << i << ", " << threads << " threads";
      }
    }
  }
  runtime::SetComputeThreads(0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ScatterConvTest,
    ::testing::Values(
        // LeNet-5's first layer: one input channel, padded to keep the size.
        Case{"first_layer", "f32[3,12,12,1]", "f32[5,5,1,6]", "f32[3,12,12,6]",
             "window={size=5x5 pad=2_2x2_2}, dim_labels=b01f_01io->b01f"},
        // The data gradient of its second: the gradient padded by the
        // kernel's reach, the kernel reversed and read as 01oi.
        Case{"data_gradient", "f32[2,10,10,16]", "f32[5,5,6,16]",
             "f32[2,14,14,6]",
             "window={size=5x5 pad=4_4x4_4}, dim_labels=b01f_01oi->b01f"},
        Case{"valid", "f32[2,9,8,3]", "f32[3,2,3,5]", "f32[2,7,7,5]",
             "window={size=3x2}, dim_labels=b01f_01io->b01f"},
        // Uneven padding, and padding beyond the kernel's reach (outputs
        // no input pixel reaches are zero).
        Case{"uneven_padding", "f32[2,6,7,2]", "f32[3,3,2,4]", "f32[2,6,10,4]",
             "window={size=3x3 pad=0_2x4_1}, dim_labels=b01f_01io->b01f"},
        Case{"beyond_reach", "f32[1,4,4,2]", "f32[2,2,2,3]", "f32[1,9,9,3]",
             "window={size=2x2 pad=3_3x4_2}, dim_labels=b01f_01io->b01f"},
        // Kernel rows of several vectors, more vectors than a block, and
        // rows that are whole vectors (no lanes left over).
        Case{"wide_rows", "f32[2,9,9,5]", "f32[7,7,5,16]", "f32[2,9,9,16]",
             "window={size=7x7 pad=3_3x3_3}, dim_labels=b01f_01io->b01f"},
        Case{"whole_vectors", "f32[2,6,6,3]", "f32[3,4,3,4]", "f32[2,6,5,4]",
             "window={size=3x4 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"},
        // Any kernel layout: output feature first.
        Case{"oi01_kernel", "f32[2,7,7,4]", "f32[3,4,3,3]", "f32[2,7,7,3]",
             "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_oi01->b01f"},
        // More channels than one look for zeros takes (64).
        Case{"many_channels", "f32[2,5,5,70]", "f32[3,3,70,4]", "f32[2,5,5,4]",
             "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"},
        Case{"one_image", "f32[1,5,5,1]", "f32[1,1,1,1]", "f32[1,5,5,1]",
             "window={size=1x1}, dim_labels=b01f_01io->b01f"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(ScatterConvRefusalTest, RefusesWhatItDoesNotCover) {
  const Case refused[] = {
      {"strided", "f32[1,8,8,2]", "f32[3,3,2,4]", "f32[1,3,3,4]",
       "window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f"},
      {"dilated", "f32[1,8,8,2]", "f32[3,3,2,4]", "f32[1,4,4,4]",
       "window={size=3x3 rhs_dilate=2x2}, dim_labels=b01f_01io->b01f"},
      {"lhs_dilated", "f32[1,4,4,2]", "f32[3,3,2,4]", "f32[1,5,5,4]",
       "window={size=3x3 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f"},
      {"nchw", "f32[1,2,8,8]", "f32[4,2,3,3]", "f32[1,4,6,6]",
       "window={size=3x3}, dim_labels=bf01_oi01->bf01"},
      {"grouped", "f32[1,8,8,4]", "f32[3,3,2,4]", "f32[1,6,6,4]",
       "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=2"},
      {"negative_padding", "f32[1,8,8,2]", "f32[3,3,2,4]", "f32[1,4,6,4]",
       "window={size=3x3 pad=-1_-1x0_0}, dim_labels=b01f_01io->b01f"},
      {"f64", "f64[1,8,8,2]", "f64[3,3,2,4]", "f64[1,6,6,4]",
       "window={size=3x3}, dim_labels=b01f_01io->b01f"},
      {"one_d", "f32[2,9,3]", "f32[3,3,4]", "f32[2,7,4]",
       "window={size=3}, dim_labels=b0f_0io->b0f"},
  };
  for (const Case& c : refused) {
    auto module = Parse(c.lhs, c.rhs, c.out, c.attrs);
    ASSERT_TRUE(module.ok()) << c.name << ": " << module.status();
    auto kernel = MakeScatterConvolutionKernel(*(*module)->entry()->root());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented)
        << c.name;
  }
}

// An infinite input pixel makes NaN or infinity only where its value
// reaches (its window's outputs); the lanes a kernel row's last vector has
// beyond its outputs do not carry it to the neighbours.
TEST(ScatterConvInfinityTest, AnInfinityReachesOnlyItsOutputs) {
  auto module =
      Parse("f32[1,6,6,1]", "f32[3,3,1,3]", "f32[1,6,6,3]",
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f");
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  std::vector<BufferPtr> ops = Operands(conv, 3);
  ASSERT_EQ(ops.size(), 2u);
  ops[0]->as<float>()[2 * 6 + 2] =
      std::numeric_limits<float>::infinity();  // pixel (2, 2)
  auto kernel = MakeScatterConvolutionKernel(conv);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ExecState st;
  auto got = (*kernel)(st, ops);
  ASSERT_TRUE(got.ok()) << got.status();
  const float* v = (*got)->as<float>();
  for (int y = 0; y < 6; ++y) {
    for (int x = 0; x < 6; ++x) {
      const bool reached = std::abs(y - 2) <= 1 && std::abs(x - 2) <= 1;
      for (int o = 0; o < 3; ++o) {
        EXPECT_EQ(std::isfinite(v[(y * 6 + x) * 3 + o]), !reached)
            << y << "," << x << "," << o;
      }
    }
  }
}

// Zeros are left out only while the kernel is finite: zero times an
// infinite weight is NaN, wherever the pixel reaches.
TEST(ScatterConvInfinityTest, ZerosTimesAnInfiniteWeightAreNaN) {
  auto module =
      Parse("f32[1,4,4,2]", "f32[3,3,2,2]", "f32[1,4,4,2]",
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f");
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  std::vector<BufferPtr> ops = Operands(conv, 5);
  ASSERT_EQ(ops.size(), 2u);
  std::fill_n(ops[0]->as<float>(), 32, 0.0f);
  ops[1]->as<float>()[0] =
      std::numeric_limits<float>::infinity();  // W[0, 0, 0, 0]
  auto kernel = MakeScatterConvolutionKernel(conv);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ExecState st;
  auto got = (*kernel)(st, ops);
  ASSERT_TRUE(got.ok()) << got.status();
  const float* v = (*got)->as<float>();
  // Output (y, x), channel 0, reads input (y - 1, x - 1) through W[0, 0]:
  // NaN wherever that pixel exists; channel 1 stays zero.
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      EXPECT_EQ(std::isnan(v[(y * 4 + x) * 2]), y >= 1 && x >= 1)
          << y << "," << x;
      EXPECT_EQ(v[(y * 4 + x) * 2 + 1], 0.0f) << y << "," << x;
    }
  }
}

// The kernel asks for cancellation before each image (on one thread: the
// calling thread's check) and stops at the first yes; the tuner stops it
// that way once it has run too long to win.
TEST(ScatterConvCancelTest, StopsBetweenImages) {
  auto module =
      Parse("f32[8,6,6,2]", "f32[3,3,2,3]", "f32[8,6,6,3]",
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f");
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  std::vector<BufferPtr> ops = Operands(conv, 1);
  ASSERT_EQ(ops.size(), 2u);
  auto kernel = MakeScatterConvolutionKernel(conv);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  runtime::SetComputeThreads(1);
  int calls = 0;
  const runtime::CancelCheck check = [&calls] { return ++calls == 3; };
  {
    CancelScope scope(&check);
    ExecState st;
    EXPECT_TRUE((*kernel)(st, ops).ok());
  }
  EXPECT_EQ(calls, 3);  // of 8 images, the third was never started
  runtime::SetComputeThreads(0);
}

}  // namespace
}  // namespace kiln::host
