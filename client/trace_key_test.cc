// Trace keys: equal structure gives equal keys and Lower's parameter order;
// anything that changes the module changes the key; a context runs a trace
// it has keyed before without lowering it again.
#include "client/trace_key.h"

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <utility>

#include "client/lazy.h"
#include "client/loop.h"
#include "client/lower.h"
#include "compiler/ir/fingerprint.h"
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
    return ctx_->FromVector<float>(ElementType::kF32, {int64_t(v.size())}, v,
                                   "cpu:0");
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

// A walk's numbers are the order nodes were added in, before and after
// the inline list gives way to a hash map.
TEST(NodeNumbersTest, NumbersAreTheOrderOfAddition) {
  std::vector<Node> nodes(40);
  NodeNumbers numbers;
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_FALSE(numbers.contains(&nodes[i]));
    EXPECT_EQ(numbers.Add(&nodes[i]), static_cast<int64_t>(i));
    for (size_t j = 0; j <= i; ++j) {
      ASSERT_EQ(numbers.Find(&nodes[j]), static_cast<int64_t>(j)) << "after " << i + 1;
    }
  }
  EXPECT_EQ(numbers.size(), 40);
  Node other;
  EXPECT_EQ(numbers.Find(&other), -1);
}

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
  EXPECT_EQ(std::vector<std::shared_ptr<Node>>(k1->params.begin(), k1->params.end()),
            lowered->params);
  ASSERT_EQ(k2->params.size(), 2u);
  EXPECT_EQ(k2->params[0], b2.node());
  EXPECT_EQ(k2->params[1], a2.node());
}

