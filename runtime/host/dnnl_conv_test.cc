// Every way oneDNN can run a convolution gives what our own im2col kernel
// gives, over dim_labels, strides, padding, dilations and groups.
#include "runtime/host/dnnl_conv.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include <omp.h>

#include "gtest/gtest.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "runtime/host/cancel.h"
#include "runtime/host/conv_kernels.h"
#include "runtime/compute_threads.h"

namespace kiln::host {
namespace {

struct Case {
  std::string name;
  std::string lhs, rhs, out, attrs;
  int feature_groups = 1;
  // Whether oneDNN's weight- and data-gradient primitives apply too (they
  // do to every ungrouped convolution of stride 1 here).
  bool gradient_plans = false;
  // Whether the data-gradient primitive alone applies (an input dilated as
  // a strided convolution's data gradient reads it).
  bool data_plan_only = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  return {
      {"nhwc_same", "f32[4,9,9,3]", "f32[3,3,3,5]", "f32[4,9,9,5]",
       "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", 1, true},
      {"nchw_strided", "f32[2,3,11,10]", "f32[6,3,3,2]", "f32[2,6,5,5]",
       "window={size=3x2 stride=2x2 pad=1_0x0_1}, dim_labels=bf01_oi01->bf01", 1, false},
      {"dilated", "f32[2,12,12,4]", "f32[3,3,4,2]", "f32[2,8,8,2]",
       "window={size=3x3 rhs_dilate=2x2}, dim_labels=b01f_01io->b01f", 1, true},
      // A data gradient as the lazy client writes it (the kernel reversed
      // by a separate op, padded to its reach).
      {"data_gradient", "f32[4,10,10,16]", "f32[5,5,6,16]", "f32[4,14,14,6]",
       "window={size=5x5 pad=4_4x4_4}, dim_labels=b01f_01oi->b01f", 1, true},
      {"data_gradient_dilated", "f32[2,8,8,3]", "f32[3,3,5,3]", "f32[2,10,10,5]",
       "window={size=3x3 pad=3_3x3_3 rhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", 1, true},
      // Data gradients of convolutions of stride 2: the gradient dilated
      // by the stride (odd and even inputs, and a 1x1 projection).
      {"data_gradient_strided", "f32[2,5,5,4]", "f32[3,3,3,4]", "f32[2,9,9,3]",
       "window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", 1, false,
       true},
      {"data_gradient_strided_even", "f32[2,5,5,4]", "f32[3,3,3,4]", "f32[2,10,10,3]",
       "window={size=3x3 pad=2_1x2_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", 1, false,
       true},
      {"data_gradient_strided_1x1", "f32[2,5,5,4]", "f32[1,1,3,4]", "f32[2,9,9,3]",
       "window={size=1x1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", 1, false, true},
      {"grouped", "f32[2,8,8,6]", "f32[3,3,2,9]", "f32[2,6,6,9]",
       "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=3", 3, false},
      {"one_d", "f32[3,17,4]", "f32[5,4,6]", "f32[3,13,6]",
       "window={size=5}, dim_labels=b0f_0io->b0f", 1, true},
      {"three_d", "f32[2,2,6,6,5]", "f32[3,3,3,2,4]", "f32[2,6,4,3,4]",
       "window={size=3x3x3 pad=1_1x0_0x0_0}, dim_labels=bf012_012io->b012f", 1, true},
      // A weight gradient as the lazy client writes it: the batch contracted
      // as the input feature, the kernel as large as the data.
      {"weight_gradient", "f32[8,14,14,6]", "f32[8,10,10,16]", "f32[5,5,6,16]",
       "window={size=10x10}, dim_labels=f01b_i01o->01bf", 1, true},
      {"weight_gradient_padded", "f32[8,12,12,1]", "f32[8,12,12,6]", "f32[5,5,1,6]",
       "window={size=12x12 pad=2_2x2_2}, dim_labels=f01b_i01o->01bf", 1, true},
  };
}

ir::Literal Random(const ir::Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(shape.ElementCount());
  for (float& x : v) x = dist(gen);
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, shape.dims(), v);
}

class DnnlConvTest : public ::testing::TestWithParam<Case> {
 protected:
  // Parses the case's convolution, makes its operands (random from `seed`)
  // and runs our im2col kernel on them: the reference.
  void Prepare(uint32_t seed) {
    const Case& c = GetParam();
    const std::string text = "ENTRY e {\n  a = " + c.lhs + " parameter(0)\n  b = " + c.rhs +
                             " parameter(1)\n  ROOT c = " + c.out + " convolution(a, b), " +
                             c.attrs + "\n}\n";
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.status();
    ASSERT_TRUE(ir::Verify(**module).ok()) << ir::Verify(**module);
    module_ = *std::move(module);
    conv_ = module_->entry()->root();
    for (int i = 0; i < 2; ++i) {
      auto b = Buffer::FromLiteral(Random(conv_->operand(i)->shape(), seed + i), nullptr);
      ASSERT_TRUE(b.ok());
      ops_.push_back(*b);
    }
    auto reference_kernel = MakeIm2colConvolutionKernel(*conv_);
    ASSERT_TRUE(reference_kernel.ok()) << reference_kernel.status();
    auto reference = (*reference_kernel)(st_, ops_);
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
  }

