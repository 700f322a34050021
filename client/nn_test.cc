// The layers of client/nn.h: their values against the formulas computed
// here, their gradients against central finite differences, their state.
#include "client/nn.h"

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "client/autodiff.h"
#include "client/checkpoint.h"
#include "client/loop.h"
#include "client/nn_test_util.h"
#include "client/optimizers.h"
#include "base/status_macros.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client::nn {
namespace {

using ir::ElementType;

class NnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect();
    ctx_ = LazyContext::Create(client_.get());
  }

  ir::Literal Random(std::vector<int64_t> dims, uint64_t seed, double lo = -2, double hi = 2) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    ir::Literal lit(ir::Shape(ElementType::kF32, std::move(dims)));
    for (int64_t i = 0; i < lit.element_count(); ++i) lit.SetFromDouble(i, dist(rng));
    return lit;
  }

  std::vector<double> Values(const Tensor& t) {
    auto lit = t.ToHost();
    EXPECT_TRUE(lit.ok()) << lit.status();
    std::vector<double> out;
    if (!lit.ok()) return out;
    for (int64_t i = 0; i < lit->element_count(); ++i) out.push_back(lit->GetAsDouble(i));
    return out;
  }

  // d(sum(w * f(x)))/dx from autodiff against central differences, for
  // every element of x (f32, so a coarse step and tolerance).
  void CheckGradient(const std::function<Tensor(const Tensor&)>& f, const ir::Literal& x0) {
    ir::Literal weights = Random(f(ctx_->FromLiteral(x0, "cpu:0")).shape().dims(), 7, 0.5, 1.5);
    auto loss_of = [&](const ir::Literal& x, Tensor* xt) {
      Tensor t = ctx_->FromLiteral(x, "cpu:0");
      if (xt != nullptr) *xt = t;
      return Sum(f(t) * ctx_->FromLiteral(weights, "cpu:0"));
    };
    Tensor x;
    Tensor loss = loss_of(x0, &x);
    auto grads = Grad(loss, {x});
    ASSERT_TRUE(grads.ok()) << grads.status();
    std::vector<double> analytic = Values((*grads)[0]);
    ir::Literal probe = x0;
    const double eps = 1e-2;
    for (int64_t j = 0; j < x0.element_count(); ++j) {
      const double v = x0.GetAsDouble(j);
      probe.SetFromDouble(j, v + eps);
      const double up = *loss_of(probe, nullptr).Item();
      probe.SetFromDouble(j, v - eps);
      const double down = *loss_of(probe, nullptr).Item();
      probe.SetFromDouble(j, v);
      const double numeric = (up - down) / (2 * eps);
      ASSERT_NEAR(analytic[j], numeric, 2e-2 * (1 + std::abs(numeric))) << "element " << j;
    }
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

TEST_F(NnTest, LinearComputesXwPlusBAndNamesItsParameters) {
  Linear fc(ctx_.get(), "cpu:0", 3, 2, /*seed=*/5);
  auto named = fc.NamedParameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(named[1].first, "bias");
  std::vector<double> w = Values(fc.weight());
  for (double v : w) EXPECT_LE(std::abs(v), 1 / std::sqrt(3.0));
  ir::Literal x = Random({4, 3}, 1);
  std::vector<double> y = Values(fc.Forward(ctx_->FromLiteral(x, "cpu:0")));
  ASSERT_EQ(y.size(), 8u);
  for (int i = 0; i < 4; ++i) {
    for (int o = 0; o < 2; ++o) {
      double want = 0;
      for (int k = 0; k < 3; ++k) want += x.GetAsDouble(i * 3 + k) * w[k * 2 + o];
      EXPECT_NEAR(y[i * 2 + o], want, 1e-5);
    }
  }
  // An optimizer's result replaces the parameters; a wrong one is refused.
  std::vector<Tensor> doubled = {fc.Parameters()[0] * 2.0, fc.Parameters()[1] + 1.0};
  ASSERT_TRUE(fc.SetParameters(doubled).ok());
  EXPECT_NEAR(Values(fc.weight())[0], 2 * w[0], 1e-6);
  EXPECT_FALSE(fc.SetParameters({doubled[0]}).ok());
  EXPECT_FALSE(fc.SetParameters({doubled[1], doubled[0]}).ok());
}

// The value of a 2-D NHWC convolution at one output position, from its
// definition (stride, dilation and padding pad_lo on both axes).
double ConvAt(const ir::Literal& x, const std::vector<double>& w, int k, int cin, int cout,
              int oh, int ow, int o, int stride, int dilation, int pad) {
  const int h = static_cast<int>(x.shape().dim(1)), wd = static_cast<int>(x.shape().dim(2));
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) {
      const int ih = oh * stride + i * dilation - pad, iw = ow * stride + j * dilation - pad;
      if (ih < 0 || iw < 0 || ih >= h || iw >= wd) continue;
      for (int c = 0; c < cin; ++c) {
        sum += x.GetAsDouble((ih * wd + iw) * cin + c) * w[((i * k + j) * cin + c) * cout + o];
      }
    }
  }
  return sum;
}

