// Conditionals over the embedded service: the branch the selector picks,
// captured values, XLA's rule for an index out of range, errors, nesting in
// device loops, programs keyed by their branches, and gradients through
// the branch that ran.
#include <cmath>

#include "base/status_macros.h"
#include "client/autodiff.h"
#include "client/lazy.h"
#include "client/loop.h"
#include "client/loop_test_util.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using testing::Values;

class CondTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = *embedded::Connect();
    ctx_ = LazyContext::Create(client_.get());
  }
  Tensor Vec(std::vector<float> v) { return testing::Vec(ctx_.get(), std::move(v)); }
  Tensor Pred(bool value) {
    ir::Literal lit(ir::Shape::Scalar(ElementType::kPred));
    lit.SetFromDouble(0, value ? 1 : 0);
    return ctx_->FromLiteral(std::move(lit), "cpu:0");
  }
  Tensor Index(int32_t value) {
    return ctx_->FromVector<int32_t>(ElementType::kS32, {}, {value}, "cpu:0");
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<LazyContext> ctx_;
};

// x * w where `pred`, else x + 1; w is read from outside the branch.
absl::StatusOr<std::vector<Tensor>> ScaleOrShift(const Tensor& pred, const Tensor& x,
                                                 const Tensor& w) {
  return Cond(
      pred, {x},
      [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[0] * w};
      },
      [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[0] + 1.0};
      });
}

TEST_F(CondTest, RunsTheBranchThePredicatePicks) {
  Tensor x = Vec({1, 2, 3});
  Tensor w = Vec({10, 20, 30});
  for (bool pred : {true, false}) {
    auto out = ScaleOrShift(Pred(pred), x, w);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    EXPECT_EQ(Values((*out)[0]), pred ? (std::vector<double>{10, 40, 90})
                                      : (std::vector<double>{2, 3, 4}));
  }
  // A predicate computed in the same program, and several results.
  Tensor pred = Greater(Sum(x), Sum(w));  // false
  auto out = Cond(
      pred, {x, w},
      [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[0], Sum(in[1])};
      },
      [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[1] - in[0], Sum(in[0])};
      });
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t executions = ctx_->metrics().executions;
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{9, 18, 27}));
  EXPECT_EQ(Values((*out)[1]), (std::vector<double>{6}));
  // Both results came out of one run.
  EXPECT_EQ(ctx_->metrics().executions, executions + 1);
}

TEST_F(CondTest, SwitchRunsTheLastBranchForAnIndexOutOfRange) {
  Tensor x = Vec({2});
  std::vector<Branch> branches;
  for (double add : {100.0, 200.0, 300.0}) {
    branches.push_back([add](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
      return std::vector<Tensor>{in[0] + add};
    });
  }
  const std::vector<std::pair<int32_t, double>> cases = {
      {0, 102}, {1, 202}, {2, 302}, {3, 302}, {-1, 302}, {1000, 302}};
  for (const auto& [index, want] : cases) {
    auto out = Switch(Index(index), {x}, branches);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<double>{want})) << "index " << index;
  }
}

TEST_F(CondTest, BadConditionalsAreRefusedWithTheirReason) {
  Tensor x = Vec({1, 2});
  auto same = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0]};
  };
  auto summed = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{Sum(in[0])};
  };
  auto failing = [](const std::vector<Tensor>&) -> absl::StatusOr<std::vector<Tensor>> {
    return absl::InvalidArgumentError("no such layer");
  };
  auto message = [](const absl::StatusOr<std::vector<Tensor>>& r) {
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  auto shapes = Cond(Pred(true), {x}, same, summed);
  EXPECT_NE(message(shapes).find("branch 1 result 0 is f32[], branch 0's f32[2]"),
            std::string::npos) << message(shapes);
  auto selector = Cond(Vec({1}), {x}, same, same);
  EXPECT_NE(message(selector).find("pred[] scalar"), std::string::npos) << message(selector);
  auto three = Switch(Pred(true), {x}, {same, same, same});
  EXPECT_NE(message(three).find("s32[] scalar"), std::string::npos) << message(three);
  auto none = Switch(Index(0), {x}, {});
  EXPECT_FALSE(none.ok());
  auto failed = Cond(Pred(true), {x}, same, failing);
  EXPECT_NE(message(failed).find("conditional branch 1"), std::string::npos) << message(failed);
  EXPECT_NE(message(failed).find("no such layer"), std::string::npos) << message(failed);
  auto empty = Cond(Pred(true), {x}, same, Branch());
  EXPECT_NE(message(empty).find("branch 1 is empty"), std::string::npos) << message(empty);
  // A branch's stand-in used outside the conditional cannot be computed.
  Tensor escaped;
  auto leak = Cond(
      Pred(true), {x},
      [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        escaped = in[0] * 2.0;
        return std::vector<Tensor>{in[0]};
      },
      same);
  ASSERT_TRUE(leak.ok()) << leak.status();
  EXPECT_FALSE(escaped.ToHost().ok());
}

