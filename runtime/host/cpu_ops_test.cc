// Per-op tests of the CPU backend with hand-computed expected values.
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "compiler/ir/hlo_printer.h"
#include "gtest/gtest.h"
#include "runtime/custom_call.h"
#include "runtime/host/philox.h"
#include "runtime/host/rng_bits.h"
#include "runtime/host/test_util.h"

namespace kiln::host {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;
using ir::ElementType;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Runs `ENTRY e { x = TYPE[N] parameter(0) ROOT r = OUT[N] OP(x) }`.
std::vector<double> Unary(const std::string& op, const ir::Literal& x,
                          const std::string& out_type = "") {
  std::string t(ir::ElementTypeName(x.shape().type()));
  std::string dims = absl::StrCat("[", x.element_count(), "]");
  std::string text = absl::StrCat("ENTRY e {\n x = ", t, dims, " parameter(0)\n ROOT r = ",
                                  out_type.empty() ? t : out_type, dims, " ", op, "(x)\n}");
  auto r = RunHlo(text, {x});
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? Values(*r) : std::vector<double>{};
}

std::vector<double> Binary(const std::string& op, const ir::Literal& x,
                           const ir::Literal& y, const std::string& extra = "") {
  std::string t(ir::ElementTypeName(x.shape().type()));
  std::string dims = absl::StrCat("[", x.element_count(), "]");
  std::string out = op == "compare" ? "pred" : t;
  std::string text = absl::StrCat("ENTRY e {\n x = ", t, dims, " parameter(0)\n y = ", t,
                                  dims, " parameter(1)\n ROOT r = ", out, dims, " ", op,
                                  "(x, y)", extra, "\n}");
  auto r = RunHlo(text, {x, y});
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? Values(*r) : std::vector<double>{};
}

TEST(CpuElementwiseTest, FloatUnary) {
  ir::Literal x = F32({4}, {-1.5f, 0.0f, 2.5f, 4.0f});
  EXPECT_THAT(Unary("abs", x), ElementsAre(1.5, 0, 2.5, 4));
  EXPECT_THAT(Unary("negate", x), ElementsAre(1.5, 0, -2.5, -4));
  EXPECT_THAT(Unary("ceil", x), ElementsAre(-1, 0, 3, 4));
  EXPECT_THAT(Unary("floor", x), ElementsAre(-2, 0, 2, 4));
  EXPECT_THAT(Unary("sign", x), ElementsAre(-1, 0, 1, 1));
  EXPECT_THAT(Unary("round-nearest-afz", x), ElementsAre(-2, 0, 3, 4));
  EXPECT_THAT(Unary("round-nearest-even", x), ElementsAre(-2, 0, 2, 4));
  ir::Literal p = F32({3}, {1.0f, 4.0f, 0.25f});
  EXPECT_THAT(Unary("sqrt", p), ElementsAre(1, 2, 0.5));
  EXPECT_THAT(Unary("rsqrt", p), ElementsAre(1, 0.5, 2));
  EXPECT_THAT(Unary("log", F32({2}, {1.0f, 0.0f})), ElementsAre(0, -kInf));
  EXPECT_THAT(Unary("exponential", F32({2}, {0.0f, 1.0f})),
              Pointwise(DoubleNear(1e-6), std::vector<double>{1, 2.718281828}));
  EXPECT_THAT(Unary("logistic", F32({2}, {0.0f, 100.0f})), ElementsAre(0.5, 1));
  EXPECT_THAT(Unary("tanh", F32({2}, {0.0f, 0.5f})),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 0.46211716}));
  EXPECT_THAT(Unary("cosine", F32({2}, {0.0f, 3.14159265f})),
              Pointwise(DoubleNear(1e-6), std::vector<double>{1, -1}));
  EXPECT_THAT(Unary("sine", F32({1}, {1.5707963f})),
              Pointwise(DoubleNear(1e-6), std::vector<double>{1}));
  EXPECT_THAT(Unary("tan", F32({1}, {0.7853982f})),
              Pointwise(DoubleNear(1e-6), std::vector<double>{1}));
  EXPECT_THAT(Unary("cbrt", F32({2}, {27.0f, -8.0f})), ElementsAre(3, -2));
  EXPECT_THAT(Unary("exponential-minus-one", F32({1}, {1e-10f})),
              Pointwise(DoubleNear(1e-16), std::vector<double>{1e-10}));
  EXPECT_THAT(Unary("log-plus-one", F32({1}, {1e-10f})),
              Pointwise(DoubleNear(1e-16), std::vector<double>{1e-10}));
  EXPECT_THAT(Unary("is-finite", F32({3}, {1.0f, INFINITY, NAN}), "pred"),
              ElementsAre(1, 0, 0));
}

TEST(CpuElementwiseTest, FloatBinaryIncludingNanRules) {
  // Every element is checked, and the operands are chosen so that swapping
  // them changes every result of a non-commutative op.
  using ::testing::IsNan;
  ir::Literal x = F32({6}, {1, -2, 7, NAN, -0.5f, 3});
  ir::Literal y = F32({6}, {2, 3, 2, 1, 4, -0.25f});
  EXPECT_THAT(Binary("add", x, y), ElementsAre(3, 1, 9, IsNan(), 3.5, 2.75));
  EXPECT_THAT(Binary("subtract", x, y),
              ElementsAre(-1, -5, 5, IsNan(), -4.5, 3.25));
  EXPECT_THAT(Binary("multiply", x, y),
              ElementsAre(2, -6, 14, IsNan(), -2, -0.75));
  EXPECT_THAT(Binary("divide", x, y),
              ElementsAre(0.5, DoubleNear(-2.0 / 3.0, 1e-6), 3.5, IsNan(),
                          -0.125, -12));
  // fmod: the result takes the dividend's sign.
  EXPECT_THAT(Binary("remainder", x, y),
              ElementsAre(1, -2, 1, IsNan(), -0.5, 0));
  // 3^-0.25 = 1 / 3^(1/4) = 0.75983568565159...
  EXPECT_THAT(Binary("power", x, y),
              ElementsAre(1, -8, 49, IsNan(), 0.0625,
                          DoubleNear(0.7598356856515925, 1e-6)));
  EXPECT_THAT(Binary("maximum", x, y),
              ElementsAre(2, 3, 7, IsNan(), 4, 3));  // NaN propagates
  EXPECT_THAT(Binary("minimum", x, y),
              ElementsAre(1, -2, 2, IsNan(), -0.5, -0.25));
  // IEEE-754 maximum/minimum: +0 is above -0 whichever operand it is.
  ir::Literal zeros = F32({2}, {0.0f, -0.0f});
  ir::Literal swapped = F32({2}, {-0.0f, 0.0f});
  for (double v : Binary("maximum", zeros, swapped))
    EXPECT_FALSE(std::signbit(v)) << v;
  for (double v : Binary("minimum", zeros, swapped))
    EXPECT_TRUE(std::signbit(v)) << v;
  // atan2(y, x) in each quadrant and on each half-axis; with atan(1/2) =
  // 0.46364760900080611 the quadrant angles are +-atan(1/2) and
  // +-(pi - atan(1/2)) = +-2.67794504458898712. Swapped operands would give
  // +-atan(2) = +-1.10714871779409 or +-(pi - atan(2)) instead.
  constexpr double kPi = std::numbers::pi;
  ir::Literal ay = F32({8}, {1, 1, -1, -1, 0, -1, -0.0f, 1});
  ir::Literal ax = F32({8}, {2, -2, -2, 2, -1, 0, -1, 0});
  EXPECT_THAT(
      Binary("atan2", ay, ax),
      Pointwise(DoubleNear(1e-6),
                std::vector<double>{0.46364760900080611, 2.67794504458898712,
                                    -2.67794504458898712, -0.46364760900080611,
                                    kPi, -kPi / 2, -kPi, kPi / 2}));
}

