// Every gradient rule against central finite differences, in f64.
#include "client/autodiff.h"

#include <functional>
#include <random>

#include "client/lazy.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

class GradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect();
    ctx_ = LazyContext::Create(client_.get());
  }

  ir::Literal Random(std::vector<int64_t> dims, double lo, double hi, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    ir::Literal lit(ir::Shape(ElementType::kF64, std::move(dims)));
    for (int64_t i = 0; i < lit.element_count(); ++i) lit.SetFromDouble(i, dist(rng));
    return lit;
  }

  // Sum of f(inputs) weighted by fixed random weights: a scalar whose
  // gradient exercises every output element.
  double Evaluate(const Fn& f, const std::vector<ir::Literal>& inputs, Tensor* loss_out,
                  std::vector<Tensor>* tensors_out) {
    std::vector<Tensor> tensors;
    for (const auto& in : inputs) tensors.push_back(ctx_->FromLiteral(in, "cpu:0"));
    Tensor out = f(tensors);
    EXPECT_TRUE(out.status().ok()) << out.status();
    ir::Literal weights = Random(out.shape().dims(), 0.5, 1.5, 99);
    Tensor loss = Sum(out * ctx_->FromLiteral(weights, "cpu:0"));
    if (loss_out != nullptr) *loss_out = loss;
    if (tensors_out != nullptr) *tensors_out = tensors;
    auto v = loss.Item();
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : 0;
  }

  void CheckGradient(const Fn& f, std::vector<ir::Literal> inputs, double tolerance = 1e-5) {
    Tensor loss;
    std::vector<Tensor> tensors;
    std::vector<Tensor> params;
    {
      std::vector<Tensor> ts;
      for (const auto& in : inputs) ts.push_back(ctx_->FromLiteral(in, "cpu:0"));
      Tensor out = f(ts);
      ASSERT_TRUE(out.status().ok()) << out.status();
      ir::Literal weights = Random(out.shape().dims(), 0.5, 1.5, 99);
      loss = Sum(out * ctx_->FromLiteral(weights, "cpu:0"));
      tensors = ts;
    }
    auto grads = Grad(loss, tensors);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_TRUE(ctx_->Realize(*grads).ok());
    const double eps = 1e-6;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto analytic = (*grads)[i].ToHost();
      ASSERT_TRUE(analytic.ok()) << analytic.status();
      for (int64_t j = 0; j < inputs[i].element_count(); ++j) {
        const double x = inputs[i].GetAsDouble(j);
        inputs[i].SetFromDouble(j, x + eps);
        const double up = Evaluate(f, inputs, nullptr, nullptr);
        inputs[i].SetFromDouble(j, x - eps);
        const double down = Evaluate(f, inputs, nullptr, nullptr);
        inputs[i].SetFromDouble(j, x);
        const double numeric = (up - down) / (2 * eps);
        ASSERT_NEAR(analytic->GetAsDouble(j), numeric, tolerance * (1 + std::abs(numeric)))
            << "input " << i << " element " << j;
      }
    }
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

TEST_F(GradTest, ElementwiseBinary) {
  auto a = Random({2, 3}, 0.5, 2, 1), b = Random({2, 3}, 0.5, 2, 2);
  CheckGradient([](auto& x) { return x[0] + x[1]; }, {a, b});
  CheckGradient([](auto& x) { return x[0] - x[1]; }, {a, b});
  CheckGradient([](auto& x) { return x[0] * x[1]; }, {a, b});
  CheckGradient([](auto& x) { return x[0] / x[1]; }, {a, b});
  CheckGradient([](auto& x) { return Pow(x[0], x[1]); }, {a, b});
  CheckGradient([](auto& x) { return Maximum(x[0], x[1]); }, {a, b});
  CheckGradient([](auto& x) { return Minimum(x[0], x[1]); }, {a, b});
}