TEST_F(TraceKeyTest, WhatChangesTheModuleChangesTheKey) {
  Tensor a = Vec({1, 2, 3}), b = Vec({4, 5, 6});
  const std::string base = Key(a * 2.0 + b);
  EXPECT_NE(Key(a * 3.0 + b), base);  // a constant's value
  EXPECT_NE(Key(a * 2.0 - b), base);  // an op
  EXPECT_NE(Key(b * 2.0 + b), base);  // one input read twice instead of two
  EXPECT_NE(Key(Vec({1, 2, 3, 4}) * 2.0 + Vec({1, 2, 3, 4})), base);  // a shape
  EXPECT_NE(Key(Sum(a, {0})), Key(ReduceMax(a, {0})));  // a reducer
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

// What a trace lowers to, parameters in order, or Lower's error.
struct LowerResult {
  absl::Status status;
  std::string module;  // ir::CanonicalBytes: equal exactly for one program
  NodeList params;
};

LowerResult LowerOf(const std::vector<Tensor>& outputs) {
  std::vector<std::shared_ptr<Node>> nodes;
  for (const Tensor& t : outputs) nodes.push_back(t.node());
  LowerResult r;
  absl::StatusOr<Lowered> lowered = Lower(nodes);
  if (!lowered.ok()) {
    r.status = lowered.status();
    return r;
  }
  r.module = ir::CanonicalBytes(*lowered->module);
  r.params.assign(lowered->params.begin(), lowered->params.end());
  return r;
}

absl::StatusOr<TraceKey> KeyOf(const std::vector<Tensor>& outputs) {
  std::vector<std::shared_ptr<Node>> nodes;
  for (const Tensor& t : outputs) nodes.push_back(t.node());
  return KeyOfTrace(nodes);
}

// The property the cheap step relies on: the key's parameters are Lower's,
// and two traces with one key lower to one module.
void ExpectKeyDecidesModule(const std::vector<Tensor>& a,
                            const std::vector<Tensor>& b,
                            const std::string& what) {
  absl::StatusOr<TraceKey> ka = KeyOf(a), kb = KeyOf(b);
  LowerResult la = LowerOf(a), lb = LowerOf(b);
  if (ka.ok() && la.status.ok()) {
    EXPECT_EQ(ka->params, la.params) << what;
  }
  if (kb.ok() && lb.status.ok()) {
    EXPECT_EQ(kb->params, lb.params) << what;
  }
  if (!ka.ok() || !kb.ok() || ka->bytes != kb->bytes) return;
  EXPECT_EQ(la.status.ok(), lb.status.ok())
      << what << ": " << la.status << " / " << lb.status;
  EXPECT_TRUE(la.module == lb.module) << what << ": one key, two modules";
}

ir::Literal F32Bits(uint32_t bits) {
  ir::Literal l(ir::Shape::Scalar(ElementType::kF32));
  std::memcpy(l.mutable_bytes().data(), &bits, 4);
  return l;
}

// A random trace over f32[3] tensors: elementwise ops, odd constants (-0,
// NaN payloads), reductions, bf16 round trips, selects, device loops with
// captured values (some nested), and nodes realized part way. `fork_at`
// switches to `fork_seed`'s choices from that step on, so two traces share
// a prefix and may or may not differ after it.
std::vector<Tensor> RandomTrace(LazyContext* ctx,
                                const std::vector<Tensor>& inputs,
                                uint64_t seed, int fork_at,
                                uint64_t fork_seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> pool = inputs;
  auto pick = [&]() -> Tensor { return pool[rng() % pool.size()]; };
  const ir::Literal consts[] = {
      ir::Literal::Scalar<float>(ElementType::kF32, 2.0f),
      ir::Literal::Scalar<float>(ElementType::kF32, 0.0f),
      ir::Literal::Scalar<float>(ElementType::kF32, -0.0f),
      F32Bits(0x7fc00001),
      F32Bits(0x7fc00002),
  };
  const int steps = 4 + static_cast<int>(rng() % 10);
  for (int step = 0; step < steps; ++step) {
    if (step == fork_at) rng.seed(fork_seed);
    Tensor x = pick(), y = pick();
    switch (rng() % 10) {
      case 0: {
        const ir::Opcode ops[] = {ir::Opcode::kAdd, ir::Opcode::kSubtract,
                                  ir::Opcode::kMultiply, ir::Opcode::kMaximum,
                                  ir::Opcode::kMinimum};
        pool.push_back(Binary(ops[rng() % 5], x, y));
        break;
      }
      case 1:
        pool.push_back(x * ctx->Constant(consts[rng() % 5], "cpu:0"));
        break;
      case 2:
        pool.push_back(rng() % 2 ? -x : Abs(x));
        break;
      case 3:
        pool.push_back(x + (rng() % 2 ? Sum(y, {0}) : ReduceMax(y, {0})));
        break;
      case 4:
        pool.push_back(
            Select(rng() % 2 ? Greater(x, y) : LessEqual(x, y), x, y));
        break;
      case 5:
        pool.push_back(x.ToReducedPrecision().ToFullPrecision());
        break;
      case 6:
        pool.push_back(Reverse(x, {0}));
        break;
      case 7:
      case 8: {
        // A loop reading one or two values from outside (captures), maybe
        // with a loop inside its body. (An inner loop whose state comes from
        // the outer state does not lower today: loop.cc takes the inner
        // while node for a capture of the outer loop. Key and Lower must
        // still agree on it.)
        Tensor c1 = pick(), c2 = pick();
        const int shape = static_cast<int>(rng() % 4);
        const int64_t trips = 1 + static_cast<int64_t>(rng() % 3);
        auto out =
            While(trips, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s) {
              Tensor next = s[0] * c1;
              if (shape & 1) next = next + c2;
              if (shape & 2) {
                const Tensor inner_state = rng() % 2 ? c2 : s[0];
                auto inner = While(
                    2, {inner_state},
                    [&](DeviceLoop&, const std::vector<Tensor>& t) {
                      return absl::StatusOr<std::vector<Tensor>>({t[0] + c1});
                    });
                if (!inner.ok())
                  return absl::StatusOr<std::vector<Tensor>>(inner.status());
                next = next - (*inner)[0];
              }
              return absl::StatusOr<std::vector<Tensor>>({next});
            });
        if (out.ok()) pool.push_back((*out)[0]);
        break;
      }
      case 9:
        // Realized between barriers: the node becomes a parameter.
        (void)ctx->Realize({x});
        break;
    }
  }
  std::vector<Tensor> outputs;
  outputs.push_back(pool.back());
  if (rng() % 2) outputs.push_back(pick());
  std::vector<Tensor> live;
  for (const Tensor& t : outputs) {
    if (t.status().ok() && !t.node()->realized()) live.push_back(t);
  }
  return live;
}