// Feeds run along a device loop body's own token chain: a branch that uses
// them, or a loop with feeds nested in a branch or a body, is refused.
TEST_F(CondTest, BranchesAndNestedLoopsCannotUseFeeds) {
  auto same = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0]};
  };
  auto in_branch = While(2, {Vec({1})}, [&](DeviceLoop& loop, const std::vector<Tensor>& s)
                                            -> absl::StatusOr<std::vector<Tensor>> {
    return Cond(
        Pred(true), {s[0]},
        [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
          return std::vector<Tensor>{in[0] + loop.Infeed(ir::Shape(ElementType::kF32, {1}))};
        },
        same);
  });
  ASSERT_FALSE(in_branch.ok());
  EXPECT_NE(in_branch.status().message().find("reads or writes feeds"), std::string::npos)
      << in_branch.status();
  // A body that drops the branch's error still cannot run its feeds there.
  auto ignored = While(2, {Vec({1})}, [&](DeviceLoop& loop, const std::vector<Tensor>& s)
                                          -> absl::StatusOr<std::vector<Tensor>> {
    Cond(Pred(true), {s[0]},
         [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
           loop.Outfeed(in[0]);
           return std::vector<Tensor>{in[0]};
         },
         same)
        .IgnoreError();
    return std::vector<Tensor>{s[0]};
  });
  ASSERT_FALSE(ignored.ok());
  EXPECT_NE(ignored.status().message().find("inside a conditional branch or a nested loop"),
            std::string::npos) << ignored.status();
  auto nested = While(2, {Vec({1})}, [&](DeviceLoop&, const std::vector<Tensor>& s)
                                         -> absl::StatusOr<std::vector<Tensor>> {
    return While(1, {s[0]}, [](DeviceLoop& inner, const std::vector<Tensor>& t)
                                -> absl::StatusOr<std::vector<Tensor>> {
      return std::vector<Tensor>{t[0] + inner.Infeed(ir::Shape(ElementType::kF32, {1}))};
    });
  });
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("cannot read or write feeds"), std::string::npos)
      << nested.status();
  auto empty = While(1, {Vec({1})}, LoopBody());
  EXPECT_NE(empty.status().message().find("body is empty"), std::string::npos) << empty.status();
}

// Switch takes an s32 index (with a pred, which branch runs would read
// backwards); branches agree in precision as in type.
TEST_F(CondTest, SwitchTakesAnIndexAndBranchesAgreeInPrecision) {
  auto same = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0]};
  };
  auto by_pred = Switch(Pred(false), {Vec({1})}, {same, same});
  ASSERT_FALSE(by_pred.ok());
  EXPECT_NE(by_pred.status().message().find("s32[] scalar"), std::string::npos) << by_pred.status();
  Tensor r = Vec({1, 2}).ToReducedPrecision();
  Tensor b = Cast(Vec({3, 4}), ElementType::kBF16);
  auto mixed = Cond(
      Pred(false), {r},
      [&](const std::vector<Tensor>&) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{b};
      },
      same);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("reduced precision"), std::string::npos)
      << mixed.status();
}

// A conditional inside a device loop's body, reading the carried state:
// s -> s + 1 while s < 3, then s * 2: 0, 1, 2, 3, 6, 12.
TEST_F(CondTest, RunsInsideADeviceLoop) {
  auto out = While(5, {Vec({0})}, [](DeviceLoop&, const std::vector<Tensor>& s)
                                      -> absl::StatusOr<std::vector<Tensor>> {
    Tensor small = Less(Sum(s[0]), Sum(s[0]) * 0.0 + 3.0);
    return Cond(
        small, {s[0]},
        [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
          return std::vector<Tensor>{in[0] + 1.0};
        },
        [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
          return std::vector<Tensor>{in[0] * 2.0};
        });
  });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{12}));
}

// A device loop inside a branch.
TEST_F(CondTest, BranchesMayHoldDeviceLoops) {
  Tensor x = Vec({1});
  auto doubling = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return While(4, {in[0]}, [](DeviceLoop&, const std::vector<Tensor>& s)
                                 -> absl::StatusOr<std::vector<Tensor>> {
      return std::vector<Tensor>{s[0] * 2.0};
    });
  };
  auto same = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0]};
  };
  auto yes = Cond(Pred(true), {x}, doubling, same);
  auto no = Cond(Pred(false), {x}, doubling, same);
  ASSERT_TRUE(yes.ok() && no.ok());
  EXPECT_EQ(Values((*yes)[0]), (std::vector<double>{16}));
  EXPECT_EQ(Values((*no)[0]), (std::vector<double>{1}));
}