TEST(CpuElementwiseTest, IntegerEdgeCasesNeverTrap) {
  ir::Literal x = S32({5}, {7, -7, std::numeric_limits<int32_t>::min(), 5, -9});
  ir::Literal y = S32({5}, {2, 2, -1, 0, 4});
  EXPECT_THAT(Binary("divide", x, y),
              ElementsAre(3, -3, std::numeric_limits<int32_t>::min(), -1, -2));
  EXPECT_THAT(Binary("remainder", x, y), ElementsAre(1, -1, 0, 5, -1));
  EXPECT_THAT(Binary("add", S32({1}, {std::numeric_limits<int32_t>::max()}), S32({1}, {1})),
              ElementsAre(std::numeric_limits<int32_t>::min()));
  EXPECT_THAT(Binary("power", S32({4}, {2, -1, 2, 3}), S32({4}, {10, 3, -1, 0})),
              ElementsAre(1024, -1, 0, 1));
  EXPECT_THAT(Binary("shift-left", S32({3}, {1, 1, 1}), S32({3}, {3, 31, 32})),
              ElementsAre(8, std::numeric_limits<int32_t>::min(), 0));
  EXPECT_THAT(Binary("shift-right-arithmetic", S32({2}, {-8, -8}), S32({2}, {1, 40})),
              ElementsAre(-4, -1));
  EXPECT_THAT(Binary("shift-right-logical", S32({2}, {-8, 16}), S32({2}, {28, 40})),
              ElementsAre(15, 0));
  EXPECT_THAT(Binary("and", S32({1}, {12}), S32({1}, {10})), ElementsAre(8));
  EXPECT_THAT(Binary("or", S32({1}, {12}), S32({1}, {10})), ElementsAre(14));
  EXPECT_THAT(Binary("xor", S32({1}, {12}), S32({1}, {10})), ElementsAre(6));
  EXPECT_THAT(Unary("abs", S32({2}, {-3, std::numeric_limits<int32_t>::min()})),
              ElementsAre(3, std::numeric_limits<int32_t>::min()));
  EXPECT_THAT(Unary("not", S32({1}, {0})), ElementsAre(-1));
  EXPECT_THAT(Unary("popcnt", S32({2}, {7, -1})), ElementsAre(3, 32));
  EXPECT_THAT(Unary("count-leading-zeros", S32({2}, {1, 0})), ElementsAre(31, 32));
  EXPECT_THAT(Unary("sign", S32({3}, {-5, 0, 9})), ElementsAre(-1, 0, 1));
  ir::Literal u = Lit<int64_t>(ElementType::kU8, {2}, {250, 3});
  EXPECT_THAT(Binary("add", u, Lit<int64_t>(ElementType::kU8, {2}, {10, 4})),
              ElementsAre(4, 7));  // wraps mod 256
  EXPECT_THAT(Binary("divide", u, Lit<int64_t>(ElementType::kU8, {2}, {0, 2})),
              ElementsAre(255, 1));
  // Arithmetic shifts read unsigned operands as signed bit patterns (XLA).
  EXPECT_THAT(Binary("shift-right-arithmetic",
                     Lit<int64_t>(ElementType::kU8, {3}, {128, 128, 64}),
                     Lit<int64_t>(ElementType::kU8, {3}, {1, 9, 1})),
              ElementsAre(192, 255, 32));
  ir::Literal s64 = Lit<int64_t>(ElementType::kS64, {1}, {int64_t{1} << 40});
  EXPECT_THAT(Binary("multiply", s64, s64), ElementsAre(0));  // 2^80 wraps to 0
}

TEST(CpuElementwiseTest, PredicateOps) {
  ir::Literal a = Lit<int>(ElementType::kPred, {4}, {0, 0, 1, 1});
  ir::Literal b = Lit<int>(ElementType::kPred, {4}, {0, 1, 0, 1});
  EXPECT_THAT(Binary("and", a, b), ElementsAre(0, 0, 0, 1));
  EXPECT_THAT(Binary("or", a, b), ElementsAre(0, 1, 1, 1));
  EXPECT_THAT(Binary("xor", a, b), ElementsAre(0, 1, 1, 0));
  EXPECT_THAT(Unary("not", a), ElementsAre(1, 1, 0, 0));
}

TEST(CpuElementwiseTest, HalfTypesRoundEveryResult) {
  // In bf16, 256 + 1 is not representable: the sum rounds back to 256.
  ir::Literal x = Lit<float>(ElementType::kBF16, {2}, {256.0f, 1.0f});
  ir::Literal y = Lit<float>(ElementType::kBF16, {2}, {1.0f, 2.0f});
  EXPECT_THAT(Binary("add", x, y), ElementsAre(256, 3));
  ir::Literal h = Lit<float>(ElementType::kF16, {2}, {2048.0f, 0.5f});
  ir::Literal one = Lit<float>(ElementType::kF16, {2}, {1.0f, 0.25f});
  EXPECT_THAT(Binary("add", h, one), ElementsAre(2048, 0.75));
  EXPECT_THAT(Unary("sqrt", Lit<float>(ElementType::kF16, {1}, {4.0f})), ElementsAre(2));
  auto f64 = Binary("divide", Lit<double>(ElementType::kF64, {1}, {1.0}),
                    Lit<double>(ElementType::kF64, {1}, {3.0}));
  EXPECT_EQ(f64[0], 1.0 / 3.0);  // computed in double, not float
}

TEST(CpuElementwiseTest, CompareSelectClamp) {
  ir::Literal x = F32({3}, {1, 5, NAN});
  ir::Literal y = F32({3}, {2, 5, 1});
  EXPECT_THAT(Binary("compare", x, y, ", direction=LT"), ElementsAre(1, 0, 0));
  EXPECT_THAT(Binary("compare", x, y, ", direction=EQ"), ElementsAre(0, 1, 0));
  EXPECT_THAT(Binary("compare", x, y, ", direction=NE"), ElementsAre(1, 0, 1));
  EXPECT_THAT(Binary("compare", x, y, ", direction=GE"), ElementsAre(0, 1, 0));
  auto r = RunHlo(R"(ENTRY e {
  p = pred[3] parameter(0)
  a = s32[3] parameter(1)
  b = s32[3] parameter(2)
  s = s32[3] select(p, a, b)
  lo = s32[] constant(0)
  hi = s32[] constant(15)
  ROOT c = s32[3] clamp(lo, s, hi)
})",
                  {Lit<int>(ElementType::kPred, {3}, {1, 0, 1}), S32({3}, {-4, 20, 30}),
                   S32({3}, {9, 10, 11})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(0, 10, 15));
}

TEST(CpuElementwiseTest, ConvertAndBitcast) {
  EXPECT_THAT(Unary("convert", F32({4}, {2.7f, -2.7f, 1e10f, NAN}), "s32"),
              ElementsAre(2, -2, 2147483647, 0));
  EXPECT_THAT(Unary("convert", F32({2}, {300.0f, -5.0f}), "u8"), ElementsAre(255, 0));
  EXPECT_THAT(Unary("convert", S32({3}, {0, 2, -1}), "pred"), ElementsAre(0, 1, 1));
  EXPECT_THAT(Unary("convert", F32({1}, {1.00390625f}), "bf16"), ElementsAre(1));
  EXPECT_THAT(Unary("bitcast-convert", F32({1}, {1.0f}), "s32"), ElementsAre(0x3f800000));
}

TEST(CpuElementwiseTest, FusedChainWithBroadcastScalars) {
  // x*2+1 then max with 0, over more than one block.
  constexpr int n = 3000;
  std::vector<float> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = static_cast<float>(i - 1500);
  auto r = RunHlo(R"(ENTRY e {
  x = f32[3000] parameter(0)
  two = f32[] constant(2)
  one = f32[] constant(1)
  zero = f32[] constant(0)
  b2 = f32[3000] broadcast(two), dimensions={}
  b1 = f32[3000] broadcast(one), dimensions={}
  b0 = f32[3000] broadcast(zero), dimensions={}
  m = f32[3000] multiply(x, b2)
  a = f32[3000] add(m, b1)
  ROOT r = f32[3000] maximum(a, b0)
})",
                  {F32({n}, xs)});
  ASSERT_TRUE(r.ok()) << r.status();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(r->data<float>()[i], std::max(0.0f, xs[i] * 2 + 1)) << i;
  }
}

TEST(CpuDataTest, IotaBroadcastReshapeTranspose) {
  auto r = RunHlo(R"(ENTRY e {
  i = s32[2,3] iota(), iota_dimension=1
  t = s32[3,2] transpose(i), dimensions={1,0}
  r = s32[6] reshape(t)
  v = s32[2] parameter(0)
  b = s32[2,3] broadcast(v), dimensions={0}
  br = s32[6] reshape(b)
  ROOT out = (s32[6], s32[6]) tuple(r, br)
})",
                  {S32({2}, {7, 8})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(0, 0, 1, 1, 2, 2));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(7, 7, 7, 8, 8, 8));
}