TEST_F(TraceKeyTest, RandomTracesWithOneKeyLowerToOneModule) {
  int equal_keys = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::vector<Tensor> in_a = {Vec({1, 2, 3}), Vec({4, 5, 6}),
                                Vec({-1, 0, 1})};
    std::vector<Tensor> in_b = {Vec({7, 8, 9}), Vec({0, 5, 0}), Vec({2, 2, 2})};
    std::vector<Tensor> a = RandomTrace(ctx_.get(), in_a, seed, -1, 0);
    std::mt19937_64 fork(seed * 7919 + 1);
    const bool same_inputs = fork() % 3 == 0;
    const int fork_at = static_cast<int>(fork() % 12);
    const uint64_t fork_seed = fork();
    std::vector<Tensor> b = RandomTrace(ctx_.get(), same_inputs ? in_a : in_b,
                                        seed, fork_at, fork_seed);
    if (a.empty() || b.empty()) continue;
    ExpectKeyDecidesModule(a, b, absl::StrCat("seed ", seed));
    auto ka = KeyOf(a), kb = KeyOf(b);
    if (ka.ok() && kb.ok() && ka->bytes == kb->bytes) ++equal_keys;
  }
  // The forks must also produce equal structures, or this proves little.
  EXPECT_GT(equal_keys, 20);
}

// The bytes of what `outputs` hold after `ctx` realizes them, or the error.
std::vector<std::string> RealizedBytes(LazyContext* ctx,
                                       const std::vector<Tensor>& outputs) {
  std::vector<std::string> out;
  absl::Status st = ctx->Realize(outputs);
  if (!st.ok()) return {st.ToString()};
  for (const Tensor& t : outputs) {
    auto lit = t.ToHost();
    if (!lit.ok()) {
      out.push_back(lit.status().ToString());
      continue;
    }
    out.push_back(
        lit->shape().ToString() +
        std::string(reinterpret_cast<const char*>(lit->bytes().data()),
                    lit->bytes().size()));
  }
  return out;
}

// End to end: a context that ran many traces before (so most barriers take
// a keyed program) computes what a fresh context computes, bit for bit.
TEST_F(TraceKeyTest, KeyedProgramsComputeWhatFreshContextsCompute) {
  int keyed = 0;
  for (uint64_t seed = 0; seed < 120; ++seed) {
    std::mt19937_64 fork(seed * 7919 + 1);
    const int fork_at = static_cast<int>(fork() % 12);
    const uint64_t fork_seed = fork();
    auto inputs = [&](LazyContext* ctx) {
      auto v = [&](std::vector<float> x) {
        return ctx->FromVector<float>(ElementType::kF32, {3}, x, "cpu:0");
      };
      return std::vector<Tensor>{v({1, 2, 3}), v({4, 5, 6}), v({-1, 0, 1})};
    };
    auto other_inputs = [&](LazyContext* ctx) {
      auto v = [&](std::vector<float> x) {
        return ctx->FromVector<float>(ElementType::kF32, {3}, x, "cpu:0");
      };
      return std::vector<Tensor>{v({7, 8, 9}), v({0, 5, 0}), v({2, 2, 2})};
    };
    std::vector<Tensor> a =
        RandomTrace(ctx_.get(), inputs(ctx_.get()), seed, -1, 0);
    if (!a.empty()) RealizedBytes(ctx_.get(), a);
    const int64_t lowerings = ctx_->metrics().lowerings;
    std::vector<Tensor> b = RandomTrace(ctx_.get(), other_inputs(ctx_.get()),
                                        seed, fork_at, fork_seed);
    if (b.empty()) continue;
    std::vector<std::string> got = RealizedBytes(ctx_.get(), b);
    if (ctx_->metrics().lowerings == lowerings) ++keyed;

    std::shared_ptr<LazyContext> fresh = LazyContext::Create(client_.get());
    std::vector<Tensor> b2 = RandomTrace(fresh.get(), other_inputs(fresh.get()),
                                         seed, fork_at, fork_seed);
    EXPECT_EQ(got, RealizedBytes(fresh.get(), b2)) << "seed " << seed;
  }
  EXPECT_GT(keyed, 10);
}

