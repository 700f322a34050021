// How Program::Build splits a loop-fused computation into steps, and that
// fused steps compute what the unfused instructions would.
#include "runtime/host/program.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/fusion.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/host/host_device.h"
#include "runtime/host/test_util.h"

namespace kiln::host {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// The steps the entry computation of `text` compiles to, after loop fusion.
int StepsOf(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return -1;
  EXPECT_TRUE(ir::Verify(**module).ok());
  auto fused = passes::LoopFusion().Run(module->get());
  EXPECT_TRUE(fused.ok()) << fused.status();
  ProgramCache cache;
  auto program = cache.Get((*module)->entry());
  EXPECT_TRUE(program.ok()) << program.status();
  return program.ok() ? (*program)->step_count() : -1;
}

// A bias over the channels of NHWC data, added and then clamped at zero,
// with the zero broadcast read by two groups: the broadcasts are expanded
// inside the fused loops and never written out, and the values are those of
// the broadcasts written out.
TEST(ProgramTest, BiasAndScalarBroadcastsExpandInsideFusedLoops) {
  const std::string text = R"(ENTRY e {
  x = f32[2,3,2,3] parameter(0)
  b = f32[3] parameter(1)
  bb = f32[2,3,2,3] broadcast(b), dimensions={3}
  a = f32[2,3,2,3] add(x, bb)
  z = f32[] constant(0)
  zb = f32[2,3,2,3] broadcast(z), dimensions={}
  relu = f32[2,3,2,3] maximum(a, zb)
  mask = pred[2,3,2,3] compare(a, zb), direction=GT
  ROOT t = (f32[2,3,2,3], pred[2,3,2,3]) tuple(relu, mask)
})";
  // The constant; one loop writing the add (it has two users) and the
  // maximum, and a step taking each of its two results; the compare's loop;
  // the tuple. No step for either broadcast.
  EXPECT_EQ(StepsOf(text), 6);
  std::vector<float> x(36);
  for (int i = 0; i < 36; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  auto r = RunHlo(text, {F32({2, 3, 2, 3}, x), F32({3}, {1.0f, -2.0f, 0.5f})});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> relu, mask;
  for (int i = 0; i < 36; ++i) {
    const float a = x[i] + (i % 3 == 0 ? 1.0f : i % 3 == 1 ? -2.0f : 0.5f);
    relu.push_back(a > 0 ? a : 0);
    mask.push_back(a > 0 ? 1 : 0);
  }
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAreArray(relu));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAreArray(mask));
}

// A bias over the channels of NCHW data (an inner run of H*W elements per
// value), a vector broadcast over the leading dimensions, and a large group
// that splits over blocks and threads: each block starts partway through a
// run of the broadcast.
TEST(ProgramTest, BroadcastsOverInnerRunsStartPartwayThroughABlock) {
  const int64_t n = 100, c = 7, hw = 97;  // 67,900 elements: several blocks
  const std::string text = absl::StrCat(R"(ENTRY e {
  x = f32[)", n, ",", c, ",", hw, R"(] parameter(0)
  b = f32[)", c, R"(] parameter(1)
  v = f32[)", hw, R"(] parameter(2)
  bb = f32[)", n, ",", c, ",", hw, R"(] broadcast(b), dimensions={1}
  vb = f32[)", n, ",", c, ",", hw, R"(] broadcast(v), dimensions={2}
  s = f32[)", n, ",", c, ",", hw, R"(] add(x, bb)
  ROOT m = f32[)", n, ",", c, ",", hw, R"(] multiply(s, vb)
})");
  EXPECT_EQ(StepsOf(text), 1);
  std::vector<float> x(n * c * hw), b(c), v(hw);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 11);
  for (int64_t i = 0; i < c; ++i) b[i] = static_cast<float>(100 * (i + 1));
  for (int64_t i = 0; i < hw; ++i) v[i] = static_cast<float>(i % 5 + 1);
  auto r = RunHlo(text, {F32({n, c, hw}, x), F32({c}, b), F32({hw}, v)});
  ASSERT_TRUE(r.ok()) << r.status();
  const float* got = r->data<float>();
  for (int64_t i = 0; i < n * c * hw; ++i) {
    const float want = (x[i] + b[(i / hw) % c]) * v[i % hw];
    ASSERT_EQ(got[i], want) << "element " << i;
  }
}