TEST(CpuDataTest, SliceReversePadConcatenate) {
  auto r = RunHlo(R"(ENTRY e {
  x = s32[2,4] parameter(0)
  s = s32[2,2] slice(x), slice={[0:2], [0:4:2]}
  rv = s32[2,4] reverse(x), dimensions={1}
  z = s32[] constant(0)
  p = s32[3,4] pad(s, z), padding=1_0x-1_2_1
  c = s32[2,6] concatenate(s, x), dimensions={1}
  sr = s32[8] reshape(rv)
  pr = s32[12] reshape(p)
  cr = s32[12] reshape(c)
  ROOT t = (s32[8], s32[12], s32[12]) tuple(sr, pr, cr)
})",
                  {S32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(4, 3, 2, 1, 8, 7, 6, 5));
  // s = [[1,3],[5,7]]; dim0 pad lo 1; dim1: lo -1 crops the first element,
  // interior 1 and hi 2: row [1,3] -> [1,0,3] -> [0,3] -> [0,3,0,0].
  EXPECT_THAT(Values(r->tuple_elements()[1]),
              ElementsAre(0, 0, 0, 0,  //
                          0, 3, 0, 0,  //
                          0, 7, 0, 0));
  EXPECT_THAT(Values(r->tuple_elements()[2]),
              ElementsAre(1, 3, 1, 2, 3, 4, 5, 7, 5, 6, 7, 8));
}

TEST(CpuDataTest, DynamicSliceClampsAndUpdates) {
  auto r = RunHlo(R"(ENTRY e {
  x = s32[5] parameter(0)
  i = s32[] parameter(1)
  ds = s32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
  u = s32[2] constant({-1, -2})
  dus = s32[5] dynamic-update-slice(x, u, i)
  ROOT t = (s32[2], s32[5]) tuple(ds, dus)
})",
                  {S32({5}, {0, 1, 2, 3, 4}), S32({}, {9})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(3, 4));  // clamped to 3
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(0, 1, 2, -1, -2));
}

constexpr char kAdd[] = "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n";
constexpr char kMax[] = "max { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n";

TEST(CpuReduceTest, SumOverEachDimension) {
  ir::Literal x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  for (auto [dims, out, expect] :
       std::vector<std::tuple<std::string, std::string, std::vector<double>>>{
           {"{0}", "f32[3]", {5, 7, 9}},
           {"{1}", "f32[2]", {6, 15}},
           {"{0,1}", "f32[]", {21}}}) {
    auto r = RunHlo(absl::StrCat(kAdd, "ENTRY e {\n x = f32[2,3] parameter(0)\n z = f32[] constant(0)\n ROOT r = ",
                                 out, " reduce(x, z), dimensions=", dims, ", to_apply=add\n}"),
                    {x});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Values(*r), expect) << dims;
  }
}

TEST(CpuReduceTest, MiddleDimensionAndMax) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>((i * 7) % 11);
  auto r = RunHlo(absl::StrCat(kMax, "ENTRY e {\n x = f32[2,3,4] parameter(0)\n z = f32[] constant(-inf)\n"
                                     " ROOT r = f32[2,4] reduce(x, z), dimensions={1}, to_apply=max\n}"),
                  {F32({2, 3, 4}, v)});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> expect;
  for (int a = 0; a < 2; ++a) {
    for (int c = 0; c < 4; ++c) {
      double m = -kInf;
      for (int b = 0; b < 3; ++b) m = std::max<double>(m, v[a * 12 + b * 4 + c]);
      expect.push_back(m);
    }
  }
  EXPECT_EQ(Values(*r), expect);
}

TEST(CpuReduceTest, GeneralReducerAndVariadicArgmax) {
  // A reducer with no fast path: acc + x*x (sum of squares with init 1).
  auto r = RunHlo(R"(sq { a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(b, b)
  ROOT s = f32[] add(a, m) }
ENTRY e {
  x = f32[3] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[] reduce(x, one), dimensions={0}, to_apply=sq
})",
                  {F32({3}, {1, 2, 3})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(15));
  auto am = RunHlo(R"(argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(av, bv), direction=GE
  v = f32[] select(gt, av, bv)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[2,4] parameter(0)
  idx = s32[2,4] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, idx, ninf, zero), dimensions={1}, to_apply=argmax
})",
                   {F32({2, 4}, {1, 9, 3, 2, 8, 1, 8, 0})});
  ASSERT_TRUE(am.ok()) << am.status();
  EXPECT_THAT(Values(am->tuple_elements()[0]), ElementsAre(9, 8));
  EXPECT_THAT(Values(am->tuple_elements()[1]), ElementsAre(1, 0));
}

TEST(CpuWindowTest, MaxPoolAndAveragePoolWithPadding) {
  ir::Literal x = F32({1, 4, 4, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  auto r = RunHlo(absl::StrCat(kMax, kAdd, R"(ENTRY e {
  x = f32[1,4,4,1] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  mp = f32[1,2,2,1] reduce-window(x, ninf), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
  sp = f32[1,3,3,1] reduce-window(x, zero), window={size=1x2x2x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=add
  ROOT t = (f32[1,2,2,1], f32[1,3,3,1]) tuple(mp, sp)
})"),
                  {x});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(6, 8, 14, 16));
  EXPECT_THAT(Values(r->tuple_elements()[1]),
              ElementsAre(1, 5, 4, 14, 34, 20, 13, 29, 16));
}

TEST(CpuWindowTest, SelectAndScatterRoutesGradientsToMaxima) {
  auto r = RunHlo(R"(ge { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE }
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[4,4] parameter(0)
  g = f32[2,2] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[4,4] select-and-scatter(x, g, z), window={size=2x2 stride=2x2}, select=ge, scatter=add
})",
                  {F32({4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}),
                   F32({2, 2}, {10, 20, 30, 40})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(0, 0, 0, 0, 0, 10, 0, 20, 0, 0, 0, 0, 0, 30, 0, 40));
}