// A replicated program and a single one share a key (replication is chosen
// by the parameters, not the module); each run gets its own parameters.
TEST(TraceKeyReplicas, OneKeyRunsReplicatedAndNot) {
  embedded::Options options;
  options.devices = "cpu:2";
  auto client = *embedded::Connect(options);
  auto ctx = LazyContext::Create(client.get());
  auto lit = [](std::vector<float> v) {
    return ir::Literal::FromVector<float>(ElementType::kF32, {2}, v);
  };
  auto values = [](const ir::Literal& l) {
    return std::vector<double>{l.GetAsDouble(0), l.GetAsDouble(1)};
  };
  Tensor once = ctx->FromLiteral(lit({1, 2}), "cpu:0");
  Tensor s1 = CrossReplicaSum(once) * 2.0;
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  EXPECT_EQ(values(*s1.ToHost()), (std::vector<double>{2, 4}));
  Tensor both = ctx->FromReplicaLiterals({lit({1, 2}), lit({10, 20})},
                                         {"cpu:0", "cpu:1"});
  Tensor s2 = CrossReplicaSum(both) * 2.0;
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  EXPECT_EQ(ctx->metrics().lowerings, 1);
  EXPECT_EQ(s2.replica_count(), 2);
  EXPECT_EQ(values(*s2.ToHost()), (std::vector<double>{22, 44}));
  Tensor again = ctx->FromLiteral(lit({3, 4}), "cpu:0");
  Tensor s3 = CrossReplicaSum(again) * 2.0;
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  EXPECT_EQ(s3.replica_count(), 1);
  EXPECT_EQ(values(*s3.ToHost()), (std::vector<double>{6, 8}));
}

// Values the module's text cannot tell apart still give different keys.
TEST_F(TraceKeyTest, ConstantBitsAreKeyed) {
  Tensor a = Vec({1, 2, 3});
  auto times = [&](const ir::Literal& c) {
    return Key(a * ctx_->Constant(c, "cpu:0"));
  };
  EXPECT_NE(times(ir::Literal::Scalar<float>(ElementType::kF32, 0.0f)),
            times(ir::Literal::Scalar<float>(ElementType::kF32, -0.0f)));
  EXPECT_NE(times(F32Bits(0x7fc00001)), times(F32Bits(0x7fc00002)));
  Tensor h = a.ToReducedPrecision();
  EXPECT_NE(Key(h * 1.0), Key(h * 1.0078125));  // one bf16 ulp apart
}

// A reducer's computation is chosen by the operand's type.
TEST_F(TraceKeyTest, ReducerTypeIsKeyed) {
  Tensor a = Vec({1, 2, 3});
  Tensor p = Greater(
      a, ctx_->Constant(ir::Literal::Scalar<float>(ElementType::kF32, 1.5f),
                        "cpu:0"));
  ExpectKeyDecidesModule(
      {Sum(a, {0})},
      {Cast(Sum(Cast(a, ElementType::kS32), {0}), ElementType::kF32)},
      "sum f32 / s32");
  EXPECT_NE(Key(Reduce(p, Reducer::kMax, {0}, false)),
            Key(Reduce(p, Reducer::kMin, {0}, false)));
}

TEST_F(TraceKeyTest, LoopsKeyTheirBodiesAndCaptures) {
  Tensor x = Vec({1, 2, 3}), c = Vec({2, 2, 2}), d = Vec({3, 3, 3});
  auto loop = [&](const Tensor& capture, int64_t trips, double k) {
    auto out =
        While(trips, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s) {
          return absl::StatusOr<std::vector<Tensor>>({s[0] * capture + k});
        });
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0];
  };
  const std::string base = Key(loop(c, 3, 1.0));
  EXPECT_EQ(Key(loop(d, 3, 1.0)), base);  // another capture of one shape
  EXPECT_NE(Key(loop(c, 4, 1.0)), base);  // the trip count
  EXPECT_NE(Key(loop(c, 3, 2.0)), base);  // a constant in the body
  EXPECT_NE(Key(loop(x, 3, 1.0)), base);  // the state read as the capture too
  // A capture computed outside, and the loop's output captured by another.
  Tensor lazy = c * 2.0;
  Tensor first = loop(lazy, 2, 1.0);
  Tensor second = loop(first, 2, 1.0);
  ExpectKeyDecidesModule({second}, {loop(loop(d * 2.0, 2, 1.0), 2, 1.0)},
                         "chained loops");
}