// Output (oh, ow, o) of a grouped NHWC convolution (batch 1) computed
// directly: output channel o reads input channels of its group only.
double GroupedConvAt(const ir::Literal& x, const std::vector<double>& w, int k, int cin,
                     int cout, int groups, int oh, int ow, int o, int stride, int pad) {
  const int h = static_cast<int>(x.shape().dim(1)), wd = static_cast<int>(x.shape().dim(2));
  const int cg = cin / groups, group = o / (cout / groups);
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) {
      const int ih = oh * stride + i - pad, iw = ow * stride + j - pad;
      if (ih < 0 || iw < 0 || ih >= h || iw >= wd) continue;
      for (int c = 0; c < cg; ++c) {
        sum += x.GetAsDouble((ih * wd + iw) * cin + group * cg + c) *
               w[((i * k + j) * cg + c) * cout + o];
      }
    }
  }
  return sum;
}

// Feature groups (and depthwise convolution): values against the direct
// sum, gradients of input and kernel against finite differences, and
// counts that do not divide refused.
TEST_F(NnTest, Conv2dGroupsAndDepthwise) {
  struct Case {
    int cin, cout, groups, stride;
    std::string padding;
    int out, pad;
  } cases[] = {
      {4, 6, 2, 1, "VALID", 3, 0},
      {3, 3, 3, 2, "SAME", 3, 1},  // depthwise
      {4, 8, 4, 1, "SAME", 5, 1},  // two outputs per input channel
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.cin << "->" << c.cout << " groups " << c.groups);
    ir::Literal x = Random({1, 5, 5, c.cin}, 31);
    Conv2d conv(ctx_.get(), "cpu:0", c.cin, c.cout, 3, /*seed=*/9,
                {.stride = c.stride, .padding = c.padding, .bias = false, .groups = c.groups});
    const Tensor& weight = *conv.NamedParameters()[0].second;
    ASSERT_EQ(weight.shape().dims(), (std::vector<int64_t>{3, 3, c.cin / c.groups, c.cout}));
    std::vector<double> w = Values(weight);
    Tensor y = conv.Forward(ctx_->FromLiteral(x, "cpu:0"));
    ASSERT_TRUE(y.status().ok()) << y.status();
    ASSERT_EQ(y.shape().dims(), (std::vector<int64_t>{1, c.out, c.out, c.cout}));
    std::vector<double> got = Values(y);
    for (int oh = 0; oh < c.out; ++oh) {
      for (int ow = 0; ow < c.out; ++ow) {
        for (int o = 0; o < c.cout; ++o) {
          ASSERT_NEAR(got[(oh * c.out + ow) * c.cout + o],
                      GroupedConvAt(x, w, 3, c.cin, c.cout, c.groups, oh, ow, o, c.stride, c.pad),
                      1e-4)
              << oh << "," << ow << "," << o;
        }
      }
    }
    CheckGradient([&](const Tensor& t) { return conv.Forward(t); }, Random({1, 5, 5, c.cin}, 32));
    // The kernel's gradient: the same convolution as a function of it.
    std::vector<ir::WindowDim> window(2);
    for (ir::WindowDim& d : window) {
      d.size = 3;
      d.stride = c.stride;
      d.pad_lo = d.pad_hi = c.pad;
    }
    if (c.padding == "SAME" && c.stride == 2) window[0].pad_hi = window[1].pad_hi = 1;
    Tensor xt = ctx_->FromLiteral(x, "cpu:0");
    auto lit = weight.ToHost();
    ASSERT_TRUE(lit.ok());
    CheckGradient(
        [&](const Tensor& k) { return Convolution(xt, k, window, Nhwc(), c.groups); }, *lit);
  }
  Conv2d uneven(ctx_.get(), "cpu:0", 4, 6, 3, 1, {.groups = 3});
  Tensor y = uneven.Forward(ctx_->FromLiteral(Random({1, 5, 5, 4}, 1), "cpu:0"));
  ASSERT_FALSE(y.status().ok());
  EXPECT_NE(y.status().message().find("must divide"), std::string::npos) << y.status();
}