// Windows that pass trailing dimensions through (channels last) run along
// rows; the same windows over channels-first data run per element. Both must
// give the same values, ties, NaNs and padding included.
// With a batch of 2048 the channels-last ops have enough outputs to run on
// all the compute threads.
class CpuWindowLayoutTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CpuWindowLayoutTest, ChannelsLastRowsMatchChannelsFirst) {
  const int64_t n = GetParam(), h = 5, w = 6, c = 3;
  std::vector<float> nhwc(n * h * w * c);
  for (size_t i = 0; i < nhwc.size(); ++i) {
    nhwc[i] = static_cast<float>((i * 7) % 5) - 2.0f;  // many ties
  }
  nhwc[4] = std::numeric_limits<float>::quiet_NaN();
  nhwc[40] = -0.0f;
  std::vector<float> nchw(nhwc.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t k = 0; k < c; ++k)
          nchw[((b * c + k) * h + y) * w + x] = nhwc[((b * h + y) * w + x) * c + k];
  const std::string comps = absl::StrCat(kMax, kAdd, R"(ge { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE }
)");
  const auto batch = [&](const std::string& text) {
    return absl::StrReplaceAll(text, {{"f32[2,", absl::StrCat("f32[", n, ",")}});
  };
  auto last = RunHlo(batch(absl::StrCat(comps, R"(ENTRY e {
  x = f32[2,5,6,3] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  mp = f32[2,3,3,3] reduce-window(x, ninf), window={size=1x2x2x1 stride=1x2x2x1 pad=0_0x1_0x0_0x0_0}, to_apply=max
  sp = f32[2,5,6,3] reduce-window(x, zero), window={size=1x3x3x1 pad=0_0x1_1x1_1x0_0}, to_apply=add
  g = f32[2,3,3,3] add(mp, mp)
  ss = f32[2,5,6,3] select-and-scatter(x, g, zero), window={size=1x2x2x1 stride=1x2x2x1 pad=0_0x1_0x0_0x0_0}, select=ge, scatter=add
  mq = f32[2,2,3,3] reduce-window(x, ninf), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
  gq = f32[2,2,3,3] add(mq, mq)
  sq = f32[2,5,6,3] select-and-scatter(x, gq, zero), window={size=1x2x2x1 stride=1x2x2x1}, select=ge, scatter=add
  ROOT t = (f32[2,3,3,3], f32[2,5,6,3], f32[2,5,6,3], f32[2,2,3,3], f32[2,5,6,3]) tuple(mp, sp, ss, mq, sq)
})")), {F32({n, h, w, c}, nhwc)});
  auto first = RunHlo(batch(absl::StrCat(comps, R"(ENTRY e {
  x = f32[2,3,5,6] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  mp = f32[2,3,3,3] reduce-window(x, ninf), window={size=1x1x2x2 stride=1x1x2x2 pad=0_0x0_0x1_0x0_0}, to_apply=max
  sp = f32[2,3,5,6] reduce-window(x, zero), window={size=1x1x3x3 pad=0_0x0_0x1_1x1_1}, to_apply=add
  g = f32[2,3,3,3] add(mp, mp)
  ss = f32[2,3,5,6] select-and-scatter(x, g, zero), window={size=1x1x2x2 stride=1x1x2x2 pad=0_0x0_0x1_0x0_0}, select=ge, scatter=add
  mq = f32[2,3,2,3] reduce-window(x, ninf), window={size=1x1x2x2 stride=1x1x2x2}, to_apply=max
  gq = f32[2,3,2,3] add(mq, mq)
  sq = f32[2,3,5,6] select-and-scatter(x, gq, zero), window={size=1x1x2x2 stride=1x1x2x2}, select=ge, scatter=add
  ROOT t = (f32[2,3,3,3], f32[2,3,5,6], f32[2,3,5,6], f32[2,3,2,3], f32[2,3,5,6]) tuple(mp, sp, ss, mq, sq)
})")), {F32({n, c, h, w}, nchw)});
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(first.ok()) << first.status();
  for (int k = 0; k < 5; ++k) {
    const std::vector<double> a = Values(last->tuple_elements()[k]);
    const std::vector<double> b = Values(first->tuple_elements()[k]);
    const std::vector<int64_t> dims = last->tuple_elements()[k].shape().dims();
    ASSERT_EQ(a.size(), b.size());
    int nans = 0;
    for (int64_t bi = 0; bi < dims[0]; ++bi)
      for (int64_t y = 0; y < dims[1]; ++y)
        for (int64_t x = 0; x < dims[2]; ++x)
          for (int64_t ch = 0; ch < dims[3]; ++ch) {
            const double va = a[((bi * dims[1] + y) * dims[2] + x) * dims[3] + ch];
            const double vb = b[((bi * dims[3] + ch) * dims[1] + y) * dims[2] + x];
            if (std::isnan(va) || std::isnan(vb)) {
              EXPECT_TRUE(std::isnan(va) && std::isnan(vb)) << "output " << k;
              ++nans;
              continue;
            }
            EXPECT_EQ(va, vb) << "output " << k << " at " << bi << "," << y << "," << x << ","
                              << ch;
          }
    EXPECT_GT(nans, 0) << "output " << k << ": the NaN should reach it";
  }
}

INSTANTIATE_TEST_SUITE_P(Batches, CpuWindowLayoutTest, ::testing::Values(2, 2048));

// Rows of channels of any width (the lanes of the vector loops and their
// ends) against plain loops over the same windows: max, min and sum pools,
// and select-and-scatter with each select direction over disjoint and
// overlapping windows, bit for bit, NaNs, ties and signed zeros included.
class CpuWindowRowTest : public ::testing::TestWithParam<int64_t> {};

float RefMax(float a, float b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::bit_cast<float>(std::bit_cast<uint32_t>(a) & std::bit_cast<uint32_t>(b));
  return a > b ? a : b;
}
float RefMin(float a, float b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::bit_cast<float>(std::bit_cast<uint32_t>(a) | std::bit_cast<uint32_t>(b));
  return a < b ? a : b;
}

TEST_P(CpuWindowRowTest, RowsOfAnyWidthMatchPlainLoops) {
  const int64_t c = GetParam(), n = 2, h = 4, w = 6;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(n * h * w * c);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 5) % 7) - 3.0f;
  x[1 % x.size()] = nan;
  x[(7 * c + 2) % x.size()] = -0.0f;
  x[(9 * c + 1) % x.size()] = 0.0f;
  x[(20 * c) % x.size()] = nan;
  auto at = [&](int64_t b, int64_t y, int64_t xx, int64_t k) { return ((b * h + y) * w + xx) * c + k; };
  struct Pool {
    int64_t size, stride;
  };
  const Pool pools[] = {{2, 2}, {3, 1}};
  std::string text = absl::StrCat(kMax, kAdd, R"(min { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] minimum(a, b) }
)");
  const char* dirs[] = {"GE", "GT", "LE", "LT", "EQ", "NE"};
  for (const char* d : dirs) {
    absl::StrAppend(&text, "sel", d, " { a = f32[] parameter(0)\n b = f32[] parameter(1)\n",
                    " ROOT r = pred[] compare(a, b), direction=", d, " }\n");
  }
  absl::StrAppend(&text, "ENTRY e {\n x = f32[2,4,6,", c, "] parameter(0)\n",
                  " ninf = f32[] constant(-inf)\n inf = f32[] constant(inf)\n",
                  " zero = f32[] constant(0)\n");
  std::vector<std::string> outputs, shapes;
  for (const Pool& p : pools) {
    const int64_t oh = (h - p.size) / p.stride + 1, ow = (w - p.size) / p.stride + 1;
    const std::string oshape = absl::StrCat("f32[2,", oh, ",", ow, ",", c, "]");
    const std::string xshape = absl::StrCat("f32[2,4,6,", c, "]");
    const std::string win = absl::StrCat("window={size=1x", p.size, "x", p.size, "x1 stride=1x",
                                         p.stride, "x", p.stride, "x1}");
    const std::string tag = absl::StrCat(p.size, "_", p.stride);
    absl::StrAppend(&text, " mx", tag, " = ", oshape, " reduce-window(x, ninf), ", win,
                    ", to_apply=max\n mn", tag, " = ", oshape, " reduce-window(x, inf), ", win,
                    ", to_apply=min\n sm", tag, " = ", oshape, " reduce-window(x, zero), ", win,
                    ", to_apply=add\n");
    for (const char* out : {"mx", "mn", "sm"}) {
      outputs.push_back(absl::StrCat(out, tag));
      shapes.push_back(oshape);
    }
    for (const char* d : dirs) {
      absl::StrAppend(&text, " ss", d, tag, " = ", xshape, " select-and-scatter(x, mx", tag,
                      ", zero), ", win, ", select=sel", d, ", scatter=add\n");
      outputs.push_back(absl::StrCat("ss", d, tag));
      shapes.push_back(xshape);
    }
  }
  absl::StrAppend(&text, " ROOT t = (", absl::StrJoin(shapes, ", "), ") tuple(",
                  absl::StrJoin(outputs, ", "), ")\n}\n");
  auto r = RunHlo(text, {F32({n, h, w, c}, x)});
  ASSERT_TRUE(r.ok()) << r.status();

  auto select = [](const std::string& d, float a, float b) {
    if (d == "GE") return a >= b;
    if (d == "GT") return a > b;
    if (d == "LE") return a <= b;
    if (d == "LT") return a < b;
    if (d == "EQ") return a == b;
    return a != b;
  };
  int index = 0;
  for (const Pool& p : pools) {
    const int64_t oh = (h - p.size) / p.stride + 1, ow = (w - p.size) / p.stride + 1;
    std::vector<float> mx, mn, sm;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx)
          for (int64_t k = 0; k < c; ++k) {
            float vmax = -std::numeric_limits<float>::infinity();
            float vmin = std::numeric_limits<float>::infinity(), vsum = 0.0f;
            for (int64_t i = 0; i < p.size; ++i)
              for (int64_t j = 0; j < p.size; ++j) {
                const float v = x[at(b, y * p.stride + i, xx * p.stride + j, k)];
                vmax = RefMax(vmax, v);
                vmin = RefMin(vmin, v);
                vsum += v;
              }
            mx.push_back(vmax);
            mn.push_back(vmin);
            sm.push_back(vsum);
          }
    std::vector<std::vector<float>> expected = {mx, mn, sm};
    for (const char* d : dirs) {
      std::vector<float> ss(x.size(), 0.0f);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t xx = 0; xx < ow; ++xx)
            for (int64_t k = 0; k < c; ++k) {
              int64_t chosen = -1;
              for (int64_t i = 0; i < p.size; ++i)
                for (int64_t j = 0; j < p.size; ++j) {
                  const int64_t pos = at(b, y * p.stride + i, xx * p.stride + j, k);
                  if (chosen < 0 || !select(d, x[chosen], x[pos])) chosen = pos;
                }
              ss[chosen] += mx[((b * oh + y) * ow + xx) * c + k];
            }
      expected.push_back(ss);
    }
    for (const std::vector<float>& e : expected) {
      const ir::Literal& got = r->tuple_elements()[index];
      ASSERT_EQ(got.element_count(), static_cast<int64_t>(e.size())) << outputs[index];
      const float* g = got.data<float>();
      for (size_t i = 0; i < e.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(e[i]))
            << outputs[index] << " element " << i << ": " << g[i] << " against " << e[i]
            << " with " << c << " channels";
      }
      ++index;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, CpuWindowRowTest,
                         ::testing::Values(1, 2, 3, 4, 5, 6, 8, 9, 13, 16, 21, 35));