// Tuple-shaped nodes (infeeds), the body's effects, and a value the outer
// trace and a loop body share.
TEST_F(TraceKeyTest, FeedsEffectsAndSharedNodesAreKeyed) {
  auto feeding = [&](int64_t width, bool outfeed) {
    auto out = While(
        2, {Vec({0, 0})}, [&](DeviceLoop& loop, const std::vector<Tensor>& s) {
          Tensor in = loop.Infeed(ir::Shape(ElementType::kF32, {width}));
          Tensor next = s[0] + (width == 2 ? in : Slice(in, {0}, {2}));
          if (outfeed) loop.Outfeed(next);
          return absl::StatusOr<std::vector<Tensor>>({next});
        });
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0];
  };
  const std::string base = Key(feeding(2, true));
  EXPECT_EQ(Key(feeding(2, true)), base);
  EXPECT_NE(Key(feeding(3, true)), base);
  EXPECT_NE(Key(feeding(2, false)), base);
  ExpectKeyDecidesModule({feeding(2, true)}, {feeding(2, false)}, "outfeed");

  Tensor x = Vec({1, 2, 3});
  auto body_reads = [&](const Tensor& v) {
    auto out = While(2, {x}, [&](DeviceLoop&, const std::vector<Tensor>& s) {
      return absl::StatusOr<std::vector<Tensor>>({s[0] + v});
    });
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0];
  };
  Tensor shared = x * 2.0;
  Tensor other = x * 2.0;  // the same value, another node
  std::vector<Tensor> one = {body_reads(shared), shared * 3.0};
  std::vector<Tensor> two = {body_reads(other), (x * 2.0) * 3.0};
  ExpectKeyDecidesModule(one, two, "shared capture");
  auto k1 = KeyOf(one), k2 = KeyOf(two);
  ASSERT_TRUE(k1.ok() && k2.ok());
  EXPECT_NE(k1->bytes, k2->bytes);
}

TEST_F(TraceKeyTest, EagerOpsTakeKeyedPrograms) {
  ctx_->set_eager(true);
  Tensor a = Vec({1, 2});
  Tensor b = a * 2.0;
  Tensor c = b * 2.0;  // b's programs again, reading b
  Tensor d = a * 3.0;
  EXPECT_EQ(Values(b), (std::vector<double>{2, 4}));
  EXPECT_EQ(Values(c), (std::vector<double>{4, 8}));
  EXPECT_EQ(Values(d), (std::vector<double>{3, 6}));
  // Each product is two programs (the scalar's broadcast, the multiply);
  // new are the broadcasts of 2 and of 3 and the multiply.
  EXPECT_EQ(ctx_->metrics().executions, 6);
  EXPECT_EQ(ctx_->metrics().lowerings, 3);
}

