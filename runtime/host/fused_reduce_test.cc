// Reduction fusions (compiler/passes/reduction_fusion.h) run as one pass
// give the bits of their loop and reduce run one after the other, at one
// and two threads, whether the reduced value is written out or not.
#include "runtime/host/fused_reduce.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/reduction_fusion.h"
#include "gtest/gtest.h"
#include "runtime/compute_threads.h"
#include "runtime/host/test_util.h"

namespace kiln::host {
namespace {

// The head of the test modules: their name and the f32 reducer `add`.
constexpr char kAddModule[] = R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

// Runs `text` after loop fusion, and after reduction fusion too when
// `fuse_reductions`; `fused` receives how many reduction fusions there were.
absl::StatusOr<ir::Literal> RunFused(const std::string& text, const std::vector<ir::Literal>& args,
                                bool fuse_reductions, int* fused,
                                int64_t memory_bytes = int64_t{8} << 30) {
  HostDevice device("cpu", 0, memory_bytes, 64);
  auto module = ir::ParseModule(text);
  if (!module.ok()) return module.status();
  if (absl::Status st = ir::Verify(**module); !st.ok()) return st;
  if (auto st = passes::LoopFusion().Run(module->get()); !st.ok()) return st.status();
  if (fuse_reductions) {
    if (auto st = passes::ReductionFusion().Run(module->get()); !st.ok()) return st.status();
  }
  *fused = 0;
  for (const auto& c : (*module)->computations()) *fused += passes::IsReductionFusion(*c) ? 1 : 0;
  auto exe = CompileProgram(device.kind(), **module, {});
  if (!exe.ok()) return exe.status();
  return ExecuteOn(**exe, device, args);
}

// Element by element, bit for bit (NaN payloads included).
void ExpectSameBits(const ir::Literal& a, const ir::Literal& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  if (a.shape().IsTuple()) {
    for (size_t k = 0; k < a.tuple_elements().size(); ++k) {
      ExpectSameBits(a.tuple_elements()[k], b.tuple_elements()[k], absl::StrCat(what, " #", k));
    }
    return;
  }
  EXPECT_TRUE(a.bytes() == b.bytes()) << what;
}

// Values in [-2, 2], with zeros, a NaN and infinities at a few places.
ir::Literal Data(std::vector<int64_t> dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  for (int64_t i = 0; i < n; i += 7) v[i] = 0.0f;
  if (n > 40) {
    v[13] = std::numeric_limits<float>::quiet_NaN();
    v[29] = std::numeric_limits<float>::infinity();
    v[n - 2] = -std::numeric_limits<float>::infinity();
  }
  return F32(std::move(dims), v);
}

std::string Dims(const std::vector<int64_t>& dims) {
  std::string s = "f32[";
  for (size_t i = 0; i < dims.size(); ++i) absl::StrAppend(&s, i ? "," : "", dims[i]);
  return s + "]";
}

struct Case {
  std::vector<int64_t> dims;
  std::string reduced;  // the reduce's dimensions
  std::vector<int64_t> out;
  std::string reducer;  // add or max
  bool value_read_elsewhere;
};

class FusedReduceTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { runtime::SetComputeThreads(GetParam()); }
  void TearDown() override { runtime::SetComputeThreads(0); }
};

// A relu gradient and its sum, as a bias gradient is taken: the loop
// select(pre >= 0, g, 0), reduced over the leading or trailing dimensions,
// the value written out as well or not.
TEST_P(FusedReduceTest, LeadingAndTrailingSumsAndMaximaKeepTheirBits) {
  const Case cases[] = {
      {{37, 1}, "0", {1}, "add", false},
      {{128, 28, 28, 6}, "0,1,2", {6}, "add", true},
      {{128, 28, 28, 6}, "0,1,2", {6}, "add", false},
      {{64, 10, 10, 16}, "0,1,2", {16}, "add", true},
      {{300, 3}, "0", {3}, "add", false},
      {{4099, 8}, "0", {8}, "add", true},
      {{513, 9}, "0", {9}, "max", false},
      {{70, 300, 17}, "0,1", {17}, "add", false},
      {{128, 512}, "0", {512}, "add", true},
      {{128, 10}, "1", {128}, "max", true},
      {{96, 1003}, "1", {96}, "add", false},
      {{9, 40000}, "1", {9}, "add", true},
      {{5, 7, 3}, "0,1,2", {}, "add", false},
      {{300000}, "0", {}, "max", false},
  };
  for (const Case& c : cases) {
    const std::string in = Dims(c.dims), out = Dims(c.out);
    const std::string result =
        c.value_read_elsewhere ? absl::StrCat("(", in, ", ", out, ")") : out;
    const std::string root = c.value_read_elsewhere ? "ROOT t = " + result + " tuple(dg, r)"
                                                    : "ROOT t = " + result + " copy(r)";
    const std::string text = absl::StrCat(kAddModule, R"(max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
ENTRY e {
  pre = )", in, R"( parameter(0)
  g = )", in, R"( parameter(1)
  init = f32[] parameter(2)
  zero = f32[] constant(0)
  zeros = )", in, R"( broadcast(zero), dimensions={}
  on = pred)", in.substr(3), R"( compare(pre, zeros), direction=GE
  dg = )", in, R"( select(on, g, zeros)
  r = )", out, " reduce(dg, init), dimensions={", c.reduced, "}, to_apply=", c.reducer, R"(
  )", root, R"(
})");
    const std::string what = absl::StrCat(in, " over {", c.reduced, "} ", c.reducer,
                                          c.value_read_elsewhere ? ", value written" : "",
                                          " at ", GetParam(), " threads");
    std::vector<ir::Literal> args;
    args.push_back(Data(c.dims, 1));
    args.push_back(Data(c.dims, 2));
    args.push_back(F32({}, {0.25f}));
    int fused = 0, unfused_count = 0;
    auto want = RunFused(text, args, /*fuse_reductions=*/false, &unfused_count);
    ASSERT_TRUE(want.ok()) << what << ": " << want.status();
    auto got = RunFused(text, args, /*fuse_reductions=*/true, &fused);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    EXPECT_EQ(unfused_count, 0) << what;
    EXPECT_EQ(fused, 1) << what;
    ExpectSameBits(*got, *want, what);
  }
}

// A loop with two results (a pre-activation and its relu) whose first is
// reduced: both results come out, and the same bits.
TEST_P(FusedReduceTest, AnElementOfAMultiOutputLoop) {
  const std::string text = R"(HloModule m
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[200,40] parameter(0)
  b = f32[40] parameter(1)
  bb = f32[200,40] broadcast(b), dimensions={1}
  pre = f32[200,40] add(x, bb)
  zero = f32[] constant(0)
  zeros = f32[200,40] broadcast(zero), dimensions={}
  act = f32[200,40] maximum(pre, zeros)
  w = f32[40,3] parameter(2)
  y = f32[200,3] dot(act, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  low = f32[] constant(-inf)
  top = f32[200] reduce(pre, low), dimensions={1}, to_apply=max
  ROOT out = (f32[200,40], f32[200,3], f32[200]) tuple(pre, y, top)
})";
  std::vector<ir::Literal> args;
  args.push_back(Data({200, 40}, 3));
  args.push_back(Data({40}, 4));
  args.push_back(Data({40, 3}, 5));
  int fused = 0, unfused_count = 0;
  auto want = RunFused(text, args, false, &unfused_count);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = RunFused(text, args, true, &fused);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(fused, 1);
  ExpectSameBits(*got, *want, "multi-output");
}