// Reductions over the leading dimensions (a bias gradient over NHWC data)
// fold each column's rows in order, bit for bit as a plain loop, for any
// number of columns (the vector lanes and their ends); sums of at most
// eight columns add row r into partial sum r % 4 and give
// init + ((p0 + p1) + (p2 + p3)) (ColumnFold).
class CpuReduceLeadingTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CpuReduceLeadingTest, ColumnsOfAnyWidthMatchPlainLoops) {
  const int64_t c = GetParam(), rows = 35;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(rows * c);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>((i * 7) % 13) - 0.55f;
  x[(3 * c) % x.size()] = nan;
  x[(5 * c + c - 1) % x.size()] = -0.0f;
  x[(6 * c + c - 1) % x.size()] = 0.0f;
  const std::string shape = absl::StrCat("f32[5,7,", c, "]"), out = absl::StrCat("f32[", c, "]");
  const std::string text = absl::StrCat(kMax, kAdd, R"(min { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] minimum(a, b) }
mul { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] multiply(a, b) }
ENTRY e {
 x = )", shape, R"( parameter(0)
 zero = f32[] constant(0)
 one = f32[] constant(1)
 ninf = f32[] constant(-inf)
 inf = f32[] constant(inf)
 s = )", out, R"( reduce(x, zero), dimensions={0,1}, to_apply=add
 p = )", out, R"( reduce(x, one), dimensions={0,1}, to_apply=mul
 mx = )", out, R"( reduce(x, ninf), dimensions={0,1}, to_apply=max
 mn = )", out, R"( reduce(x, inf), dimensions={0,1}, to_apply=min
 ROOT t = ()", out, ", ", out, ", ", out, ", ", out, R"() tuple(s, p, mx, mn)
})");
  auto r = RunHlo(text, {F32({5, 7, c}, x)});
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t j = 0; j < c; ++j) {
    float s = 0.0f, p = 1.0f, mx = -std::numeric_limits<float>::infinity();
    float mn = std::numeric_limits<float>::infinity();
    float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < rows; ++i) {
      const float v = x[i * c + j];
      s += v;
      partial[i % 4] += v;
      p *= v;
      mx = RefMax(mx, v);
      mn = RefMin(mn, v);
    }
    if (c <= 8) s = 0.0f + ((partial[0] + partial[1]) + (partial[2] + partial[3]));
    const float want[4] = {s, p, mx, mn};
    for (int k = 0; k < 4; ++k) {
      const float got = r->tuple_elements()[k].data<float>()[j];
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[k]))
          << "output " << k << " column " << j << " of " << c << ": " << got << " against "
          << want[k];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Columns, CpuReduceLeadingTest, ::testing::Values(1, 3, 4, 6, 9, 16, 17, 30));

TEST(CpuDotTest, MatmulTransposedBatchedAndInteger) {
  ir::Literal a = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::Literal b = F32({3, 2}, {7, 8, 9, 10, 11, 12});
  auto r = RunHlo(R"(ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,2] parameter(1)
  d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dt = f32[3,3] dot(a, a), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (f32[2,2], f32[3,3]) tuple(d, dt)
})",
                  {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(17, 22, 27, 22, 29, 36, 27, 36, 45));
  auto batched = RunHlo(R"(ENTRY e {
  a = s32[2,2,2] parameter(0)
  b = s32[2,2,2] parameter(1)
  ROOT d = s32[2,2,2] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
})",
                        {S32({2, 2, 2}, {1, 2, 3, 4, 1, 0, 0, 1}),
                         S32({2, 2, 2}, {5, 6, 7, 8, 2, 3, 4, 5})});
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_THAT(Values(*batched), ElementsAre(19, 22, 43, 50, 2, 3, 4, 5));
  // Contracting a middle dimension forces the permuting path.
  auto perm = RunHlo(R"(ENTRY e {
  a = f32[2,3,2] parameter(0)
  b = f32[3] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})",
                     {F32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}), F32({3}, {1, 1, 1})});
  ASSERT_TRUE(perm.ok()) << perm.status();
  EXPECT_THAT(Values(*perm), ElementsAre(9, 12, 27, 30));
}

TEST(CpuConvTest, TwoDimensionalWithPaddingStrideAndLayouts) {
  // 3x3 input, 2x2 kernel of ones: each output is a window sum.
  ir::Literal x = F32({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  ir::Literal k = F32({2, 2, 1, 1}, {1, 1, 1, 1});
  auto r = RunHlo(R"(ENTRY e {
  x = f32[1,3,3,1] parameter(0)
  k = f32[2,2,1,1] parameter(1)
  v = f32[1,2,2,1] convolution(x, k), window={size=2x2}, dim_labels=b01f_01io->b01f
  p = f32[1,2,2,1] convolution(x, k), window={size=2x2 stride=2x2 pad=0_1x0_1}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[1,2,2,1], f32[1,2,2,1]) tuple(v, p)
})",
                  {x, k});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(12, 16, 24, 28));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(12, 9, 15, 9));
  // NCHW / OIHW with two output channels (second kernel doubles).
  auto nchw = RunHlo(R"(ENTRY e {
  x = f32[1,1,3,3] parameter(0)
  k = f32[2,1,2,2] parameter(1)
  ROOT v = f32[1,2,2,2] convolution(x, k), window={size=2x2}, dim_labels=bf01_oi01->bf01
})",
                     {F32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
                      F32({2, 1, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2})});
  ASSERT_TRUE(nchw.ok()) << nchw.status();
  EXPECT_THAT(Values(*nchw), ElementsAre(12, 16, 24, 28, 24, 32, 48, 56));
}

TEST(CpuConvTest, FeatureGroupsAndDilation) {
  // Depthwise: two channels, each with its own 1x1 kernel (x2 and x3).
  auto g = RunHlo(R"(ENTRY e {
  x = f32[1,2,2] parameter(0)
  k = f32[1,1,2] parameter(1)
  ROOT v = f32[1,2,2] convolution(x, k), window={size=1}, dim_labels=b0f_0io->b0f, feature_group_count=2
})",
                  {F32({1, 2, 2}, {1, 10, 2, 20}), F32({1, 1, 2}, {2, 3})});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Values(*g), ElementsAre(2, 30, 4, 60));
  // Window dilation 2 on a 1-D signal: taps at i and i+2.
  auto d = RunHlo(R"(ENTRY e {
  x = f32[1,5,1] parameter(0)
  k = f32[2,1,1] parameter(1)
  ROOT v = f32[1,3,1] convolution(x, k), window={size=2 rhs_dilate=2}, dim_labels=b0f_0io->b0f
})",
                  {F32({1, 5, 1}, {1, 2, 3, 4, 5}), F32({2, 1, 1}, {1, 10})});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(Values(*d), ElementsAre(31, 42, 53));
}

TEST(CpuGatherScatterTest, EmbeddingLookupAndScatterAdd) {
  auto r = RunHlo(R"(add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  table = f32[4,2] parameter(0)
  ids = s32[3] parameter(1)
  g = f32[3,2] gather(table, ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
  upd = f32[3,2] constant({{1,1},{2,2},{3,3}})
  s = f32[4,2] scatter(table, ids, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT t = (f32[3,2], f32[4,2]) tuple(g, s)
})",
                  {F32({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31}), S32({3}, {2, 0, 2})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(20, 21, 0, 1, 20, 21));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(2, 3, 10, 11, 24, 25, 30, 31));
}

TEST(CpuGatherScatterTest, ScatterReplaceSkipsOutOfBounds) {
  auto r = RunHlo(R"(rep { a = s32[] parameter(0)
  ROOT b = s32[] parameter(1) }
ENTRY e {
  x = s32[4] parameter(0)
  i = s32[2,1] parameter(1)
  u = s32[2] parameter(2)
  ROOT s = s32[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=rep
})",
                  {S32({4}, {0, 0, 0, 0}), S32({2, 1}, {1, 7}), S32({2}, {5, 6})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(0, 5, 0, 0));
}

TEST(CpuSortTest, KeysValuesAndGeneralComparator) {
  auto r = RunHlo(R"(lt { a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT l = pred[] compare(a, b), direction=LT }
ENTRY e {
  k = f32[2,3] parameter(0)
  v = s32[2,3] iota(), iota_dimension=1
  ROOT s = (f32[2,3], s32[2,3]) sort(k, v), dimensions={1}, is_stable=true, to_apply=lt
})",
                  {F32({2, 3}, {3, 1, 2, 5, 5, 4})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(1, 2, 3, 4, 5, 5));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(1, 2, 0, 2, 0, 1));
  // Descending by absolute value: no fast path.
  auto g = RunHlo(R"(absgt { a = s32[] parameter(0)
  b = s32[] parameter(1)
  x = s32[] abs(a)
  y = s32[] abs(b)
  ROOT g = pred[] compare(x, y), direction=GT }