TEST_F(NnTest, Conv2dStridesDilatesAndPads) {
  ir::Literal x = Random({1, 7, 7, 2}, 11);
  struct Case {
    Conv2dOptions options;
    int out, pad;  // output size, padding before
  } cases[] = {
      {{.stride = 1, .padding = "VALID"}, 5, 0},
      {{.stride = 2, .padding = "SAME"}, 4, 1},
      {{.stride = 1, .padding = "SAME", .dilation = 2}, 7, 2},
      {{.stride = 2, .padding = "EXPLICIT", .pad = 1, .dilation = 2}, 3, 1},
  };
  for (const Case& c : cases) {
    Conv2d conv(ctx_.get(), "cpu:0", 2, 3, 3, /*seed=*/4, c.options);
    std::vector<double> w = Values(*conv.NamedParameters()[0].second);
    Tensor y = conv.Forward(ctx_->FromLiteral(x, "cpu:0"));
    ASSERT_TRUE(y.status().ok()) << y.status();
    ASSERT_EQ(y.shape().dims(), (std::vector<int64_t>{1, c.out, c.out, 3})) << c.options.padding;
    std::vector<double> got = Values(y);
    for (int oh = 0; oh < c.out; ++oh) {
      for (int ow = 0; ow < c.out; ++ow) {
        for (int o = 0; o < 3; ++o) {
          EXPECT_NEAR(got[(oh * c.out + ow) * 3 + o],
                      ConvAt(x, w, 3, 2, 3, oh, ow, o, c.options.stride, c.options.dilation,
                             c.pad),
                      1e-4)
              << c.options.padding << " " << oh << "," << ow;
        }
      }
    }
    CheckGradient([&](const Tensor& t) { return conv.Forward(t); }, Random({1, 5, 5, 2}, 12));
  }
  Conv2d bad(ctx_.get(), "cpu:0", 2, 3, 3, 4, {.padding = "FULL"});
  EXPECT_FALSE(bad.Forward(ctx_->FromLiteral(x, "cpu:0")).status().ok());
  std::vector<double> pooled = Values(GlobalAvgPool2D(ctx_->FromLiteral(x, "cpu:0")));
  double mean0 = 0;
  for (int i = 0; i < 49; ++i) mean0 += x.GetAsDouble(i * 2) / 49;
  EXPECT_NEAR(pooled[0], mean0, 1e-5);
}

TEST_F(NnTest, EmbeddingLooksUpRowsAndAddsTheirGradients) {
  Embedding emb(ctx_.get(), "cpu:0", 6, 3, /*seed=*/9);
  std::vector<double> w = Values(*emb.NamedParameters()[0].second);
  Tensor ids = ctx_->FromVector<int32_t>(ElementType::kS32, {2, 2}, {5, 0, 5, 3}, "cpu:0");
  Tensor rows = emb.Forward(ids);
  ASSERT_EQ(rows.shape().dims(), (std::vector<int64_t>{2, 2, 3}));
  // (The gradient is traced before the rows are read: a value that has
  // been computed no longer keeps the ops that made it.)
  auto grads = Grad(Sum(rows), emb.Parameters());
  ASSERT_TRUE(grads.ok()) << grads.status();
  std::vector<double> got = Values(rows);
  const int picked[] = {5, 0, 5, 3};
  for (int n = 0; n < 4; ++n) {
    for (int d = 0; d < 3; ++d) EXPECT_EQ(got[n * 3 + d], w[picked[n] * 3 + d]);
  }
  std::vector<double> g = Values((*grads)[0]);
  const double counts[] = {1, 0, 0, 1, 0, 2};  // row 5 looked up twice
  for (int r = 0; r < 6; ++r) {
    for (int d = 0; d < 3; ++d) EXPECT_EQ(g[r * 3 + d], counts[r]) << r;
  }
  EXPECT_FALSE(Take(*emb.NamedParameters()[0].second, rows).status().ok());  // float ids
}

TEST_F(NnTest, ResidualBlocksKeepOrProjectTheShortcut) {
  ResidualBlock same(ctx_.get(), "cpu:0", 4, 4, 1, /*seed=*/20);
  ResidualBlock down(ctx_.get(), "cpu:0", 4, 8, 2, /*seed=*/30);
  EXPECT_FALSE(same.projects());
  EXPECT_TRUE(down.projects());
  EXPECT_EQ(same.NamedParameters().size(), 6u);   // two convolutions, two batch norms
  EXPECT_EQ(down.NamedParameters().size(), 9u);   // and the projection's
  EXPECT_EQ(down.NamedParameters()[6].first, "shortcut.weight");
  ir::Literal x = Random({2, 6, 6, 4}, 21);
  Tensor y_same = same.Forward(ctx_->FromLiteral(x, "cpu:0"));
  Tensor y_down = down.Forward(ctx_->FromLiteral(x, "cpu:0"));
  ASSERT_EQ(y_same.shape().dims(), (std::vector<int64_t>{2, 6, 6, 4}));
  ASSERT_EQ(y_down.shape().dims(), (std::vector<int64_t>{2, 3, 3, 8}));
  // The identity shortcut: with the residual branch silenced (its last
  // batch norm's scale and shift zero), the block is relu(x).
  std::vector<Tensor> params = same.Parameters();
  params[4] = params[4] * 0.0;  // bn2.gamma
  params[5] = params[5] * 0.0;  // bn2.beta
  ASSERT_TRUE(same.SetParameters(params).ok());
  std::vector<double> y = Values(same.Forward(ctx_->FromLiteral(x, "cpu:0")));
  for (int64_t i = 0; i < x.element_count(); ++i) {
    EXPECT_NEAR(y[i], std::max(0.0, x.GetAsDouble(i)), 1e-6);
  }
  CheckGradient([&](const Tensor& t) { return down.Forward(t); }, Random({2, 4, 4, 4}, 22));
}