TEST_F(GradTest, ElementwiseUnary) {
  auto a = Random({2, 3}, 0.2, 1.5, 3);
  auto s = Random({2, 3}, -1.5, 1.5, 4);
  CheckGradient([](auto& x) { return -x[0]; }, {s});
  CheckGradient([](auto& x) { return Exp(x[0]); }, {s});
  CheckGradient([](auto& x) { return Log(x[0]); }, {a});
  CheckGradient([](auto& x) { return Sqrt(x[0]); }, {a});
  CheckGradient([](auto& x) { return Rsqrt(x[0]); }, {a});
  CheckGradient([](auto& x) { return Tanh(x[0]); }, {s});
  CheckGradient([](auto& x) { return Sigmoid(x[0]); }, {s});
  CheckGradient([](auto& x) { return Abs(x[0]); }, {s});
  CheckGradient([](auto& x) { return Sin(x[0]); }, {s});
  CheckGradient([](auto& x) { return Cos(x[0]); }, {s});
  CheckGradient([](auto& x) { return Relu(x[0]); }, {s});
  CheckGradient([](auto& x) { return Unary(ir::Opcode::kExpm1, x[0]); }, {s});
  CheckGradient([](auto& x) { return Unary(ir::Opcode::kLog1p, x[0]); }, {a});
  CheckGradient([](auto& x) { return Erf(x[0]); }, {s});
  CheckGradient([](auto& x) { return Unary(ir::Opcode::kCopy, x[0]); }, {s});
}

TEST_F(GradTest, SelectClampAndConvert) {
  auto a = Random({5}, -1, 1, 5), b = Random({5}, -1, 1, 6);
  CheckGradient([](auto& x) { return Select(Greater(x[0], x[1]), x[0] * x[0], x[1]); }, {a, b});
  CheckGradient(
      [](auto& x) {
        return Clamp(x[0], -0.5, 0.5);
      },
      {a});
  // Through f32 and back: the gradient survives the round trip; finite
  // differences through f32 rounding are only good to about a percent.
  CheckGradient([](auto& x) { return Cast(Cast(x[0], ElementType::kF32) * Cast(x[0], ElementType::kF32), ElementType::kF64); },
                {a}, 3e-2);
}

TEST_F(GradTest, ShapeOps) {
  auto a = Random({2, 3}, -1, 1, 7), b = Random({2, 2}, -1, 1, 8), v = Random({3}, -1, 1, 9);
  CheckGradient([](auto& x) { return x[0] + x[1]; }, {a, v});  // broadcast
  CheckGradient([](auto& x) { return BroadcastInDim(x[0], {3, 2}, {0}); }, {v});
  CheckGradient([](auto& x) { return Reshape(x[0], {3, 2}); }, {a});
  CheckGradient([](auto& x) { return Transpose(x[0], {1, 0}); }, {a});
  CheckGradient([](auto& x) { return Reverse(x[0], {1}); }, {a});
  CheckGradient([](auto& x) { return Slice(x[0], {0, 0}, {2, 3}, {1, 2}); }, {a});
  CheckGradient([](auto& x) { return Pad(x[0], 0.0, {{1, 0, 1}, {0, 2, 0}}); }, {a});
  CheckGradient([](auto& x) { return Concat({x[0], x[1]}, 1); }, {a, b});
}

TEST_F(GradTest, Reductions) {
  auto a = Random({3, 4}, -1, 1, 10);
  CheckGradient([](auto& x) { return Sum(x[0], {1}); }, {a});
  CheckGradient([](auto& x) { return Mean(x[0]); }, {a});
  CheckGradient([](auto& x) { return ReduceMax(x[0], {0}); }, {a});
  CheckGradient([](auto& x) { return LogSoftmax(x[0], 1); }, {a});
  CheckGradient([](auto& x) { return Softmax(x[0], 1); }, {a});
  auto labels = Random({3, 4}, 0, 1, 11);
  CheckGradient([](auto& x) { return SoftmaxCrossEntropy(x[0], x[1]); }, {a, labels});
}