ENTRY e {
  k = s32[4] parameter(0)
  ROOT s = s32[4] sort(k), dimensions={0}, to_apply=absgt
})",
                  {S32({4}, {1, -5, 3, -2})});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Values(*g), ElementsAre(-5, 3, -2, 1));
}

TEST(CpuRngTest, UniformStaysInRangeNormalHasRoughMoments) {
  auto r = RunHlo(R"(ENTRY e {
  a = f32[] constant(2)
  b = f32[] constant(3)
  u = f32[10000] rng(a, b), distribution=rng_uniform
  m = f32[] constant(0)
  s = f32[] constant(1)
  n = f32[10000] rng(m, s), distribution=rng_normal
  ROOT t = (f32[10000], f32[10000]) tuple(u, n)
})",
                  {});
  ASSERT_TRUE(r.ok()) << r.status();
  double sum = 0, sq = 0;
  for (double v : Values(r->tuple_elements()[0])) {
    ASSERT_GE(v, 2.0);
    ASSERT_LT(v, 3.0);
  }
  for (double v : Values(r->tuple_elements()[1])) {
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / 10000, 0.0, 0.05);
  EXPECT_NEAR(sq / 10000, 1.0, 0.1);
}

// XLA's rng-get-and-update-state: every call sees state of its own, below
// 2^63, and the next execution sees other state again.
TEST(CpuRngTest, EachRngStateCallSeesFreshState) {
  const std::string text = R"(ENTRY e {
  s = u64[2] rng-get-and-update-state(), delta=8
  t = u64[2] rng-get-and-update-state(), delta=8
  ROOT r = (u64[2], u64[2]) tuple(s, t)
})";
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  auto exe = CompileProgram("cpu", **module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  HostDevice device("cpu", 0, int64_t{1} << 30, 4);
  std::vector<std::vector<uint8_t>> seen;
  for (int run = 0; run < 2; ++run) {
    auto out = (*exe)->Execute(device, {}, {});
    ASSERT_TRUE(out.ok()) << out.status();
    const ir::Literal r = HostBuffer::Cast(*out)->ToLiteral();
    for (const ir::Literal& state : r.tuple_elements()) {
      for (int i = 0; i < 2; ++i) EXPECT_LT(state.data<uint64_t>()[i], uint64_t{1} << 63);
      for (const auto& earlier : seen) EXPECT_NE(state.bytes(), earlier);
      seen.push_back(state.bytes());
    }
  }
}

TEST(CpuControlTest, WhileLoopComputes63) {
  // 4 iterations of x*2+1 from 3 give 63.
  auto r = RunHlo(R"(cond {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  two = f32[] constant(2)
  onef = f32[] constant(1)
  m = f32[] multiply(x, two)
  x2 = f32[] add(m, onef)
  ROOT t = (s32[], f32[]) tuple(i2, x2)
}
ENTRY e {
  x = f32[] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[]) tuple(zero, x)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=1
})",
                  {F32({}, {3})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(63));
}

TEST(CpuControlTest, ConditionalAndCall) {
  constexpr char kText[] = R"(neg { a = f32[] parameter(0)
  ROOT n = f32[] negate(a) }
dbl { a = f32[] parameter(0)
  ROOT d = f32[] add(a, a) }
sq { a = f32[] parameter(0)
  ROOT d = f32[] multiply(a, a) }
ENTRY e {
  i = s32[] parameter(0)
  x = f32[] parameter(1)
  b = f32[] conditional(i, x, x, x), branch_computations={neg, dbl, sq}
  ROOT c = f32[] call(b), to_apply=dbl
})";
  for (auto [index, expect] : std::vector<std::pair<int, double>>{{0, -6}, {1, 12}, {2, 18}, {7, 18}}) {
    auto r = RunHlo(kText, {S32({}, {index}), F32({}, {3})});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Values(*r)[0], expect) << index;
  }
}

TEST(CpuFeedTest, InfeedOutfeedAndShapeCheck) {
  HostDevice device("cpu", 0, int64_t{8} << 30, 64);
  constexpr char kText[] = R"(ENTRY e {
  tok = token[] after-all()
  in = (f32[2], token[]) infeed(tok)
  x = f32[2] get-tuple-element(in), index=0
  t2 = token[] get-tuple-element(in), index=1
  y = f32[2] add(x, x)
  o = token[] outfeed(y, t2)
  ROOT r = f32[2] negate(y)
})";
  ASSERT_TRUE(device.infeed().Push(F32({2}, {1, 2}), absl::Seconds(1)).ok());
  auto r = RunHlo(kText, {}, &device);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(-2, -4));
  auto out = device.outfeed().Pop(absl::Seconds(1));
  ASSERT_TRUE(out.ok());
  EXPECT_THAT(Values(*out), ElementsAre(2, 4));
  // A wrong-shaped element is refused with both shapes named.
  ASSERT_TRUE(device.infeed().Push(F32({3}, {1, 2, 3}), absl::Seconds(1)).ok());
  auto bad = RunHlo(kText, {}, &device);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected f32[2]"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("f32[3]"), std::string::npos);
  // An empty infeed times out instead of hanging.
  auto starved = RunHlo(kText, {}, &device);
  ASSERT_FALSE(starved.ok());
  EXPECT_EQ(starved.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(CpuMiscTest, AllReduceReplicaIdAndCustomCall) {
  auto r = RunHlo(R"(add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[2] parameter(0)
  ar = f32[2] all-reduce(x), replica_groups={}, to_apply=add
  id = u32[] replica-id()
  ROOT t = (f32[2], u32[]) tuple(ar, id)
})",
                  {F32({2}, {1.5, 2.5})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(1.5, 2.5));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAre(0));

  constexpr char kCustom[] = R"(ENTRY e {
  x = f32[2] parameter(0)
  ROOT c = f32[2] custom-call(x), custom_call_target="test.twice"
})";
  auto missing = RunHlo(kCustom, {F32({2}, {1, 2})});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'test.twice' is not registered"), std::string::npos);
  runtime::CustomCallRegistry::Global().Register(
      "test.twice", [](const std::vector<ir::Literal>& args) -> absl::StatusOr<ir::Literal> {
        ir::Literal out = args[0];
        for (int64_t i = 0; i < out.element_count(); ++i) out.SetFromDouble(i, 2 * out.GetAsDouble(i));
        return out;
      });
  auto twice = RunHlo(kCustom, {F32({2}, {1, 2})});
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_THAT(Values(*twice), ElementsAre(2, 4));
}

// XLA's LAPACK calls run through LAPACK (their values against XLA's: the
// jax_det*, jax_qr*, jax_eigh*, jax_svd* corpus modules). A batch of two
// LU factorizations, one of a singular matrix (info names the zero pivot),
// and declared results that do not match the routine, refused at compile.
TEST(CpuOpsTest, LapackCallsRunThroughLapack) {
  auto lu = RunHlo(R"(ENTRY e {
  a = f64[2,2,2] parameter(0)
  ROOT f = (f64[2,2,2], s32[2,2], s32[2]) custom-call(a), custom_call_target="lapack_dgetrf_ffi"
})",
                   {Lit<double>(ElementType::kF64, {2, 2, 2}, {1, 2, 3, 4, 1, 2, 2, 4})});
  ASSERT_TRUE(lu.ok()) << lu.status();
  // [[1,2],[3,4]]: rows swapped (pivot 2), l21 = 1/3, u = [[3,4],[0,2/3]].
  EXPECT_THAT(Values(lu->tuple_elements()[0]),
              ElementsAre(3, 4, DoubleNear(1.0 / 3, 1e-12), DoubleNear(2.0 / 3, 1e-12), 2, 4,
                          0.5, 0));
  EXPECT_THAT(Values(lu->tuple_elements()[1]), ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(Values(lu->tuple_elements()[2]), ElementsAre(0, 2));

  auto eig = RunHlo(R"(ENTRY e {
  a = f32[2,2] parameter(0)
  ROOT f = (f32[2,2], f32[2], s32[]) custom-call(a), custom_call_target="lapack_ssyevd_ffi", backend_config={mode = 78 : ui8, uplo = 76 : ui8}
})",
                    {F32({2, 2}, {2, 1, 1, 2})});
  ASSERT_TRUE(eig.ok()) << eig.status();
  EXPECT_THAT(Values(eig->tuple_elements()[1]), ElementsAre(DoubleNear(1, 1e-6), DoubleNear(3, 1e-6)));

  auto wrong = RunHlo(R"(ENTRY e {
  a = f32[3,2] parameter(0)
  ROOT f = (f32[3,2], f32[3]) custom-call(a), custom_call_target="lapack_sgeqrf_ffi"
})",
                      {F32({3, 2}, {1, 2, 3, 4, 5, 6})});
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()),
              HasSubstr("lapack_sgeqrf_ffi: the result must be (f32[3,2], f32[2])"));
  auto not_square = RunHlo(R"(ENTRY e {
  a = f32[3,2] parameter(0)
  ROOT f = (f32[3,2], f32[2], s32[]) custom-call(a), custom_call_target="lapack_ssyevd_ffi"
})",
                           {F32({3, 2}, {1, 2, 3, 4, 5, 6})});
  ASSERT_FALSE(not_square.ok());
  EXPECT_THAT(std::string(not_square.status().message()), HasSubstr("a must be square"));
}