TEST_F(NnTest, BatchNormNormalizesByBatchAndTracksRunningStatistics) {
  BatchNorm bn(ctx_.get(), "cpu:0", 3, /*momentum=*/0.1);
  ASSERT_EQ(bn.NamedBuffers().size(), 2u);
  EXPECT_EQ(bn.NamedBuffers()[0].first, "running_mean");
  ir::Literal x = Random({2, 2, 2, 3}, 2, 1, 5);  // NHWC, 8 values per feature
  std::vector<double> y = Values(bn.Forward(ctx_->FromLiteral(x, "cpu:0")));
  std::vector<double> mean(3, 0), var(3, 0);
  for (int i = 0; i < 24; ++i) mean[i % 3] += x.GetAsDouble(i) / 8;
  for (int i = 0; i < 24; ++i) var[i % 3] += std::pow(x.GetAsDouble(i) - mean[i % 3], 2) / 8;
  for (int i = 0; i < 24; ++i) {
    EXPECT_NEAR(y[i], (x.GetAsDouble(i) - mean[i % 3]) / std::sqrt(var[i % 3] + 1e-5), 1e-4);
  }
  std::vector<double> running_mean = Values(*bn.NamedBuffers()[0].second);
  std::vector<double> running_var = Values(*bn.NamedBuffers()[1].second);
  for (int f = 0; f < 3; ++f) {
    EXPECT_NEAR(running_mean[f], 0.1 * mean[f], 1e-5);
    EXPECT_NEAR(running_var[f], 0.9 + 0.1 * var[f] * 8 / 7, 1e-5);  // unbiased
  }
  // Inference uses the running statistics and leaves them alone.
  bn.Train(false);
  std::vector<double> y_eval = Values(bn.Forward(ctx_->FromLiteral(x, "cpu:0")));
  for (int i = 0; i < 24; ++i) {
    EXPECT_NEAR(y_eval[i],
                (x.GetAsDouble(i) - running_mean[i % 3]) / std::sqrt(running_var[i % 3] + 1e-5),
                1e-4);
  }
  EXPECT_EQ(Values(*bn.NamedBuffers()[0].second), running_mean);
}

TEST_F(NnTest, NormalizationGradientsMatchFiniteDifferences) {
  BatchNorm bn(ctx_.get(), "cpu:0", 2);
  CheckGradient([&](const Tensor& x) { return bn.Forward(x); }, Random({3, 2, 2}, 3));
  bn.Train(false);
  CheckGradient([&](const Tensor& x) { return bn.Forward(x); }, Random({3, 2, 2}, 4));
  LayerNorm ln(ctx_.get(), "cpu:0", 4);
  CheckGradient([&](const Tensor& x) { return ln.Forward(x); }, Random({2, 3, 4}, 5));
}

TEST_F(NnTest, LayerNormNormalizesEachRow) {
  LayerNorm ln(ctx_.get(), "cpu:0", 4);
  ir::Literal x = Random({3, 4}, 6, -3, 7);
  std::vector<double> y = Values(ln.Forward(ctx_->FromLiteral(x, "cpu:0")));
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += y[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += std::pow(y[r * 4 + c] - mean, 2) / 4;
    EXPECT_NEAR(mean, 0, 1e-5);
    EXPECT_NEAR(var, 1, 1e-3);
  }
}

TEST_F(NnTest, DropoutDropsInTheProgramAndOnlyInTraining) {
  Dropout dropout(ctx_.get(), "cpu:0", 0.25, 7);
  ir::Literal ones(ir::Shape(ElementType::kF32, {100, 100}));
  for (int64_t i = 0; i < ones.element_count(); ++i) ones.SetFromDouble(i, 1);
  Tensor x = ctx_->FromLiteral(ones, "cpu:0");
  std::vector<double> a = Values(dropout.Forward(x));
  std::vector<double> b = Values(dropout.Forward(x));
  int zeros = 0, differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i] == 0 || std::abs(a[i] - 1 / 0.75) < 1e-6) << a[i];
    zeros += a[i] == 0;
    differ += (a[i] == 0) != (b[i] == 0);
  }
  // 10000 draws at p = 0.25: the count of zeros is 2500 +- 43 (one sigma).
  EXPECT_NEAR(zeros, 2500, 250);
  EXPECT_GT(differ, 1000);  // each Forward advances the counter: new numbers
  // The gradient is the mask, scaled.
  Tensor xv = ctx_->FromLiteral(ones, "cpu:0");
  Tensor y = dropout.Forward(xv);
  auto grads = Grad(Sum(y), {xv});
  ASSERT_TRUE(grads.ok()) << grads.status();
  // One execution computes both, so they see the same draw.
  ASSERT_TRUE(ctx_->Realize({y, (*grads)[0]}).ok());
  std::vector<double> ys = Values(y), gs = Values((*grads)[0]);
  for (size_t i = 0; i < ys.size(); ++i) ASSERT_EQ(gs[i], ys[i]);
  dropout.Train(false);
  EXPECT_EQ(Values(dropout.Forward(x)), std::vector<double>(10000, 1.0));
}

// A module of modules: names nest, and training mode reaches the children.
class TinyNet : public testing::TwoLayerNet {
 public:
  explicit TinyNet(LazyContext* ctx) : TwoLayerNet(ctx, 4, 8, 2, 0.5, 3) {}
};