TEST_F(GradTest, MeanSquaredError) {
  auto p = Random({3, 2}, -1, 1, 16), t = Random({3, 2}, -1, 1, 17);
  CheckGradient([](auto& x) { return MeanSquaredError(x[0], x[1]); }, {p, t});
  double want = 0;
  for (int i = 0; i < 6; ++i) {
    const double d = p.GetAsDouble(i) - t.GetAsDouble(i);
    want += d * d / 6;
  }
  auto got = MeanSquaredError(ctx_->FromLiteral(p, "cpu:0"), ctx_->FromLiteral(t, "cpu:0")).Item();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-6);
}

TEST_F(GradTest, MatrixProducts) {
  auto a = Random({2, 3}, -1, 1, 12), b = Random({3, 4}, -1, 1, 13);
  CheckGradient([](auto& x) { return Matmul(x[0], x[1]); }, {a, b});
  auto c = Random({2, 2, 3}, -1, 1, 14), d = Random({2, 3, 2}, -1, 1, 15);
  CheckGradient([](auto& x) { return Matmul(x[0], x[1]); }, {c, d});
}

TEST_F(GradTest, GatherAddsGradientsBackWhereRowsCameFrom) {
  auto table = Random({5, 3}, -1, 1, 31);
  // Repeated rows (1 twice, 4 three times) sum their gradients.
  auto take = [](auto& t) {
    Tensor ids = t[0].context()->template FromVector<int32_t>(
        ElementType::kS32, {2, 3}, std::vector<int32_t>{1, 4, 0, 4, 1, 4}, "cpu:0");
    return Take(t[0], ids);
  };
  CheckGradient(take, {table});
  // Scalar rows of a vector.
  auto vec = Random({6}, -1, 1, 32);
  CheckGradient([](auto& t) {
    Tensor ids = t[0].context()->template FromVector<int32_t>(
        ElementType::kS32, {4}, std::vector<int32_t>{5, 0, 5, 2}, "cpu:0");
    return Take(t[0], ids) * Take(t[0], ids);
  }, {vec});
}

// Scatter rows: index i of a [N] index vector picks the row of a [rows,
// columns] operand that update row i goes to.
ir::ScatterDims RowScatter() {
  ir::ScatterDims dims;
  dims.update_window_dims = {1};
  dims.inserted_window_dims = {0};
  dims.scatter_dims_to_operand_dims = {0};
  dims.index_vector_dim = 1;
  return dims;
}

TEST_F(GradTest, ScatterAddSendsEachUpdateTheGradientOfWhereItWent) {
  auto base = Random({5, 3}, -1, 1, 33), updates = Random({4, 3}, -1, 1, 34);
  // Rows 1 and 4 take two updates each; the result is squared so that the
  // gradients depend on the values.
  auto scatter = [](auto& t) {
    Tensor ids = t[0].context()->template FromVector<int32_t>(
        ElementType::kS32, {4}, std::vector<int32_t>{1, 4, 4, 1}, "cpu:0");
    Tensor out = ScatterAdd(t[0], ids, t[1], RowScatter());
    return out * out;
  };
  CheckGradient(scatter, {base, updates});
}