// Every field of ir::Attributes and of the structs in it changes the key
// (trace_key.cc counts the fields, so a new one stops its build).
TEST_F(TraceKeyTest, EveryAttributeIsKeyed) {
  Tensor a = Vec({1, 2, 3});
  using Edit = std::function<void(ir::Attributes&)>;
  auto key_with = [&](const Edit& edit) {
    auto n = std::make_shared<Node>();
    n->op = ir::Opcode::kAdd;
    n->shape = a.shape();
    n->operands = {a.node(), a.node()};
    n->attrs.Mutable().slice = {ir::SliceDim{}};
    n->attrs.Mutable().padding = {ir::PadDim{}};
    n->attrs.Mutable().window = {ir::WindowDim{}};
    n->attrs.Mutable().replica_groups = {{0}};
    n->attrs.Mutable().operand_precision = {ir::Precision::kDefault};
    edit(n->attrs.Mutable());
    absl::StatusOr<TraceKey> key = KeyOfTrace({n});
    EXPECT_TRUE(key.ok()) << key.status();
    return key.ok() ? key->bytes : "";
  };
  const std::string base = key_with([](ir::Attributes&) {});
  const std::vector<std::pair<const char*, Edit>> edits = {
      {"dimensions", [](ir::Attributes& x) { x.dimensions = {1}; }},
      {"slice_sizes", [](ir::Attributes& x) { x.slice_sizes = {1}; }},
      {"slice.start", [](ir::Attributes& x) { x.slice[0].start = 1; }},
      {"slice.limit", [](ir::Attributes& x) { x.slice[0].limit = 1; }},
      {"slice.stride", [](ir::Attributes& x) { x.slice[0].stride = 2; }},
      {"padding.lo", [](ir::Attributes& x) { x.padding[0].lo = 1; }},
      {"padding.hi", [](ir::Attributes& x) { x.padding[0].hi = 1; }},
      {"padding.interior",
       [](ir::Attributes& x) { x.padding[0].interior = 1; }},
      {"window.size", [](ir::Attributes& x) { x.window[0].size = 2; }},
      {"window.stride", [](ir::Attributes& x) { x.window[0].stride = 2; }},
      {"window.pad_lo", [](ir::Attributes& x) { x.window[0].pad_lo = 1; }},
      {"window.pad_hi", [](ir::Attributes& x) { x.window[0].pad_hi = 1; }},
      {"window.base_dilation",
       [](ir::Attributes& x) { x.window[0].base_dilation = 2; }},
      {"window.window_dilation",
       [](ir::Attributes& x) { x.window[0].window_dilation = 2; }},
      {"dot.lhs_batch", [](ir::Attributes& x) { x.dot.lhs_batch = {0}; }},
      {"dot.rhs_batch", [](ir::Attributes& x) { x.dot.rhs_batch = {0}; }},
      {"dot.lhs_contracting",
       [](ir::Attributes& x) { x.dot.lhs_contracting = {0}; }},
      {"dot.rhs_contracting",
       [](ir::Attributes& x) { x.dot.rhs_contracting = {0}; }},
      {"conv.input_batch", [](ir::Attributes& x) { x.conv.input_batch = 3; }},
      {"conv.input_feature",
       [](ir::Attributes& x) { x.conv.input_feature = 3; }},
      {"conv.input_spatial",
       [](ir::Attributes& x) { x.conv.input_spatial = {1}; }},
      {"conv.kernel_input_feature",
       [](ir::Attributes& x) { x.conv.kernel_input_feature = 3; }},
      {"conv.kernel_output_feature",
       [](ir::Attributes& x) { x.conv.kernel_output_feature = 3; }},
      {"conv.kernel_spatial",
       [](ir::Attributes& x) { x.conv.kernel_spatial = {1}; }},
      {"conv.output_batch", [](ir::Attributes& x) { x.conv.output_batch = 3; }},
      {"conv.output_feature",
       [](ir::Attributes& x) { x.conv.output_feature = 3; }},
      {"conv.output_spatial",
       [](ir::Attributes& x) { x.conv.output_spatial = {1}; }},
      {"feature_group_count",
       [](ir::Attributes& x) { x.feature_group_count = 2; }},
      {"batch_group_count", [](ir::Attributes& x) { x.batch_group_count = 2; }},
      {"gather.offset_dims",
       [](ir::Attributes& x) { x.gather.offset_dims = {0}; }},
      {"gather.collapsed_slice_dims",
       [](ir::Attributes& x) { x.gather.collapsed_slice_dims = {0}; }},
      {"gather.start_index_map",
       [](ir::Attributes& x) { x.gather.start_index_map = {0}; }},
      {"gather.index_vector_dim",
       [](ir::Attributes& x) { x.gather.index_vector_dim = 1; }},
      {"scatter.update_window_dims",
       [](ir::Attributes& x) { x.scatter.update_window_dims = {0}; }},
      {"scatter.inserted_window_dims",
       [](ir::Attributes& x) { x.scatter.inserted_window_dims = {0}; }},
      {"scatter.scatter_dims_to_operand_dims",
       [](ir::Attributes& x) { x.scatter.scatter_dims_to_operand_dims = {0}; }},
      {"scatter.index_vector_dim",
       [](ir::Attributes& x) { x.scatter.index_vector_dim = 1; }},
      {"direction",
       [](ir::Attributes& x) { x.direction = ir::ComparisonDirection::kGe; }},
      {"parameter_number", [](ir::Attributes& x) { x.parameter_number = 1; }},
      {"tuple_index", [](ir::Attributes& x) { x.tuple_index = 1; }},
      {"iota_dimension", [](ir::Attributes& x) { x.iota_dimension = 1; }},
      {"replica_groups", [](ir::Attributes& x) { x.replica_groups[0] = {1}; }},
      {"source_target_pairs", [](ir::Attributes& x) { x.source_target_pairs = {{0, 1}}; }},
      {"exponent_bits", [](ir::Attributes& x) { x.exponent_bits = 5; }},
      {"mantissa_bits", [](ir::Attributes& x) { x.mantissa_bits = 10; }},
      {"distribution",
       [](ir::Attributes& x) {
         x.distribution = ir::RngDistribution::kNormal;
       }},
      {"is_stable", [](ir::Attributes& x) { x.is_stable = true; }},
      {"operand_precision",
       [](ir::Attributes& x) {
         x.operand_precision[0] = ir::Precision::kHighest;
       }},
      {"custom_call_target",
       [](ir::Attributes& x) { x.custom_call_target = "f"; }},
      {"config", [](ir::Attributes& x) { x.config = "c"; }},
      {"literal",
       [](ir::Attributes& x) {
         x.literal = ir::Literal::Scalar<float>(ElementType::kF32, 1.0f);
       }},
      {"literal tuple",
       [](ir::Attributes& x) {
         x.literal = ir::Literal::Tuple(
             {ir::Literal::Scalar<float>(ElementType::kF32, 0.0f)});
       }},
  };
  std::set<std::string> seen = {base};
  for (const auto& [name, edit] : edits) {
    EXPECT_TRUE(seen.insert(key_with(edit)).second)
        << name << " is not keyed apart";
  }
}