  std::unique_ptr<ir::Module> module_;
  const ir::Instruction* conv_ = nullptr;
  std::vector<BufferPtr> ops_;
  BufferPtr reference_;
  ExecState st_;
};

TEST_P(DnnlConvTest, EveryOneDnnKernelMatchesIm2col) {
  const Case& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(Prepare(11));
  const ir::Instruction& conv = *conv_;
  std::vector<BufferPtr>& ops = ops_;
  ExecState& st = st_;
  const float* want = reference_->as<float>();

  // Whole, in pieces of three quarters of the work (pieces and a shorter
  // last one), and in pieces of one batch element or output feature
  // (whichever is fewer).
  const ir::Shape& ker = conv.operand(1)->shape();
  const ir::ConvDims& dims = conv.attrs().conv;
  const int64_t macs = conv.shape().ElementCount() *
                       (ker.ElementCount() / ker.dim(dims.kernel_output_feature));
  const int64_t fewer =
      std::min(conv.shape().dim(dims.output_batch), conv.shape().dim(dims.output_feature));
  int pieces_run = 0;
  for (const int64_t piece_macs : {kDnnlPieceMacs, macs * 3 / 4, macs / fewer}) {
    const std::vector<NamedKernel> kernels = DnnlConvolutionKernels(conv, piece_macs);
    ASSERT_FALSE(kernels.empty());
    bool weights = false, data = false;
    for (const NamedKernel& k : kernels) {
      weights |= k.name.rfind("onednn weights", 0) == 0;
      data |= k.name.rfind("onednn data", 0) == 0;
      pieces_run += k.name.find(" in pieces of ") != std::string::npos;
      // oneDNN's reference loops are never offered (too slow even to time).
      EXPECT_EQ(k.name.find(" ref"), std::string::npos) << k.name;
      auto got = k.kernel(st, ops);
      ASSERT_TRUE(got.ok()) << k.name << ": " << got.status();
      ASSERT_EQ((*got)->shape(), conv.shape()) << k.name;
      const float* v = (*got)->as<float>();
      for (int64_t i = 0; i < conv.shape().ElementCount(); ++i) {
        ASSERT_NEAR(v[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << k.name << " at " << i;
      }
    }
    EXPECT_EQ(weights, c.gradient_plans) << piece_macs;
    EXPECT_EQ(data, c.gradient_plans || c.data_plan_only) << piece_macs;
  }
  EXPECT_GT(pieces_run, 0);
}

// The forward plans that add a bias give im2col's result plus the bias
// along the output features, whole and in pieces (the bias is not cut).
TEST_P(DnnlConvTest, EveryBiasPlanAddsTheBiasAlongTheFeatures) {
  const Case& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(Prepare(21));
  const ir::Instruction& conv = *conv_;
  std::vector<BufferPtr>& ops = ops_;
  ExecState& st = st_;
  const float* want = reference_->as<float>();
  const ir::ConvDims& dims = conv.attrs().conv;
  const int64_t features = conv.shape().dim(dims.output_feature);
  auto bias = Buffer::FromLiteral(Random(ir::Shape(ir::ElementType::kF32, {features}), 23), nullptr);
  ASSERT_TRUE(bias.ok());
  const float* b = (*bias)->as<float>();
  const std::vector<int64_t> strides = ir::RowMajorStrides(conv.shape().dims());
  const int64_t batch = conv.shape().dim(dims.output_batch);
  const ir::Shape& ker = conv.operand(1)->shape();
  const int64_t macs = conv.shape().ElementCount() *
                       (ker.ElementCount() / ker.dim(dims.kernel_output_feature));
  ops.push_back(*bias);
  int ran = 0;
  for (const int64_t piece_macs : {kDnnlPieceMacs, macs * 3 / 4, macs / batch}) {
    for (const NamedKernel& k : DnnlConvolutionKernels(conv, piece_macs, /*bias=*/true)) {
      ++ran;
      EXPECT_EQ(k.name.rfind("onednn forward with bias", 0), 0u) << k.name;
      auto got = k.kernel(st, ops);
      ASSERT_TRUE(got.ok()) << k.name << ": " << got.status();
      ASSERT_EQ((*got)->shape(), conv.shape()) << k.name;
      const float* v = (*got)->as<float>();
      for (int64_t i = 0; i < conv.shape().ElementCount(); ++i) {
        const float expected = want[i] + b[(i / strides[dims.output_feature]) % features];
        ASSERT_NEAR(v[i], expected, 1e-4 * (1 + std::abs(expected))) << k.name << " at " << i;
      }
    }
  }
  // Every case but an input dilated as a data gradient reads it has a
  // forward plan (whole and in both kinds of pieces).
  EXPECT_EQ(ran > 0, !c.data_plan_only) << ran;
}

// Threads of this process.
int ProcessThreads() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

// oneDNN fixes a primitive's thread team when it is created, from the
// creating thread's OpenMP setting: kernels built on a thread with the
// default team (one per core) must still run on runtime::ComputeThreads()
// threads. Checked in a fresh process (the death test runs this test alone
// in a new copy of the binary), where no earlier test has started OpenMP
// threads: at one compute thread, building and running every kernel of a
// convolution on a new thread leaves no thread behind.
TEST(DnnlConvThreadsDeathTest, KernelsBuiltOnAnyThreadRunOnTheComputeThreads) {
  if (std::thread::hardware_concurrency() < 2) {
    GTEST_SKIP() << "one core: every OpenMP team is one thread";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        runtime::SetComputeThreads(1);
        const int before = ProcessThreads();
        int ran = 0;
        std::thread builder([&ran] {
          auto module = ir::ParseModule(
              "ENTRY e {\n a = f32[8,12,12,4] parameter(0)\n b = f32[3,3,4,8] parameter(1)\n"
              " ROOT c = f32[8,12,12,8] convolution(a, b), window={size=3x3 pad=1_1x1_1}, "
              "dim_labels=b01f_01io->b01f\n}\n");
          if (!module.ok()) return;
          const ir::Instruction& conv = *(*module)->entry()->root();
          std::vector<BufferPtr> ops;
          for (int i = 0; i < 2; ++i) {
            auto b = Buffer::FromLiteral(Random(conv.operand(i)->shape(), 5 + i), nullptr);
            if (!b.ok()) return;
            ops.push_back(*b);
          }
          ExecState st;
          for (const NamedKernel& k : DnnlConvolutionKernels(conv, kDnnlPieceMacs)) {
            if (k.kernel(st, ops).ok()) ++ran;
          }
        });
        builder.join();
        std::fprintf(stderr, "%d kernels ran; threads %d before, %d after\n", ran, before,
                     ProcessThreads());
        std::_Exit(ran > 0 && ProcessThreads() == before ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// A convolution in pieces asks for cancellation between them and stops
// there: the pieces after the first are never written.
TEST(DnnlConvPiecesTest, ACancelledConvolutionStopsAfterAPiece) {
  auto module = ir::ParseModule(
      "ENTRY e {\n a = f32[6,5,5,2] parameter(0)\n b = f32[3,3,2,4] parameter(1)\n"
      " ROOT c = f32[6,5,5,4] convolution(a, b), window={size=3x3 pad=1_1x1_1}, "
      "dim_labels=b01f_01io->b01f\n}\n");
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  std::vector<BufferPtr> ops;
  for (int i = 0; i < 2; ++i) {
    auto b = Buffer::FromLiteral(Random(conv.operand(i)->shape(), 3 + i), nullptr);
    ASSERT_TRUE(b.ok());
    ops.push_back(*b);
  }
  // Pieces of one batch element (6x5x5x4 outputs of 18 multiply-adds).
  const std::vector<NamedKernel> kernels = DnnlConvolutionKernels(conv, 5 * 5 * 4 * 18);
  ASSERT_FALSE(kernels.empty());
  ExecState st;
  auto whole = kernels[0].kernel(st, ops);
  ASSERT_TRUE(whole.ok()) << whole.status();
  int polls = 0;
  const runtime::CancelCheck cancel = [&polls] { return ++polls > 0; };
  absl::StatusOr<BufferPtr> stopped;
  {
    CancelScope scope(&cancel);
    stopped = kernels[0].kernel(st, ops);
  }
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(polls, 1) << kernels[0].name;
  // The first batch element is computed, as it was whole.
  const int64_t per_element = 5 * 5 * 4;
  for (int64_t i = 0; i < per_element; ++i) {
    ASSERT_EQ((*stopped)->as<float>()[i], (*whole)->as<float>()[i]) << i;
  }
}

// A convolution whose single batch element is more work than a piece
// may be is left to im2col, which polls inside.
TEST(DnnlConvPiecesTest, APositionLargerThanAPieceIsLeftToIm2col) {
  auto module = ir::ParseModule(
      "ENTRY e {\n a = f32[1,9,9,3] parameter(0)\n b = f32[3,3,3,5] parameter(1)\n"
      " ROOT c = f32[1,9,9,5] convolution(a, b), window={size=3x3 pad=1_1x1_1}, "
      "dim_labels=b01f_01io->b01f\n}\n");
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  EXPECT_FALSE(DnnlConvolutionKernels(conv, /*piece_macs=*/1 << 20).empty());
  EXPECT_TRUE(DnnlConvolutionKernels(conv, /*piece_macs=*/100).empty());
}

INSTANTIATE_TEST_SUITE_P(Shapes, DnnlConvTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(DnnlConvCoverageTest, OtherTypesAndStridedInputDilationAreLeftToIm2col) {
  for (const std::string& text : {
           std::string("ENTRY e {\n a = f64[1,5,5,1] parameter(0)\n b = f64[2,2,1,1] "
                       "parameter(1)\n ROOT c = f64[1,4,4,1] convolution(a, b), "
                       "window={size=2x2}, dim_labels=b01f_01io->b01f\n}\n"),
           std::string("ENTRY e {\n a = f32[1,5,5,1] parameter(0)\n b = f32[2,2,1,1] "
                       "parameter(1)\n ROOT c = f32[1,4,4,1] convolution(a, b), "
                       "window={size=2x2 stride=2x2 lhs_dilate=2x2}, "
                       "dim_labels=b01f_01io->b01f\n}\n"),
           std::string("ENTRY e {\n a = f32[1,5,5,1] parameter(0)\n b = f32[2,2,1,1] "
                       "parameter(1)\n ROOT c = f32[1,2,2,1] convolution(a, b), "
                       "window={size=2x2 pad=-1_-1x-1_-1}, dim_labels=b01f_01io->b01f\n}\n"),
       }) {
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.status() << "\n" << text;
    ASSERT_TRUE(ir::Verify(**module).ok()) << text;
    EXPECT_TRUE(DnnlConvolutionKernels(*(*module)->entry()->root()).empty()) << text;
    EXPECT_TRUE(MakeConvolutionKernel(*(*module)->entry()->root()).ok()) << text;
  }
}

// Small reorders (a layer's weights) are built for the calling thread
// alone; building them leaves the thread's team at the compute threads, so
// the convolutions and every later kernel still run on all of them.
TEST(DnnlConvThreadsTest, SmallReordersLeaveTheTeamAtTheComputeThreads) {
  auto module = ir::ParseModule(
      "ENTRY e {\n a = f32[8,14,14,6] parameter(0)\n b = f32[5,5,6,16] parameter(1)\n"
      " ROOT c = f32[8,10,10,16] convolution(a, b), window={size=5x5}, "
      "dim_labels=b01f_01io->b01f\n}\n");
  ASSERT_TRUE(module.ok()) << module.status();
  const ir::Instruction& conv = *(*module)->entry()->root();
  runtime::SetComputeThreads(2);
  const std::vector<NamedKernel> kernels = DnnlConvolutionKernels(conv, kDnnlPieceMacs);
  EXPECT_FALSE(kernels.empty());
  EXPECT_EQ(omp_get_max_threads(), 2);
  runtime::SetComputeThreads(0);
}

}  // namespace
}  // namespace kiln::host