TEST_F(GradTest, ScatterReplacingSendsTheOverwrittenRowsNoGradient) {
  auto base = Random({5, 3}, -1, 1, 36), updates = Random({2, 3}, -1, 1, 37);
  // Rows 3 and 0 are overwritten: the base's rows there get no gradient,
  // each update the gradient of where it landed.
  auto scatter = [](auto& t) {
    Tensor ids = t[0].context()->template FromVector<int32_t>(
        ElementType::kS32, {2}, std::vector<int32_t>{3, 0}, "cpu:0");
    Tensor out = Scatter(t[0], ids, t[1], RowScatter());
    return out * out;
  };
  CheckGradient(scatter, {base, updates});
  // And the values: NumPy's base[[3, 0]] = updates.
  Tensor b = ctx_->FromLiteral(base, "cpu:0"), u = ctx_->FromLiteral(updates, "cpu:0");
  Tensor ids = ctx_->FromVector<int32_t>(ElementType::kS32, {2}, {3, 0}, "cpu:0");
  auto got = Scatter(b, ids, u, RowScatter()).ToHost();
  ASSERT_TRUE(got.ok()) << got.status();
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 3; ++c) {
      const double want = r == 3   ? updates.GetAsDouble(c)
                          : r == 0 ? updates.GetAsDouble(3 + c)
                                   : base.GetAsDouble(r * 3 + c);
      EXPECT_EQ(got->GetAsDouble(r * 3 + c), want) << r << "," << c;
    }
  }
}

TEST_F(GradTest, SortAndTopKSendGradientsBackWhereElementsCameFrom) {
  auto x = Random({3, 5}, -1, 1, 35);
  // Weights that differ by position, so that the order matters.
  CheckGradient([](auto& t) {
    Tensor s = Sort(t[0], 1);
    return s * s * s;
  }, {x});
  CheckGradient([](auto& t) { return TopK(t[0], 2).values * 3.0; }, {x});
  CheckGradient([](auto& t) { return Sort(t[0], 0, true) * Sort(t[0], 0, true); }, {x});
}

TEST_F(GradTest, DynamicSlicesAndUpdates) {
  auto x = Random({4, 5}, -1, 1, 41), u = Random({2, 3}, -1, 1, 42);
  auto start = [](const Tensor& like, int32_t v) {
    return like.context()->template FromVector<int32_t>(ElementType::kS32, {},
                                                         std::vector<int32_t>{v}, "cpu:0");
  };
  CheckGradient([&](auto& t) {
    return DynamicSlice(t[0], {start(t[0], 1), start(t[0], 2)}, {2, 3});
  }, {x});
  // A start past the end is clamped: the slice (and its gradient) is the
  // last window.
  CheckGradient([&](auto& t) {
    return DynamicSlice(t[0], {start(t[0], 3), start(t[0], 9)}, {2, 3});
  }, {x});
  CheckGradient([&](auto& t) {
    return DynamicUpdateSlice(t[0], t[1] * t[1], {start(t[0], 2), start(t[0], 1)});
  }, {x, u});
}

TEST_F(GradTest, ConvolutionsAndPooling) {
  auto x = Random({1, 5, 5, 2}, -1, 1, 16), w = Random({3, 3, 2, 2}, -1, 1, 17);
  CheckGradient([](auto& t) { return Conv2D(t[0], t[1], 1, "VALID"); }, {x, w});
  CheckGradient([](auto& t) { return Conv2D(t[0], t[1], 1, "SAME"); }, {x, w});
  CheckGradient([](auto& t) { return Conv2D(t[0], t[1], 2, "SAME"); }, {x, w});
  auto p = Random({1, 4, 4, 2}, -1, 1, 18);
  CheckGradient([](auto& t) { return MaxPool2D(t[0], 2, 2); }, {p});
  CheckGradient([](auto& t) { return AvgPool2D(t[0], 2, 2); }, {p});
  CheckGradient([](auto& t) { return AvgPool2D(t[0], 3, 1); }, {p});
  // Padded (SAME) pooling, as ResNet's stem uses: 3x3 windows, stride 2.
  CheckGradient([](auto& t) { return MaxPool2D(t[0], 3, 2, "SAME"); }, {p});
  CheckGradient([](auto& t) { return AvgPool2D(t[0], 3, 2, "SAME"); }, {p});
  CheckGradient([](auto& t) { return MaxPool2D(t[0], 2, 1, "SAME"); }, {p});
  // Padding on both sides (5x5, 3x3 windows, stride 1: one row and column
  // before and after).
  CheckGradient([](auto& t) { return MaxPool2D(t[0], 3, 1, "SAME"); }, {x});
  CheckGradient([](auto& t) { return AvgPool2D(t[0], 3, 1, "SAME"); }, {x});
}