TEST_F(NnTest, ModulesNestAndTrainTogether) {
  TinyNet net(ctx_.get());
  std::vector<std::string> names;
  for (auto& [name, t] : net.NamedParameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "bn.gamma", "bn.beta",
                                             "fc2.weight", "fc2.bias"}));
  ASSERT_EQ(net.NamedBuffers().size(), 3u);
  EXPECT_EQ(net.NamedBuffers()[1].first, "bn.running_var");
  EXPECT_EQ(net.NamedBuffers()[2].first, "dropout.counter");
  net.Train(false);
  Tensor x = ctx_->FromLiteral(Random({5, 4}, 8), "cpu:0");
  // Inference is deterministic: dropout is off, statistics fixed.
  EXPECT_EQ(Values(net.Forward(x)), Values(net.Forward(x)));
  net.Train(true);
  Tensor loss = Sum(net.Forward(x) * net.Forward(x));
  auto grads = Grad(loss, net.Parameters());
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(grads->size(), 6u);
}

// Mixed precision: matrix work in bf16 on f32 master weights. The layer
// computes what the casts around its product say, and its gradients stay
// f32 and near the f32 ones.
TEST_F(NnTest, LayersComputeMatrixWorkInTheirComputeType) {
  Linear fc(ctx_.get(), "cpu:0", 8, 4, 3);
  Conv2d conv(ctx_.get(), "cpu:0", 2, 3, 3, 4, {.bias = false});
  Tensor x = ctx_->FromLiteral(Random({5, 8}, 1), "cpu:0");
  Tensor img = ctx_->FromLiteral(Random({1, 5, 5, 2}, 2), "cpu:0");
  std::vector<double> f32_out = Values(fc.Forward(x));
  auto f32_grads = Grad(Sum(fc.Forward(x) * fc.Forward(x)), fc.Parameters());
  ASSERT_TRUE(f32_grads.ok()) << f32_grads.status();

  fc.SetComputeType(ElementType::kBF16);
  conv.SetComputeType(ElementType::kBF16);
  Tensor y = fc.Forward(x);
  ASSERT_EQ(y.dtype(), ElementType::kF32);
  const Tensor& w = *fc.NamedParameters()[0].second;
  EXPECT_EQ(w.dtype(), ElementType::kF32);  // the master weights stay f32
  Tensor by_hand = Cast(Matmul(Cast(x, ElementType::kBF16), Cast(w, ElementType::kBF16)),
                        ElementType::kF32);
  std::vector<double> got = Values(y), want = Values(by_hand);
  ASSERT_EQ(got.size(), want.size());
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]);
    EXPECT_NEAR(got[i], f32_out[i], 0.05 * (1 + std::abs(f32_out[i])));
    differ += got[i] != f32_out[i];
  }
  EXPECT_GT(differ, 0);  // it did round
  Tensor conv_y = conv.Forward(img);
  EXPECT_EQ(conv_y.dtype(), ElementType::kF32);
  EXPECT_EQ(Values(conv_y),
            Values(Cast(Convolution(Cast(img, ElementType::kBF16),
                                    Cast(*conv.NamedParameters()[0].second, ElementType::kBF16),
                                    {ir::WindowDim{.size = 3, .pad_lo = 1, .pad_hi = 1},
                                     ir::WindowDim{.size = 3, .pad_lo = 1, .pad_hi = 1}},
                                    Nhwc()),
                        ElementType::kF32)));
  auto grads = Grad(Sum(fc.Forward(x) * fc.Forward(x)), fc.Parameters());
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (size_t k = 0; k < grads->size(); ++k) {
    EXPECT_EQ((*grads)[k].dtype(), ElementType::kF32);
    std::vector<double> g = Values((*grads)[k]), g32 = Values((*f32_grads)[k]);
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], g32[i], 0.05 * (1 + std::abs(g32[i])));
  }
  fc.SetComputeType(std::nullopt);
  EXPECT_EQ(Values(fc.Forward(x)), f32_out);
}

// A whole model and its optimizer convert in one call; the integer
// counter stays; the converted model still trains.
TEST_F(NnTest, ConvertAllMovesAModelAndItsOptimizerToAnotherType) {
  TinyNet net(ctx_.get());
  Adam adam(0.05);
  std::vector<std::pair<std::string, Tensor*>> all = TrainingState(net, adam);
  ASSERT_TRUE(ConvertAll(all, ElementType::kBF16).ok());
  for (const auto& [name, t] : all) {
    const ElementType want = name == "dropout.counter" ? ElementType::kU32
                             : name == "adam_step"     ? ElementType::kS32
                                                       : ElementType::kBF16;
    EXPECT_EQ(t->dtype(), want) << name;
  }
  // Without dropout's noise, the loss has to fall.
  net.Train(false);
  Tensor x = Cast(ctx_->FromLiteral(Random({16, 4}, 9), "cpu:0"), ElementType::kBF16);
  std::vector<double> losses;
  for (int step = 0; step < 10; ++step) {
    Tensor out = net.Forward(x);
    Tensor loss = Sum(out * out) * (1.0 / 16);
    auto grads = Grad(loss, net.Parameters());
    ASSERT_TRUE(grads.ok()) << grads.status();
    auto updated = adam.Step(net.Parameters(), *grads);
    ASSERT_TRUE(updated.ok()) << updated.status();
    ASSERT_TRUE(net.SetParameters(*updated).ok());
    losses.push_back(Values(loss)[0]);
  }
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_FALSE(ConvertAll(all, ElementType::kS32).ok());
}

