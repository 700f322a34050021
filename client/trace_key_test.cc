// Trace keys: equal structure gives equal keys and Lower's parameter order;
// anything that changes the module changes the key; a context runs a trace
// it has keyed before without lowering it again.
#include "client/trace_key.h"

#include "client/lazy.h"
#include "client/lower.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;

class TraceKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect({});
    ctx_ = LazyContext::Create(client_.get());
  }
  Tensor Vec(std::vector<float> v) {
    return ctx_->FromVector<float>(ElementType::kF32, {int64_t(v.size())}, v, "cpu:0");
  }
  static std::string Key(const Tensor& t) {
    auto key = KeyOfTrace({t.node()});
    EXPECT_TRUE(key.ok()) << key.status();
    return key.ok() ? key->bytes : "";
  }
  std::vector<double> Values(const Tensor& t) {
    auto lit = t.ToHost();
    EXPECT_TRUE(lit.ok()) << lit.status();
    std::vector<double> out;
    for (int64_t i = 0; lit.ok() && i < lit->element_count(); ++i) {
      out.push_back(lit->GetAsDouble(i));
    }
    return out;
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

TEST_F(TraceKeyTest, EqualStructureHasEqualKeysAndLowersParameterOrder) {
  Tensor a1 = Vec({1, 2, 3}), b1 = Vec({4, 5, 6});
  Tensor a2 = Vec({7, 8, 9}), b2 = Vec({0, 1, 0});
  Tensor y1 = (b1 * 2.0 + a1) * b1;
  Tensor y2 = (b2 * 2.0 + a2) * b2;
  auto k1 = KeyOfTrace({y1.node()});
  auto k2 = KeyOfTrace({y2.node()});
  ASSERT_TRUE(k1.ok() && k2.ok());
  EXPECT_EQ(k1->bytes, k2->bytes);
  auto lowered = Lower({y1.node()});
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(k1->params, lowered->params);
  ASSERT_EQ(k2->params.size(), 2u);
  EXPECT_EQ(k2->params[0], b2.node());
  EXPECT_EQ(k2->params[1], a2.node());
}

TEST_F(TraceKeyTest, WhatChangesTheModuleChangesTheKey) {
  Tensor a = Vec({1, 2, 3}), b = Vec({4, 5, 6});
  const std::string base = Key(a * 2.0 + b);
  EXPECT_NE(Key(a * 3.0 + b), base);         // a constant's value
  EXPECT_NE(Key(a * 2.0 - b), base);         // an op
  EXPECT_NE(Key(b * 2.0 + b), base);         // one input read twice instead of two
  EXPECT_NE(Key(Vec({1, 2, 3, 4}) * 2.0 + Vec({1, 2, 3, 4})), base);  // a shape
  EXPECT_NE(Key(Sum(a, {0})), Key(ReduceMax(a, {0})));                 // a reducer
  EXPECT_EQ(Key(a * 2.0 + b), base);
}

TEST_F(TraceKeyTest, AKeyedTraceRunsWithoutLoweringAgain) {
  auto step = [&](std::vector<float> x, double scale) {
    Tensor y = Vec(x) * scale + 1.0;
    EXPECT_TRUE(ctx_->Barrier("cpu:0").ok());
    return Values(y);
  };
  EXPECT_EQ(step({1, 2}, 2.0), (std::vector<double>{3, 5}));
  EXPECT_EQ(ctx_->metrics().lowerings, 1);
  EXPECT_EQ(step({5, 6}, 2.0), (std::vector<double>{11, 13}));
  EXPECT_EQ(step({0, -1}, 2.0), (std::vector<double>{1, -1}));
  EXPECT_EQ(ctx_->metrics().lowerings, 1);
  EXPECT_EQ(ctx_->metrics().executions, 3);
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 1);
  // Another constant is another program.
  EXPECT_EQ(step({1, 2}, 3.0), (std::vector<double>{4, 7}));
  EXPECT_EQ(ctx_->metrics().lowerings, 2);
}

}  // namespace
}  // namespace kiln::client