// Programs are looked up by their trace, branches included: conditionals
// that differ only inside a branch get programs of their own, and the same
// conditional traced again reuses its program.
TEST_F(CondTest, ProgramsAreKeyedByTheirBranches) {
  Tensor x = Vec({1, 2});
  auto times = [](double k) {
    return [k](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
      return std::vector<Tensor>{in[0] * k};
    };
  };
  std::vector<double> got;
  for (double k : {2.0, 3.0, 2.0}) {
    auto out = Cond(Pred(true), {x}, times(k), times(1));
    ASSERT_TRUE(out.ok()) << out.status();
    got.push_back(Values((*out)[0])[1]);
  }
  EXPECT_EQ(got, (std::vector<double>{4, 6, 4}));
  const int64_t lowerings = ctx_->metrics().lowerings;
  auto again = Cond(Pred(false), {x}, times(3), times(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Values((*again)[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ(ctx_->metrics().lowerings, lowerings);  // keyed, not lowered again
}

TEST_F(CondTest, WorksInEagerMode) {
  ctx_->set_eager(true);
  auto out = ScaleOrShift(Pred(false), Vec({5}), Vec({7}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<double>{6}));
}

// loss = sum(c * cond(sum(x) > 0, x * w, 3 exp(x))): the gradient is that
// of the branch that ran, for the operand x and the captured w.
TEST_F(CondTest, GradientsFlowThroughTheBranchThatRan) {
  const std::vector<float> c = {1, -2, 0.5};
  const std::vector<float> w0 = {0.5, 1.5, -1};
  for (const std::vector<float>& x0 :
       {std::vector<float>{0.2f, 0.3f, -0.1f}, std::vector<float>{-0.2f, 0.3f, -0.4f}}) {
    Tensor x = Vec(x0), w = Vec(w0);
    const bool positive = x0[0] + x0[1] + x0[2] > 0;
    auto out = Cond(
        Greater(Sum(x), Sum(x) * 0.0), {x},
        [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
          return std::vector<Tensor>{in[0] * w};
        },
        [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
          return std::vector<Tensor>{Exp(in[0]) * 3.0};
        });
    ASSERT_TRUE(out.ok()) << out.status();
    Tensor loss = Sum((*out)[0] * Vec(c));
    auto grads = Grad(loss, {x, w});
    ASSERT_TRUE(grads.ok()) << grads.status();
    const std::vector<double> dx = Values((*grads)[0]), dw = Values((*grads)[1]);
    ASSERT_EQ(dx.size(), 3u);
    ASSERT_EQ(dw.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const double want_dx = positive ? w0[i] * c[i] : 3 * std::exp(x0[i]) * c[i];
      const double want_dw = positive ? x0[i] * c[i] : 0;
      EXPECT_NEAR(dx[i], want_dx, 1e-5) << "dx " << i << (positive ? " (x*w)" : " (3 exp x)");
      EXPECT_NEAR(dw[i], want_dw, 1e-6) << "dw " << i << (positive ? " (x*w)" : " (3 exp x)");
    }
  }
}

// Gradients of a conditional with several results, one of them unused by
// the loss and one an integer, and of conditionals nested in a branch.
TEST_F(CondTest, GradientsOfNestedConditionalsAndUnusedResults) {
  Tensor x = Vec({0.5, -1.5});
  Tensor inner_pred = Pred(false);
  auto out = Switch(Index(1), {x}, {
      [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{in[0], in[0], Cast(in[0], ElementType::kS32)};
      },
      [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        ASSIGN_OR_RETURN(std::vector<Tensor> nested, Cond(
            inner_pred, {in[0]},
            [](const std::vector<Tensor>& v) -> absl::StatusOr<std::vector<Tensor>> {
              return std::vector<Tensor>{v[0] * 100.0};
            },
            [](const std::vector<Tensor>& v) -> absl::StatusOr<std::vector<Tensor>> {
              return std::vector<Tensor>{v[0] * v[0]};
            }));
        return std::vector<Tensor>{nested[0], in[0] * 7.0, Cast(in[0], ElementType::kS32)};
      }});
  ASSERT_TRUE(out.ok()) << out.status();
  // Only the first result reaches the loss: d/dx sum(x^2) = 2x.
  auto grads = Grad(Sum((*out)[0]), {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{1, -3}));
  // Both float results: 2x + 7.
  auto both = Grad(Sum((*out)[0]) + Sum((*out)[1]), {x});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(Values((*both)[0]), (std::vector<double>{8, 4}));
}

}  // namespace
}  // namespace kiln::client