// Predicates: whether every element of a row is positive (and), and
// whether any is (or), over a compare the loop computes.
TEST_P(FusedReduceTest, PredicateReductions) {
  const std::string text = R"(HloModule m
and {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT s = pred[] and(a, b)
}
ENTRY e {
  x = f32[300,70] parameter(0)
  zero = f32[] constant(0)
  zeros = f32[300,70] broadcast(zero), dimensions={}
  pos = pred[300,70] compare(x, zeros), direction=GT
  t = pred[] constant(true)
  ROOT all = pred[70] reduce(pos, t), dimensions={0}, to_apply=and
})";
  std::vector<float> v(300 * 70, 1.0f);
  v[5 * 70 + 3] = -1.0f;
  v[299 * 70 + 69] = 0.0f;
  int fused = 0, unfused_count = 0;
  auto want = RunFused(text, {F32({300, 70}, v)}, false, &unfused_count);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = RunFused(text, {F32({300, 70}, v)}, true, &fused);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(fused, 1);
  ExpectSameBits(*got, *want, "and");
  EXPECT_EQ(got->GetAsInt64(3), 0);
  EXPECT_EQ(got->GetAsInt64(69), 0);
  EXPECT_EQ(got->GetAsInt64(0), 1);
}

// Reductions of nothing (zero rows, zero columns, both) give the initial
// value for each result, fused or not.
TEST_P(FusedReduceTest, ZeroSizedReductions) {
  const struct {
    std::vector<int64_t> dims;
    std::string reduced;
    std::vector<int64_t> out;
  } cases[] = {{{3, 0}, "0", {0}}, {{0, 0}, "0", {0}}, {{4, 0}, "0", {0}},
               {{0, 5}, "0", {5}}, {{4, 0}, "1", {4}}, {{0, 6}, "1", {0}},
               {{0, 3}, "0,1", {}}};
  for (const auto& c : cases) {
    const std::string in = Dims(c.dims), out = Dims(c.out);
    const std::string text = absl::StrCat(kAddModule, R"(ENTRY e {
  x = )", in, R"( parameter(0)
  e = )", in, R"( exponential(x)
  init = f32[] parameter(1)
  ROOT r = )", out, " reduce(e, init), dimensions={", c.reduced, R"(}, to_apply=add
})");
    const std::string what = absl::StrCat(in, " over {", c.reduced, "}");
    std::vector<float> none;
    std::vector<ir::Literal> args;
    args.push_back(F32(c.dims, none));
    args.push_back(F32({}, {-0.0f}));
    for (bool fuse : {false, true}) {
      int fused = 0;
      auto got = RunFused(text, args, fuse, &fused);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status();
      for (int64_t i = 0; i < got->element_count(); ++i) {
        EXPECT_TRUE(std::signbit(got->data<float>()[i]) && got->data<float>()[i] == 0.0f)
            << what << " element " << i;
      }
    }
  }
}