// A broadcast that something other than an elementwise op reads (here a
// dot, and the root) is written out, through the same expansion.
TEST(ProgramTest, BroadcastReadByADotIsWrittenOut) {
  const std::string text = R"(ENTRY e {
  b = f32[2] parameter(0)
  bb = f32[3,2] broadcast(b), dimensions={1}
  ROOT d = f32[3,3] dot(bb, bb), lhs_contracting_dims={1}, rhs_contracting_dims={1}
})";
  EXPECT_EQ(StepsOf(text), 2);
  auto r = RunHlo(text, {F32({2}, {1.0f, 2.0f})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(*r), ElementsAre(5, 5, 5, 5, 5, 5, 5, 5, 5));
}

// One loop writes two outputs. The intermediate `a` is read for the last
// time by the loop, and both outputs have its shape: only the output
// computed after every read of `a` may take its buffer (the first taking
// it would change what the second reads).
TEST(ProgramTest, LoopsWithSeveralOutputsTakeAnInputOnlyAfterItsLastRead) {
  const std::string text = R"(ENTRY e {
  x = f32[4,8] parameter(0)
  a = f32[32] reshape(x)
  u = f32[32] negate(a)
  w = f32[32] add(u, a)
  m = f32[32] multiply(u, u)
  ROOT t = (f32[32], f32[32], f32[32]) tuple(u, w, m)
})";
  // The reshape; one loop writing u and w, and a step taking each; m; the
  // tuple.
  EXPECT_EQ(StepsOf(text), 6);
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 10.5f;
  auto r = RunHlo(text, {F32({4, 8}, x)});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> u, w, m;
  for (int i = 0; i < 32; ++i) {
    u.push_back(-x[i]);
    w.push_back(-x[i] + x[i]);
    m.push_back(x[i] * x[i]);
  }
  EXPECT_THAT(Values(r->tuple_elements()[0]), ElementsAreArray(u));
  EXPECT_THAT(Values(r->tuple_elements()[1]), ElementsAreArray(w));
  EXPECT_THAT(Values(r->tuple_elements()[2]), ElementsAreArray(m));
}

// Random elementwise graphs (values read once or many times, scalar
// broadcasts, ops that end groups, several results): after loop fusion
// each verifies and computes, bit for bit, what it computes without.
// A reshape of a value nothing else holds takes the value's storage over:
// the program fits in memory that could not hold the value twice. One of a
// value the caller still holds copies it, and a loop writing over the copy
// leaves the caller's buffer as it was.
TEST(ProgramTest, AReshapeTakesOverAValueNothingElseHolds) {
  const std::string text = R"(ENTRY e {
  x = f32[4096] parameter(0)
  y = f32[4096] exponential(x)
  r = f32[64,64] reshape(y)
  ROOT n = f32[64,64] negate(r)
})";
  // x and y (16 KiB each) fit in 40 KiB; a copy of y beside them would not.
  HostDevice small("cpu", 0, 40 << 10, 4);
  std::vector<float> x(4096, 0.0f);
  auto r = RunHlo(text, {F32({4096}, x)}, &small);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t i = 0; i < r->element_count(); ++i) ASSERT_EQ(r->data<float>()[i], -1.0f);

  const std::string held = R"(ENTRY e {
  x = f32[4096] parameter(0)
  r = f32[64,64] reshape(x)
  ROOT n = f32[64,64] negate(r)
})";
  HostDevice device("cpu", 0, int64_t{1} << 30, 4);
  auto module = ir::ParseModule(held);
  ASSERT_TRUE(module.ok());
  auto exe = CompileProgram("cpu", **module, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<float> ones(4096, 1.0f);
  std::vector<runtime::BufferPtr> args = {*device.TransferToDevice(F32({4096}, ones))};
  auto out = (*exe)->Execute(device, args, {});
  ASSERT_TRUE(out.ok()) << out.status();
  const ir::Literal got = HostBuffer::Cast(*out)->ToLiteral();
  const ir::Literal kept = HostBuffer::Cast(args[0])->ToLiteral();
  for (int64_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(got.data<float>()[i], -1.0f);
    ASSERT_EQ(kept.data<float>()[i], 1.0f);
  }
}