// Realize keys its programs by the device's name, length first, then the
// trace's key. Without the length, a device name that ends in "\n" and the
// first bytes of another trace's key would make a constant-only trace look
// like that trace on cpu:0, and the context would run the other program
// and hand its results to these outputs. This builds such a name. (Only
// odd device names could do this, but the key is meant to be exact.)
TEST_F(TraceKeyTest, DeviceNameCannotRunIntoTheKey) {
  auto f32 = [](float v) {
    return ir::Literal::Scalar<float>(ElementType::kF32, v);
  };
  // Trace B: two f32 constants. Its key is record(5), record(7), then 'R',
  // the count and two ids.
  absl::StatusOr<TraceKey> b_key =
      KeyOf({ctx_->Constant(f32(5), "probe"), ctx_->Constant(f32(7), "probe")});
  ASSERT_TRUE(b_key.ok());
  const std::string& b = b_key->bytes;
  constexpr size_t kSmallInt = 1;  // a key's integers below 64 take a byte
  const size_t record = (b.size() - 1 - 3 * kSmallInt) / 2;
  // Trace A on cpu:0: a u8 constant holding "\n" and B's first record up
  // to its last two counts (both zero, as the u8 literal's tuple count and
  // operand count are), then the same 7. A's key ends in "\n" + B's key.
  const std::string payload = "\n" + b.substr(0, record - 2 * kSmallInt);
  ir::Literal bytes(ir::Shape(ElementType::kU8, {int64_t(payload.size())}));
  std::memcpy(bytes.mutable_bytes().data(), payload.data(), payload.size());
  Tensor c1 = ctx_->Constant(bytes, "cpu:0");
  Tensor d1 = ctx_->Constant(f32(7), "cpu:0");
  absl::StatusOr<TraceKey> a_key = KeyOf({c1, d1});
  ASSERT_TRUE(a_key.ok());
  const size_t cut = a_key->bytes.size() - b.size();
  ASSERT_EQ(a_key->bytes.substr(cut - 1), "\n" + b);
  ASSERT_TRUE(ctx_->Realize({c1, d1}).ok());

  // "cpu:0" + "\n" + A's key == device_b + "\n" + B's key.
  const std::string device_b = "cpu:0\n" + a_key->bytes.substr(0, cut - 1);
  Tensor c2 = ctx_->Constant(f32(5), device_b);
  Tensor d2 = ctx_->Constant(f32(7), device_b);
  absl::Status st = ctx_->Realize({c2, d2});
  if (!st.ok()) return;  // no such device: right
  auto v = c2.ToHost();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape().ToString(), "f32[]");  // not A's u8 array
  EXPECT_EQ(v->GetAsDouble(0), 5);
}

}  // namespace
}  // namespace kiln::client