// The rules' less common paths: reduce-min, convolution with window
// dilation and explicit asymmetric padding, and reduce-window add with
// padding, each against central finite differences.
TEST_F(GradTest, ReduceMinDilatedAndPaddedWindows) {
  auto a = Random({3, 4}, -1, 1, 20);
  CheckGradient([](auto& x) { return Reduce(x[0], Reducer::kMin, {1}, false); }, {a});
  CheckGradient([](auto& x) { return Reduce(x[0], Reducer::kMin, {0}, true); }, {a});

  std::vector<ir::WindowDim> dilated(2);
  dilated[0] = {.size = 2, .stride = 1, .pad_lo = 1, .pad_hi = 0, .window_dilation = 2};
  dilated[1] = {.size = 2, .stride = 2, .pad_lo = 0, .pad_hi = 1};
  auto x = Random({1, 5, 5, 2}, -1, 1, 21), w = Random({2, 2, 2, 3}, -1, 1, 22);
  CheckGradient([&](auto& t) { return Convolution(t[0], t[1], dilated, Nhwc()); }, {x, w});

  std::vector<ir::WindowDim> padded(4);
  padded[1] = {.size = 2, .stride = 1, .pad_lo = 1, .pad_hi = 1};
  padded[2] = {.size = 3, .stride = 2, .pad_lo = 1, .pad_hi = 0};
  auto p = Random({1, 4, 4, 2}, -1, 1, 23);
  CheckGradient([&](auto& t) { return ReduceWindow(t[0], Reducer::kAdd, padded); }, {p});
}

TEST_F(GradTest, GradWithUnusedParameterIsZeroAndErrorsAreReported) {
  Tensor a = ctx_->FromLiteral(Random({2}, -1, 1, 19), "cpu:0");
  Tensor b = ctx_->FromLiteral(Random({2}, -1, 1, 20), "cpu:0");
  auto g = Grad(Sum(a * a), {a, b});
  ASSERT_TRUE(g.ok());
  auto gb = (*g)[1].ToHost();
  ASSERT_TRUE(gb.ok());
  EXPECT_EQ(gb->GetAsDouble(0), 0);
  EXPECT_FALSE(Grad(a * a, {a}).ok());  // not a scalar
}

// Relu's gradient is zero at zero, as PyTorch's and JAX's, where the
// maximum it is made of passes the gradient to its first operand at a tie;
// in both modes.
TEST_F(GradTest, ReluPassesNoGradientAtZeroWhereMaximumDoes) {
  ir::Literal x(ir::Shape(ElementType::kF32, {4}));
  const double values[] = {-1, 0, -0.0, 2};
  for (int i = 0; i < 4; ++i) x.SetFromDouble(i, values[i]);
  for (const bool eager : {false, true}) {
    ctx_->set_eager(eager);
    Tensor t = ctx_->FromLiteral(x, "cpu:0");
    auto relu = Grad(Sum(Relu(t)), {t});
    auto maximum = Grad(Sum(Maximum(t, ZerosLike(t))), {t});
    ASSERT_TRUE(relu.ok()) << relu.status();
    ASSERT_TRUE(maximum.ok()) << maximum.status();
    auto r = (*relu)[0].ToHost();
    auto m = (*maximum)[0].ToHost();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(m.ok()) << m.status();
    const double relu_want[] = {0, 0, 0, 1}, maximum_want[] = {0, 1, 1, 1};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r->GetAsDouble(i), relu_want[i]) << "eager " << eager << " element " << i;
      EXPECT_EQ(m->GetAsDouble(i), maximum_want[i]) << "eager " << eager << " element " << i;
    }
  }
  ctx_->set_eager(false);
}

}  // namespace
}  // namespace kiln::client
