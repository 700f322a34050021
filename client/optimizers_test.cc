// The optimizers against their update rules computed here in double, over
// a few steps with changing gradients.
#include "client/optimizers.h"

#include <cmath>

#include "client/lazy.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

class OptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect();
    ctx_ = LazyContext::Create(client_.get());
  }
  Tensor Vec(const std::vector<double>& v) {
    std::vector<float> f(v.begin(), v.end());
    return ctx_->FromVector<float>(ir::ElementType::kF32, {static_cast<int64_t>(f.size())}, f,
                                   "cpu:0");
  }
  std::vector<double> Values(const Tensor& t) {
    auto lit = t.ToHost();
    EXPECT_TRUE(lit.ok()) << lit.status();
    std::vector<double> out;
    for (int64_t i = 0; lit.ok() && i < lit->element_count(); ++i) out.push_back(lit->GetAsDouble(i));
    return out;
  }
  // The gradient of step `s` for element `i`.
  static double Grad(int s, int i) { return 0.5 * (i + 1) - 0.3 * s + 0.1 * i * s; }

  // Runs `steps` steps of `step_fn` on params {1, -2, 0.5} with Grad().
  template <typename StepFn>
  std::vector<double> Run(int steps, StepFn step_fn) {
    std::vector<Tensor> params = {Vec({1, -2, 0.5})};
    for (int s = 0; s < steps; ++s) {
      std::vector<Tensor> grads = {Vec({Grad(s, 0), Grad(s, 1), Grad(s, 2)})};
      auto updated = step_fn(params, grads);
      EXPECT_TRUE(updated.ok()) << updated.status();
      params = *updated;
    }
    return Values(params[0]);
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

TEST_F(OptimizerTest, SgdWithMomentumNesterovAndWeightDecay) {
  for (bool nesterov : {false, true}) {
    for (double wd : {0.0, 0.1}) {
      Sgd sgd(0.1, 0.9, nesterov, wd);
      std::vector<double> got = Run(4, [&](auto& p, auto& g) { return sgd.Step(p, g); });
      std::vector<double> p = {1, -2, 0.5}, v(3, 0);
      for (int s = 0; s < 4; ++s) {
        for (int i = 0; i < 3; ++i) {
          const double g = Grad(s, i) + wd * p[i];
          v[i] = 0.9 * v[i] + g;
          p[i] -= 0.1 * (nesterov ? g + 0.9 * v[i] : v[i]);
        }
      }
      for (int i = 0; i < 3; ++i) {
        EXPECT_NEAR(got[i], p[i], 1e-5) << "nesterov " << nesterov << " wd " << wd;
      }
    }
  }
}

TEST_F(OptimizerTest, AdamAndAdamW) {
  for (double wd : {0.0, 0.05}) {
    AdamW adam(0.01, wd);  // AdamW with no decay is Adam
    std::vector<double> got = Run(5, [&](auto& p, auto& g) { return adam.Step(p, g); });
    std::vector<double> p = {1, -2, 0.5}, m(3, 0), v(3, 0);
    for (int s = 0; s < 5; ++s) {
      for (int i = 0; i < 3; ++i) {
        const double g = Grad(s, i);
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        const double m_hat = m[i] / (1 - std::pow(0.9, s + 1));
        const double v_hat = v[i] / (1 - std::pow(0.999, s + 1));
        p[i] = p[i] - 0.01 * wd * p[i] - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-5) << "weight decay " << wd;
    // The state is there for checkpoints: five steps counted.
    EXPECT_EQ(Values(adam.step_count())[0], 5);
    EXPECT_EQ(adam.first_moment().size(), 1u);
  }
  Adam plain(0.01);
  std::vector<double> a = Run(3, [&](auto& p, auto& g) { return plain.Step(p, g); });
  AdamW no_decay(0.01, 0.0);
  std::vector<double> b = Run(3, [&](auto& p, auto& g) { return no_decay.Step(p, g); });
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace kiln::client