// A module sent as a proto skips the parser: the kernel checks the target,
// its options and its sizes itself, and empty matrices give zeros, never
// what LAPACK's scratch held.
TEST(CpuOpsTest, LapackCallsCheckWhatTheParserWouldHave) {
  auto compile = [](const std::string& target, const std::string& config,
                    const std::string& a = "f32[4,4]",
                    const std::string& result = "(f32[4,4], f32[4], f32[4,4], f32[4,4], s32[])")
      -> absl::Status {
    auto module = ir::ParseModule(absl::StrCat("ENTRY e {\n  a = ", a, " parameter(0)\n  ROOT c = ",
                                               result, " custom-call(a), custom_call_target=\"t\"\n}"));
    if (!module.ok()) return module.status();
    ir::Attributes& at = (*module)->entry()->root()->mutable_attrs();
    at.custom_call_target = target;
    at.config = config;
    return CompileProgram("cpu", **module, {}).status();
  };
  EXPECT_THAT(compile("lapack_", "").message(), HasSubstr("is not a LAPACK call Kiln runs"));
  EXPECT_THAT(compile("lapack__ffi", "").message(), HasSubstr("is not a LAPACK call Kiln runs"));
  EXPECT_THAT(compile("lapack_cgesdd_ffi", "").message(),
              HasSubstr("is not a LAPACK call Kiln runs"));
  EXPECT_THAT(compile("lapack_spotrf_ffi", "").message(),
              HasSubstr("is not a LAPACK call Kiln runs"));
  EXPECT_THAT(compile("lapack_sgesdd_ffi", "{mode = 79 : ui8}").message(),
              HasSubstr("option mode = 79 is not one it takes"));
  EXPECT_THAT(compile("lapack_sgesdd_ffi", "{uplo = 76 : ui8}").message(),
              HasSubstr("option uplo = 76 is not one it takes"));
  EXPECT_THAT(compile("lapack_sgesdd_ffi", "{mode = 65 : ui8").message(),
              HasSubstr("backend_config"));
  EXPECT_THAT(compile("lapack_sgesdd_ffi", "", "f32[20000,2]",
                      "(f32[20000,2], f32[2], f32[20000,20000], f32[2,2], s32[])")
                  .message(),
              HasSubstr("larger than Kiln's LAPACK calls take"));
  EXPECT_TRUE(compile("lapack_sgesdd_ffi", "{mode = 65 : ui8}").ok());
  // A config from a proto prints quoted and escaped: it cannot write text
  // of its own into the module (and so into its fingerprint).
  auto module = ir::ParseModule(
      "ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT c = f32[2] custom-call(a), "
      "custom_call_target=\"t\"\n}");
  ASSERT_TRUE(module.ok());
  (*module)->entry()->root()->mutable_attrs().config = "x}\n  ROOT d = f32[2] negate(a)";
  EXPECT_THAT(ir::PrintModule(**module),
              HasSubstr(R"x(backend_config="x}\n  ROOT d = f32[2] negate(a)")x"));

  // gesdd of an empty matrix: every output is zero.
  auto empty = RunHlo(R"(ENTRY e {
  a = f32[0,3] parameter(0)
  ROOT c = (f32[0,3], f32[0], f32[0,0], f32[3,3], s32[]) custom-call(a), custom_call_target="lapack_sgesdd_ffi", backend_config={mode = 65 : ui8}
})",
                      {F32({0, 3}, {})});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(Values(empty->tuple_elements()[3]), ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(Values(empty->tuple_elements()[4]), ElementsAre(0));
}

TEST(CpuDeviceTest, ArgumentChecksAndMemoryLimit) {
  HostDevice device("cpu", 0, 1024, 4);
  auto bad_args = RunHlo("ENTRY e {\n x = f32[2] parameter(0)\n ROOT n = f32[2] negate(x)\n}",
                         {F32({3}, {1, 2, 3})}, &device);
  ASSERT_FALSE(bad_args.ok());
  EXPECT_EQ(bad_args.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_args.status().message().find("expects f32[2]"), std::string::npos);
  auto too_big = RunHlo("ENTRY e {\n ROOT i = f32[1000] iota(), iota_dimension=0\n}", {}, &device);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(device.memory_stats().bytes_in_use, 0);
  auto fits = RunHlo("ENTRY e {\n ROOT i = f32[100] iota(), iota_dimension=0\n}", {}, &device);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(device.memory_stats().bytes_in_use, 0);  // result buffer released
  EXPECT_EQ(device.memory_stats().peak_bytes_in_use, 400);
}

// A comparator is client code: one that is not a strict weak order (it
// draws random numbers, or meets NaN under LT) still sorts to a permutation
// of the input, never outside it.
TEST(CpuSortTest, ComparatorsThatAreNotOrdersStayInBounds) {
  constexpr char kRandomOrder[] = R"(
HloModule random_sort
coin {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[] rng(lo, hi), distribution=rng_uniform
  half = f32[] constant(0.5)
  ROOT lt = pred[] compare(r, half), direction=LT
}
ENTRY main {
  x = f32[257] parameter(0)
  ROOT s = f32[257] sort(x), dimensions={0}, to_apply=coin
})";
  std::vector<float> values(257);
  for (int i = 0; i < 257; ++i) values[i] = i;
  auto out = RunHlo(kRandomOrder, {F32({257}, values)});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> sorted = Values(*out);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 257; ++i) EXPECT_EQ(sorted[i], i);

  constexpr char kNanLess[] = R"(
HloModule nan_sort
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY main {
  x = f32[100] parameter(0)
  ROOT s = f32[100] sort(x), dimensions={0}, to_apply=less
})";
  std::vector<float> with_nans(100);
  for (int i = 0; i < 100; ++i) with_nans[i] = i % 3 == 0 ? NAN : 100 - i;
  auto nan_out = RunHlo(kNanLess, {F32({100}, with_nans)});
  ASSERT_TRUE(nan_out.ok()) << nan_out.status();
  int nans = 0;
  for (double v : Values(*nan_out)) nans += std::isnan(v);
  EXPECT_EQ(nans, 34);
}

// Window dilation spreads the window's taps apart; base dilation spreads
// the input. Expected values worked by hand from XLA's reduce-window
// semantics.
TEST(CpuWindowTest, ReduceWindowHonoursDilations) {
  constexpr char kDilated[] = R"(
HloModule dilated
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[6] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce-window(x, zero), window={size=2 rhs_dilate=2}, to_apply=add
})";
  // Taps i and i+2: 1+3, 2+4, 3+5, 4+6.
  auto out = RunHlo(kDilated, {F32({6}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values(*out), ElementsAre(4, 6, 8, 10));

  constexpr char kBase[] = R"(
HloModule base_dilated
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce-window(x, zero), window={size=2 lhs_dilate=2}, to_apply=add
})";
  // The input spread to [1, 0, 2, 0, 3] (holes take the init value 0).
  auto based = RunHlo(kBase, {F32({3}, {1, 2, 3})});
  ASSERT_TRUE(based.ok()) << based.status();
  EXPECT_THAT(Values(*based), ElementsAre(1, 2, 2, 3));
}

}  // namespace
}  // namespace kiln::host