// A row too long for the device's memory is refused with the memory error
// the unfused program gives (the fused one never writes the row whole, but
// a chunk is a whole row, and it takes device memory like any buffer).
TEST_P(FusedReduceTest, ARowLongerThanMemoryIsRefused) {
  const std::string text = absl::StrCat(kAddModule, R"(ENTRY e {
  x = f32[] parameter(0)
  b = f32[1,16777216] broadcast(x), dimensions={}
  e = f32[1,16777216] exponential(b)
  zero = f32[] constant(0)
  ROOT r = f32[1] reduce(e, zero), dimensions={1}, to_apply=add
})");
  for (bool fuse : {false, true}) {
    int fused = 0;
    auto got = RunFused(text, {F32({}, {0.5f})}, fuse, &fused, /*memory_bytes=*/int64_t{16} << 20);
    EXPECT_EQ(fused, fuse ? 1 : 0);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  }
}

// A computation of the form but for its root, a tuple of the reduce alone,
// is not a reduction fusion: a call of it, as the client wrote it, runs as
// a call and gives its tuple (without the pass); the pass fuses the loop and
// reduce inside it.
TEST_P(FusedReduceTest, ATupleOfTheReduceAloneRunsAsACall) {
  const std::string text = absl::StrCat(kAddModule, R"(fr {
  p = f32[4,8] parameter(0)
  z = f32[] parameter(1)
  e = f32[4,8] exponential(p)
  r = f32[4] reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[4]) tuple(r)
}
ENTRY m {
  x = f32[4,8] parameter(0)
  c = f32[] constant(0)
  k = (f32[4]) call(x, c), to_apply=fr
  ROOT g = f32[4] get-tuple-element(k), index=0
})");
  std::vector<float> zeros(32, 0.0f);
  for (bool fuse : {false, true}) {
    int fused = 0;
    auto got = RunFused(text, {F32({4, 8}, zeros)}, fuse, &fused);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(fused, fuse ? 1 : 0);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got->data<float>()[i], 8.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, FusedReduceTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace kiln::host