// Static loss scaling keeps a gradient that the f16 backward pass would
// flush to zero.
TEST_F(NnTest, ScaledGradKeepsSmallHalfGradients) {
  Tensor w = ctx_->FromLiteral(Random({4}, 3, 0.5, 1.5), "cpu:0");
  ir::Literal small(ir::Shape(ElementType::kF16, {}));
  small.SetFromDouble(0, 1e-3);
  Tensor c = ctx_->FromLiteral(small, "cpu:0");
  Tensor loss = Sum(Cast(Cast(w, ElementType::kF16) * c, ElementType::kF32)) * 1e-6;
  auto plain = Grad(loss, {w});
  auto scaled = ScaledGrad(loss, {w}, 65536);
  ASSERT_TRUE(plain.ok() && scaled.ok());
  for (double g : Values((*plain)[0])) EXPECT_EQ(g, 0);  // 1e-9 is below f16's range
  for (double g : Values((*scaled)[0])) EXPECT_NEAR(g, 1e-9, 1e-11);
  EXPECT_FALSE(ScaledGrad(loss, {w}, 0).ok());
  EXPECT_FALSE(ScaledGrad(loss, {w}, std::numeric_limits<double>::infinity()).ok());
}

// Dynamic loss scaling on a loss whose gradient is 10 per weight: a scale
// of 1e38 or 5e37 makes it infinite in f32 (skipped, scale halved), 2.5e37
// keeps it finite (taken; after two such steps in a row the scale
// doubles). Steps 3, 4 and 6 of six are taken, SGD with momentum 0.9.
struct ScaledRun {
  std::vector<double> weights, velocity;
  std::vector<double> scales, finite_steps;
  std::vector<bool> finite;
};

constexpr int kScaledSteps = 6;

DynamicLossScaleOptions ScaledRunOptions() {
  DynamicLossScaleOptions options;
  options.initial_scale = 1e38;
  options.growth_interval = 2;
  return options;
}

// The loss of the scaled run for weights `w`.
Tensor ScaledRunLoss(LazyContext* ctx, const Tensor& w) {
  return Sum(w * ctx->FromVector<float>(ElementType::kF32, {4}, {10, 10, 10, 10}, "cpu:0"));
}

TEST_F(NnTest, DynamicLossScaleSkipsOverflowingStepsAndAdaptsTheScale) {
  auto scaler = DynamicLossScale::Create(ctx_.get(), "cpu:0", ScaledRunOptions());
  ASSERT_TRUE(scaler.ok()) << scaler.status();
  Sgd sgd(0.01, 0.9);
  Tensor w = ctx_->FromVector<float>(ElementType::kF32, {4}, {1, 2, 3, 4}, "cpu:0");
  ScaledRun run;
  for (int step = 0; step < kScaledSteps; ++step) {
    auto grads = scaler->Grad(ScaledRunLoss(ctx_.get(), w), {w});
    ASSERT_TRUE(grads.ok()) << grads.status();
    auto next = scaler->Step(sgd, {w}, *grads);
    ASSERT_TRUE(next.ok()) << next.status();
    w = (*next)[0];
    ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
    run.finite.push_back(Values(scaler->last_step_finite())[0] != 0);
    run.scales.push_back(Values(scaler->scale())[0]);
    run.finite_steps.push_back(Values(*scaler->NamedState()[1].second)[0]);
    if (step == 1) {
      // Two skipped steps: weights and momentum untouched.
      EXPECT_EQ(Values(w), (std::vector<double>{1, 2, 3, 4}));
      EXPECT_EQ(Values(sgd.velocity()[0]), (std::vector<double>{0, 0, 0, 0}));
    }
  }
  EXPECT_EQ(run.finite, (std::vector<bool>{false, false, true, true, false, true}));
  const std::vector<double> scales = {5e37, 2.5e37, 2.5e37, 5e37, 2.5e37, 2.5e37};
  for (int i = 0; i < kScaledSteps; ++i) {
    EXPECT_NEAR(run.scales[i], scales[i], scales[i] * 1e-6) << "scale after step " << i + 1;
  }
  EXPECT_EQ(run.finite_steps, (std::vector<double>{0, 0, 1, 0, 0, 1}));
  // Velocity 10, 19, 27.1 after the taken steps; the weights moved by
  // 0.01 * (10 + 19 + 27.1).
  const std::vector<double> moved = Values(w), velocity = Values(sgd.velocity()[0]);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(moved[i], i + 1 - 0.561, 1e-5) << i;
    EXPECT_NEAR(velocity[i], 27.1, 1e-4) << i;
  }
}