namespace kiln::host {
namespace {

// A loop fusion whose input is an intermediate read for the last time
// writes its result over that input: correct values, and the execution's
// peak memory holds one array fewer.
TEST(CpuInPlaceTest, ALastReadIntermediateTakesTheResult) {
  constexpr int64_t n = 1 << 18;  // 1 MiB per f32 array
  const std::string text = R"(ENTRY e {
  x = f32[262144] parameter(0)
  y = f32[262144] parameter(1)
  a = f32[262144] exponential(x)
  u1 = f32[262144] negate(a)
  m = f32[262144] multiply(a, y)
  u2 = f32[262144] add(m, a)
  ROOT t = (f32[262144], f32[262144]) tuple(u1, u2)
})";
  HostDevice device("cpu", 0, int64_t{1} << 30, 4);
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(passes::LoopFusion().Run(module->get()).ok());
  auto exe = CompileProgram("cpu", **module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<float> xs(n), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    xs[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
    ys[i] = static_cast<float>(i % 5) - 2.0f;
  }
  auto x = device.TransferToDevice(F32({n}, xs));
  auto y = device.TransferToDevice(F32({n}, ys));
  ASSERT_TRUE(x.ok() && y.ok());
  const int64_t before = device.memory()->Stats().bytes_in_use;
  auto out = (*exe)->Execute(device, {*x, *y}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  // x and y are held outside; a, u1 and u2 would be three more arrays, and
  // are two when u2 takes a's buffer.
  EXPECT_EQ(device.memory()->Stats().peak_bytes_in_use - before, 2 * n * 4);
  ir::Literal result = HostBuffer::Cast(*out)->ToLiteral();
  const float* u1 = result.tuple_elements()[0].data<float>();
  const float* u2 = result.tuple_elements()[1].data<float>();
  for (int64_t i = 0; i < n; i += 997) {
    const float a = std::exp(xs[i]);
    ASSERT_EQ(u1[i], -a) << i;
    ASSERT_EQ(u2[i], a * ys[i] + a) << i;
  }
}

}  // namespace
}  // namespace kiln::host

namespace kiln::host {
namespace {

// Reductions follow elementwise maximum and minimum: NaN propagates, and of
// +0 and -0 maximum takes +0 and minimum -0, in either order.
TEST(CpuReduceTest, MaxAndMinReducersKeepNanAndSignedZeroRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string text = R"(max { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
min { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] minimum(a, b) }
ENTRY e {
  x = f32[6,2] parameter(0)
  ninf = f32[] constant(-inf)
  inf = f32[] constant(inf)
  mx = f32[6] reduce(x, ninf), dimensions={1}, to_apply=max
  mn = f32[6] reduce(x, inf), dimensions={1}, to_apply=min
  ROOT t = (f32[6], f32[6]) tuple(mx, mn)
})";
  auto r = RunHlo(text, {F32({6, 2}, {-0.0f, 0.0f, 0.0f, -0.0f, nan, 1.0f, 1.0f, nan, 2.0f, 3.0f,
                                      -5.0f, -5.0f})});
  ASSERT_TRUE(r.ok()) << r.status();
  const float* mx = r->tuple_elements()[0].data<float>();
  const float* mn = r->tuple_elements()[1].data<float>();
  EXPECT_TRUE(mx[0] == 0.0f && !std::signbit(mx[0]));
  EXPECT_TRUE(mx[1] == 0.0f && !std::signbit(mx[1]));
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_TRUE(std::isnan(mx[3]));
  EXPECT_EQ(mx[4], 3.0f);
  EXPECT_EQ(mx[5], -5.0f);
  EXPECT_TRUE(mn[0] == 0.0f && std::signbit(mn[0]));
  EXPECT_TRUE(mn[1] == 0.0f && std::signbit(mn[1]));
  EXPECT_TRUE(std::isnan(mn[2]));
  EXPECT_TRUE(std::isnan(mn[3]));
  EXPECT_EQ(mn[4], 2.0f);
  EXPECT_EQ(mn[5], -5.0f);
}


// Philox4x32-10's published known-answer vectors (Random123's kat_vectors):
// counter and key all zeros, and all ones.
TEST(CpuRngBitGeneratorTest, DrawsPhiloxWordsAndAdvancesTheCounter) {
  EXPECT_THAT(Philox4x32({0, 0, 0, 0}, {0, 0}),
              ElementsAre(0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u));
  EXPECT_THAT(Philox4x32({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
              ElementsAre(0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu));
  constexpr char kText[] = R"(
ENTRY e {
  s = u64[3] parameter(0)
  ROOT r = (u64[3], u32[6]) rng-bit-generator(s), algorithm=rng_default
})";
  // Key all ones, counter all ones: the second block's counter wraps to 0.
  const ir::Literal state =
      ir::Literal::FromVector<uint64_t>(ElementType::kU64, {3}, {~0ull, ~0ull, ~0ull});
  auto r = RunHlo(kText, {state});
  ASSERT_TRUE(r.ok()) << r.status();
  const ir::Literal& next = r->tuple_elements()[0];
  const ir::Literal& bits = r->tuple_elements()[1];
  EXPECT_THAT(std::vector<uint32_t>(bits.data<uint32_t>(), bits.data<uint32_t>() + 4),
              ElementsAre(0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu));
  const std::array<uint32_t, 4> wrapped = Philox4x32({0, 0, 0, 0}, {~0u, ~0u});
  EXPECT_EQ(bits.data<uint32_t>()[4], wrapped[0]);
  EXPECT_EQ(bits.data<uint32_t>()[5], wrapped[1]);
  // Two blocks used: the counter moved by two, carrying into its high word.
  EXPECT_THAT(std::vector<uint64_t>(next.data<uint64_t>(), next.data<uint64_t>() + 3),
              ElementsAre(~0ull, 1ull, 0ull));
  // Drawing again from the new state gives new bits; the same state, the
  // same bits.
  auto again = RunHlo(kText, {next});
  auto same = RunHlo(kText, {state});
  ASSERT_TRUE(again.ok() && same.ok());
  EXPECT_NE(again->tuple_elements()[1].bytes(), bits.bytes());
  EXPECT_EQ(same->tuple_elements()[1].bytes(), bits.bytes());
}

// XLA's streams for a u64[2] state {1, 2}, as XLA's CPU backend gives them
// (JAX's lax.rng_bit_generator; more shapes and types: the jax_rng_*
// corpus modules). rng_default is XLA's CPU default, Philox, whose u64[2]
// state is read reversed.
TEST(CpuRngBitGeneratorTest, NamedAlgorithmsGiveXlasBits) {
  const ir::Literal state = ir::Literal::FromVector<uint64_t>(ElementType::kU64, {2}, {1, 2});
  auto run = [&](const std::string& algorithm) {
    return RunHlo(absl::StrCat("ENTRY e {\n s = u64[2] parameter(0)\n ROOT r = (u64[2], u32[4]) "
                               "rng-bit-generator(s), algorithm=", algorithm, "\n}"),
                  {state});
  };
  for (const char* philox : {"rng_philox", "rng_default"}) {
    auto r = run(philox);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(Values(r->tuple_elements()[1]),
                ElementsAre(2100602697u, 2847456232u, 2074354647u, 800269529u))
        << philox;
    EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAre(1, 3)) << philox;
  }
  auto three_fry = run("rng_three_fry");
  ASSERT_TRUE(three_fry.ok()) << three_fry.status();
  EXPECT_THAT(Values(three_fry->tuple_elements()[1]),
              ElementsAre(43444564u, 2150618427u, 3979645651u, 3745730563u));
  // Four 32-bit results are two counters' pairs.
  EXPECT_THAT(Values(three_fry->tuple_elements()[0]), ElementsAre(1, 4));
  EXPECT_THAT(ThreeFry2x32({2, 0}, {1, 0}), ElementsAre(43444564u, 2150618427u));
}

TEST(CpuRngBitGeneratorTest, BadAlgorithmsAndShapesAreRefused) {
  const ir::Literal state3 =
      ir::Literal::FromVector<uint64_t>(ElementType::kU64, {3}, {1, 2, 3});
  auto three_fry = RunHlo(
      "ENTRY e {\n s = u64[3] parameter(0)\n ROOT r = (u64[3], u32[4]) rng-bit-generator(s), "
      "algorithm=rng_three_fry\n}",
      {state3});
  ASSERT_FALSE(three_fry.ok());
  EXPECT_THAT(three_fry.status().message(),
              ::testing::HasSubstr("state must be u64[2] for rng_three_fry"));
  const ir::Literal state = ir::Literal::FromVector<uint64_t>(ElementType::kU64, {2}, {1, 2});
  auto unknown = RunHlo(
      "ENTRY e {\n s = u64[2] parameter(0)\n ROOT r = (u64[2], u32[4]) rng-bit-generator(s), "
      "algorithm=rng_mersenne\n}",
      {state});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("algorithm=rng_mersenne is unknown"));
  auto floats = RunHlo(
      "ENTRY e {\n s = u64[2] parameter(0)\n ROOT r = (u64[2], f32[4]) rng-bit-generator(s), "
      "algorithm=rng_default\n}",
      {state});
  ASSERT_FALSE(floats.ok());
  EXPECT_THAT(floats.status().message(), ::testing::HasSubstr("an integer array"));
}

}  // namespace
}  // namespace kiln::host