TEST(ProgramTest, RandomGraphsComputeTheSameFusedAndUnfused) {
  std::mt19937 rng(20261127);
  const char* const kUnary[] = {"negate", "exponential", "sine", "abs", "tanh"};
  const char* const kBinary[] = {"add", "multiply", "subtract", "maximum"};
  for (int trial = 0; trial < 400; ++trial) {
    std::string text = "ENTRY e {\n  p0 = f32[6] parameter(0)\n  p1 = f32[6] parameter(1)\n";
    std::vector<std::string> values = {"p0", "p1"};
    const int count = 3 + static_cast<int>(rng() % 14);
    for (int i = 0; i < count; ++i) {
      const std::string name = absl::StrCat("v", i);
      // Mostly recent values, so chains form; sometimes old ones, so values
      // get several readers.
      auto pick = [&] {
        const size_t n = values.size();
        return values[rng() % 3 == 0 ? rng() % n : n - 1 - rng() % std::min<size_t>(n, 3)];
      };
      switch (rng() % 6) {
        case 0:
          absl::StrAppend(&text, "  ", name, " = f32[6] ", kUnary[rng() % 5], "(", pick(), ")\n");
          break;
        case 1: {
          absl::StrAppend(&text, "  ", name, ".c = f32[] constant(", rng() % 5, ".5)\n  ", name,
                          ".b = f32[6] broadcast(", name, ".c), dimensions={}\n  ", name,
                          " = f32[6] multiply(", pick(), ", ", name, ".b)\n");
          break;
        }
        case 2:
          // Ends groups: another shape and back.
          absl::StrAppend(&text, "  ", name, ".r = f32[2,3] reshape(", pick(), ")\n  ", name,
                          " = f32[6] reshape(", name, ".r)\n");
          break;
        default:
          absl::StrAppend(&text, "  ", name, " = f32[6] ", kBinary[rng() % 4], "(", pick(), ", ",
                          pick(), ")\n");
      }
      values.push_back(name);
    }
    std::vector<std::string> results;
    for (size_t i = 2; i < values.size(); ++i) {
      if (i + 1 == values.size() || rng() % 3 == 0) results.push_back(values[i]);
    }
    std::vector<std::string> shapes(results.size(), "f32[6]");
    absl::StrAppend(&text, "  ROOT t = (", absl::StrJoin(shapes, ", "), ") tuple(",
                    absl::StrJoin(results, ", "), ")\n}");
    std::vector<float> a(6), b(6);
    for (int i = 0; i < 6; ++i) {
      a[i] = static_cast<float>(i) * 0.25f - 0.6f;
      b[i] = 0.3f - static_cast<float>(i) * 0.125f;
    }
    auto fused = RunHlo(text, {F32({6}, a), F32({6}, b)});
    ASSERT_TRUE(fused.ok()) << fused.status() << "\n" << text;
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok());
    auto plain = CompileProgram("cpu", **module, {});
    ASSERT_TRUE(plain.ok());
    HostDevice device("cpu", 0, int64_t{1} << 30, 4);
    std::vector<runtime::BufferPtr> args = {*device.TransferToDevice(F32({6}, a)),
                                            *device.TransferToDevice(F32({6}, b))};
    auto out = (*plain)->Execute(device, args, {});
    ASSERT_TRUE(out.ok());
    const ir::Literal want = HostBuffer::Cast(*out)->ToLiteral();
    ASSERT_EQ(fused->tuple_elements().size(), want.tuple_elements().size());
    for (size_t k = 0; k < want.tuple_elements().size(); ++k) {
      ASSERT_EQ(fused->tuple_elements()[k].bytes(), want.tuple_elements()[k].bytes())
          << "result " << k << " of\n" << text;
    }
  }
}

}  // namespace
}  // namespace kiln::host