// The same six steps as one device loop carrying the weights, the momentum
// and the scaler's state end where step mode ends.
TEST_F(NnTest, DynamicLossScaleRunsInADeviceLoop) {
  auto scaler = DynamicLossScale::Create(ctx_.get(), "cpu:0", ScaledRunOptions());
  ASSERT_TRUE(scaler.ok()) << scaler.status();
  Sgd sgd(0.01, 0.9);
  Tensor w = ctx_->FromVector<float>(ElementType::kF32, {4}, {1, 2, 3, 4}, "cpu:0");
  sgd.InitState({w});
  std::vector<std::pair<std::string, Tensor*>> carried = {{"w", &w}};
  for (const auto& named : sgd.NamedState()) carried.push_back(named);
  for (const auto& named : scaler->NamedState()) carried.push_back(named);
  absl::Status st = WhileCarrying(kScaledSteps, carried, [&](DeviceLoop&) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, scaler->Grad(ScaledRunLoss(ctx_.get(), w), {w}));
    ASSIGN_OR_RETURN(std::vector<Tensor> next, scaler->Step(sgd, {w}, grads));
    w = next[0];
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<double> moved = Values(w);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(moved[i], i + 1 - 0.561, 1e-5) << i;
  EXPECT_NEAR(Values(scaler->scale())[0], 2.5e37, 2.5e31);
  EXPECT_EQ(Values(*scaler->NamedState()[1].second), (std::vector<double>{1}));
  // The last step's verdict is carried too, and readable after the loop.
  EXPECT_EQ(Values(scaler->last_step_finite()), (std::vector<double>{1}));
}

// Half-precision parameters with a scale above 2^24, whose inverse f16
// cannot hold: the gradients are unscaled in f32 and survive.
TEST_F(NnTest, DynamicLossScaleUnscalesHalfGradientsInF32) {
  DynamicLossScaleOptions options;
  options.initial_scale = 33554432;  // 2^25
  auto scaler = DynamicLossScale::Create(ctx_.get(), "cpu:0", options);
  ASSERT_TRUE(scaler.ok()) << scaler.status();
  Tensor w = Cast(ctx_->FromVector<float>(ElementType::kF32, {2}, {1, 2}, "cpu:0"),
                  ElementType::kF16);
  auto grads = scaler->Grad(Sum(Cast(w, ElementType::kF32)) * 1e-4, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0].dtype(), ElementType::kF16);
  for (double g : Values((*grads)[0])) EXPECT_NEAR(g, 1e-4, 1e-7);
}

// A half-precision backward pass keeps a gradient below f16's range, as
// with static scaling, and the optimizer's every state tensor (Adam's
// moments and step count) stays put on a skipped step.
TEST_F(NnTest, DynamicLossScaleKeepsSmallHalfGradientsAndAdamState) {
  auto scaler = DynamicLossScale::Create(ctx_.get(), "cpu:0");
  ASSERT_TRUE(scaler.ok()) << scaler.status();
  Tensor w = ctx_->FromLiteral(Random({4}, 3, 0.5, 1.5), "cpu:0");
  ir::Literal small(ir::Shape(ElementType::kF16, {}));
  small.SetFromDouble(0, 1e-3);
  Tensor c = ctx_->FromLiteral(small, "cpu:0");
  Tensor loss = Sum(Cast(Cast(w, ElementType::kF16) * c, ElementType::kF32)) * 1e-6;
  auto grads = scaler->Grad(loss, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (double g : Values((*grads)[0])) EXPECT_NEAR(g, 1e-9, 1e-11);

  Adam adam(0.1);
  const std::vector<double> w0 = Values(w);
  ir::Literal bad = Random({4}, 4);
  bad.SetFromDouble(2, std::numeric_limits<double>::quiet_NaN());
  auto next = scaler->Step(adam, {w}, {ctx_->FromLiteral(bad, "cpu:0")});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Values((*next)[0]), w0);
  EXPECT_EQ(Values(adam.step_count()), (std::vector<double>{0}));
  EXPECT_EQ(Values(adam.first_moment()[0]), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(Values(scaler->scale()), (std::vector<double>{32768}));
  EXPECT_EQ(Values(scaler->last_step_finite()), (std::vector<double>{0}));
}

TEST_F(NnTest, DynamicLossScaleRefusesBadOptions) {
  auto with = [&](auto change) {
    DynamicLossScaleOptions options;
    change(options);
    return DynamicLossScale::Create(ctx_.get(), "cpu:0", options).status();
  };
  EXPECT_FALSE(with([](auto& o) { o.initial_scale = 0; }).ok());
  EXPECT_FALSE(with([](auto& o) { o.initial_scale = 1e39; }).ok());
  EXPECT_FALSE(with([](auto& o) { o.initial_scale = std::nan(""); }).ok());
  EXPECT_FALSE(with([](auto& o) { o.growth_factor = 1; }).ok());
  EXPECT_FALSE(with([](auto& o) { o.backoff_factor = 1; }).ok());
  EXPECT_FALSE(with([](auto& o) { o.backoff_factor = 0; }).ok());
  EXPECT_FALSE(with([](auto& o) { o.growth_interval = 0; }).ok());
  EXPECT_TRUE(with([](auto&) {}).ok());
  auto scaler = DynamicLossScale::Create(ctx_.get(), "cpu:0");
  ASSERT_TRUE(scaler.ok());
  Sgd sgd(0.1);
  Tensor w = ctx_->FromLiteral(Random({2}, 5), "cpu:0");
  EXPECT_FALSE(scaler->Step(sgd, {w}, {}).ok());
  EXPECT_FALSE(scaler->Grad(w, {w}).ok());  // not a scalar
}

// A model and its optimizer moved to another device in one call train
// there; the learning rate follows the parameters.
TEST_F(NnTest, AModelAndItsOptimizerMoveToAnotherDevice) {
  embedded::Options options;
  options.devices = "cpu:2";
  auto client = embedded::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto ctx = LazyContext::Create(client->get());
  Linear fc(ctx.get(), "cpu:0", 3, 2, 1);
  Adam adam(0.01);
  std::vector<std::pair<std::string, Tensor*>> state = TrainingState(fc, adam);
  const std::vector<double> before = Values(fc.weight());
  ASSERT_TRUE(ToDevice(state, "cpu:1").ok());
  for (const auto& [name, t] : state) EXPECT_EQ(t->device(), "cpu:1") << name;
  EXPECT_EQ(Values(fc.weight()), before);
  Tensor x = ctx->FromLiteral(Random({4, 3}, 8), "cpu:1");
  auto grads = Grad(Sum(fc.Forward(x)), fc.Parameters());
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto next = adam.Step(fc.Parameters(), *grads);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(fc.SetParameters(*next).ok());
  ASSERT_TRUE(ctx->Barrier("cpu:1").ok());
  EXPECT_EQ(fc.weight().device(), "cpu:1");
  EXPECT_NE(Values(fc.weight()), before);
  // An unknown device moves nothing.
  EXPECT_FALSE(ToDevice(state, "cpu:7").ok());
  for (const auto& [name, t] : state) EXPECT_EQ(t->device(), "cpu:1") << name;
}

// A whole model and its optimizer in reduced precision: the tensors stay
// f32, are stored in bf16, train so, save to a checkpoint as f32 values and
// come back reduced.
TEST_F(NnTest, AWholeModelInReducedPrecisionTrainsAndCheckpoints) {
  Linear fc(ctx_.get(), "cpu:0", 4, 3, 1);
  Sgd sgd(0.1, 0.9);
  sgd.InitState(fc.Parameters());
  std::vector<std::pair<std::string, Tensor*>> state = fc.NamedParameters();
  for (const auto& named : sgd.NamedState()) state.push_back(named);
  const std::vector<double> w_full = Values(fc.weight());
  ASSERT_TRUE(ToReducedPrecision(state).ok());
  for (const auto& [name, t] : state) {
    EXPECT_TRUE(t->IsReducedPrecision()) << name;
    EXPECT_EQ(t->dtype(), ElementType::kF32) << name;
  }
  const std::vector<double> w_reduced = Values(fc.weight());
  ASSERT_EQ(w_reduced.size(), w_full.size());
  for (size_t i = 0; i < w_full.size(); ++i) {
    EXPECT_NEAR(w_reduced[i], w_full[i], std::abs(w_full[i]) * 1.0 / 256) << i;  // bf16: 8 bits
  }
  Tensor x = ctx_->FromLiteral(Random({2, 4}, 9), "cpu:0").ToReducedPrecision();
  for (int step = 0; step < 2; ++step) {
    Tensor loss = Sum(fc.Forward(x) * fc.Forward(x));
    ASSERT_TRUE(loss.IsReducedPrecision());
    auto grads = Grad(loss, fc.Parameters());
    ASSERT_TRUE(grads.ok()) << grads.status();
    auto next = sgd.Step(fc.Parameters(), *grads);
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(fc.SetParameters(*next).ok());
    ASSERT_TRUE(ctx_->Barrier("cpu:0").ok());
  }
  for (const auto& [name, t] : state) {
    EXPECT_TRUE(t->IsReducedPrecision()) << name << " after training";
  }
  EXPECT_NE(Values(fc.weight()), w_reduced);

  const std::string dir = ::testing::TempDir() + "/reduced_checkpoint";
  std::vector<std::pair<std::string, const Tensor*>> to_save;
  for (const auto& [name, t] : state) to_save.push_back({name, t});
  ASSERT_TRUE(SaveCheckpoint(dir, 2, to_save).ok());
  auto loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_EQ((*loaded)->tensors.at("weight").shape().type(), ElementType::kF32);
  Linear fresh(ctx_.get(), "cpu:0", 4, 3, 5);
  ASSERT_TRUE(ToReducedPrecision(fresh.NamedParameters()).ok());
  ASSERT_TRUE(RestoreTensors(**loaded, fresh.NamedParameters(), ctx_.get(), "cpu:0").ok());
  EXPECT_TRUE(fresh.weight().IsReducedPrecision());
  EXPECT_EQ(Values(fresh.weight()), Values(fc.weight()));

  ASSERT_TRUE(ToFullPrecision(state).ok());
  for (const auto& [name, t] : state) {
    EXPECT_FALSE(t->IsReducedPrecision()) << name;
    EXPECT_EQ(t->storage_type(), ElementType::kF32) << name;
  }
}

}  // namespace
}  // namespace kiln::client::nn
