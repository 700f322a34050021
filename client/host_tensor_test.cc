// Host tensors: values of every op, the device's element rules (checked
// against the CPU backend on the same inputs), broadcasting, reductions,
// matrix products, indexing, conversions to and from device tensors and
// .npy files, and errors that pass from op to op.
#include "client/host_tensor.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "client/lazy.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

HostTensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return HostTensor::FromVector<float>(ElementType::kF32, std::move(dims), v);
}

HostTensor Random(ElementType type, std::vector<int64_t> dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-3, 3);
  HostTensor t = HostTensor::Zeros(type, std::move(dims));
  ir::Literal lit = t.literal();
  for (int64_t i = 0; i < lit.element_count(); ++i) {
    lit.SetFromDouble(i, ir::IsFloatType(type) ? dist(rng) : std::round(dist(rng) * 1000));
  }
  return HostTensor(std::move(lit));
}

TEST(HostTensorTest, ElementwiseOpsBroadcastAsNumPyDoes) {
  HostTensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ((x + F32({3}, {10, 20, 30})).ToDoubles(),
            (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((F32({2, 1}, {1, 2}) * F32({1, 3}, {1, 10, 100})).ToDoubles(),
            (std::vector<double>{1, 10, 100, 2, 20, 200}));
  EXPECT_EQ((x * 2.0 - 1.0).ToDoubles(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ((-x / 2.0).ToDoubles(), (std::vector<double>{-0.5, -1, -1.5, -2, -2.5, -3}));
  EXPECT_EQ(Equal(x, F32({3}, {1, 0, 3})).ToDoubles(), (std::vector<double>{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(Less(x, F32({}, {3})).dtype(), ElementType::kPred);
  HostTensor bad = x + F32({2}, {1, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("do not broadcast"), std::string::npos) << bad.status();
  HostTensor mixed = x + HostTensor::Full(ElementType::kS32, {3}, 1);
  EXPECT_NE(mixed.status().message().find("Cast"), std::string::npos) << mixed.status();
  // An error passes on through later ops, and reads as NaN or an error.
  HostTensor later = Exp(Sum(bad * 2.0));
  EXPECT_EQ(later.status(), bad.status());
  EXPECT_TRUE(std::isnan(later.At({})));
  EXPECT_FALSE(later.Item().ok());
}

TEST(HostTensorTest, ElementRulesAreTheDevicesOnes) {
  // NaN propagates through maximum, integers wrap and divide as XLA does.
  EXPECT_TRUE(std::isnan(Maximum(F32({2}, {1, NAN}), F32({2}, {NAN, 2})).At({0})));
  EXPECT_TRUE(std::isnan(Maximum(F32({2}, {1, NAN}), F32({2}, {NAN, 2})).At({1})));
  HostTensor big = HostTensor::FromVector<int32_t>(ElementType::kS32, {3},
                                                   {std::numeric_limits<int32_t>::max(), 7, -7});
  EXPECT_EQ((big + 1.0).At({0}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ((big / HostTensor::FromVector<int32_t>(ElementType::kS32, {3}, {1, 0, 2})).ToDoubles(),
            (std::vector<double>{std::numeric_limits<int32_t>::max(), -1, -3}));
  EXPECT_EQ(Cast(F32({4}, {1e10f, -1e10f, NAN, 2.7f}), ElementType::kS32).ToDoubles(),
            (std::vector<double>{std::numeric_limits<int32_t>::max(),
                                 std::numeric_limits<int32_t>::min(), 0, 2}));

  // The same ops on the CPU backend give the same bits, in f32, bf16 and s32.
  auto client = embedded::Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  auto ctx = LazyContext::Create(client->get());
  for (ElementType type : {ElementType::kF32, ElementType::kBF16, ElementType::kS32}) {
    SCOPED_TRACE(ir::ElementTypeName(type));
    HostTensor a = Random(type, {4, 5}, 1), b = Random(type, {4, 5}, 2), c = Random(type, {5}, 3);
    HostTensor host = Maximum(a * b - c, a) + b / (c * c + 1.0);
    Tensor da = a.ToDevice(ctx.get(), "cpu:0"), db = b.ToDevice(ctx.get(), "cpu:0"),
           dc = c.ToDevice(ctx.get(), "cpu:0");
    Tensor device = client::Maximum(da * db - dc, da) + db / (dc * dc + 1.0);
    absl::StatusOr<HostTensor> back = HostTensor::FromDevice(device);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->literal(), host.literal());
    if (type == ElementType::kS32) continue;
    HostTensor host_sum = Sum(Exp(Random(type, {3, 300}, 4) / 3.0), {1});
    Tensor device_sum = client::Sum(client::Exp(Random(type, {3, 300}, 4).ToDevice(ctx.get(),
                                                                                   "cpu:0") /
                                                3.0),
                                    {1});
    absl::StatusOr<HostTensor> sums = HostTensor::FromDevice(device_sum);
    ASSERT_TRUE(sums.ok()) << sums.status();
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(sums->At({i}), host_sum.At({i}), 1e-5 * std::abs(host_sum.At({i})) +
                                                       (type == ElementType::kBF16 ? 2 : 0.01));
    }
  }
}

TEST(HostTensorTest, ReductionsOverAnyDimensions) {
  HostTensor x = F32({2, 3}, {1, 5, 3, 4, 2, 6});
  EXPECT_EQ(Sum(x).ToDoubles(), (std::vector<double>{21}));
  EXPECT_EQ(Sum(x, {0}).ToDoubles(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(Sum(x, {1}, true).dims(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(Mean(x, {-1}).ToDoubles(), (std::vector<double>{3, 4}));
  EXPECT_EQ(ReduceMax(x, {1}).ToDoubles(), (std::vector<double>{5, 6}));
  EXPECT_TRUE(std::isnan(ReduceMax(F32({3}, {1, NAN, 2})).At({})));
  EXPECT_EQ(Argmax(x, 1).ToDoubles(), (std::vector<double>{1, 2}));
  EXPECT_EQ(Argmax(F32({4}, {1, 3, 3, 2}), 0).ToDoubles(), (std::vector<double>{1}));
  EXPECT_EQ(Argmax(F32({3}, {1, NAN, 5}), 0).ToDoubles(), (std::vector<double>{1}));
  EXPECT_FALSE(Sum(x, {2}).ok());
  EXPECT_FALSE(Sum(x, {1, 1}).ok());
  EXPECT_FALSE(Mean(HostTensor::Full(ElementType::kS32, {2}, 1)).ok());
  // Halves sum in float: 1024 ones in bf16 make 1024, where summing in
  // bf16 would stop at 256.
  EXPECT_EQ(Sum(HostTensor::Full(ElementType::kBF16, {1024}, 1)).At({}), 1024);
}

TEST(HostTensorTest, MatmulMatchesAFloat64Reference) {
  HostTensor a = Random(ElementType::kF32, {2, 7, 5}, 5), b = Random(ElementType::kF32, {2, 5, 3}, 6);
  HostTensor batched = Matmul(a, b);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched.dims(), (std::vector<int64_t>{2, 7, 3}));
  for (int64_t p = 0; p < 2; ++p) {
    HostTensor plain = Matmul(Reshape(Slice(a, {p, 0, 0}, {p + 1, 7, 5}), {7, 5}),
                              Reshape(Slice(b, {p, 0, 0}, {p + 1, 5, 3}), {5, 3}));
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        double want = 0;
        for (int64_t l = 0; l < 5; ++l) want += a.At({p, i, l}) * b.At({p, l, j});
        EXPECT_NEAR(batched.At({p, i, j}), want, 1e-5 * (1 + std::abs(want)));
        EXPECT_EQ(plain.At({i, j}), batched.At({p, i, j}));
      }
    }
  }
  EXPECT_FALSE(Matmul(a, a).ok());
  EXPECT_FALSE(Matmul(HostTensor::Full(ElementType::kS32, {2, 2}, 1),
                      HostTensor::Full(ElementType::kS32, {2, 2}, 1))
                   .ok());
}

TEST(HostTensorTest, ShapesAndIndexing) {
  HostTensor x = HostTensor::Arange(ElementType::kF32, 6);
  HostTensor m = Reshape(x, {2, 3});
  EXPECT_EQ(m.At({1, 0}), 3);
  EXPECT_EQ(Transpose(m, {1, 0}).ToDoubles(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(Slice(m, {0, 1}, {2, 3}).ToDoubles(), (std::vector<double>{1, 2, 4, 5}));
  HostTensor ids = HostTensor::FromVector<int32_t>(ElementType::kS32, {3}, {1, 0, 1});
  EXPECT_EQ(Take(m, ids).ToDoubles(), (std::vector<double>{3, 4, 5, 0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(Reshape(x, {4}).ok());
  EXPECT_FALSE(Transpose(m, {0, 0}).ok());
  EXPECT_FALSE(Slice(m, {0, 2}, {2, 4}).ok());
  EXPECT_FALSE(Take(m, HostTensor::FromVector<int32_t>(ElementType::kS32, {1}, {2})).ok());
  EXPECT_FALSE(HostTensor::FromVector<float>(ElementType::kF32, {2, 2}, {1, 2, 3}).ok());
  EXPECT_FALSE(HostTensor(ir::Literal::Tuple({})).ok());
  EXPECT_EQ(m.ToString(), "f32[2,3] {0, 1, 2, 3, 4, 5}");
  EXPECT_TRUE(std::isnan(m.At({2, 0})));
}

TEST(HostTensorTest, ConvertsToAndFromDevicesAndNpy) {
  auto client = embedded::Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  auto ctx = LazyContext::Create(client->get());
  HostTensor x = F32({2, 2}, {1, 2, 3, 4});
  Tensor doubled = x.ToDevice(ctx.get(), "cpu:0") * 2.0;
  absl::StatusOr<HostTensor> back = HostTensor::FromDevice(doubled);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToDoubles(), (std::vector<double>{2, 4, 6, 8}));
  EXPECT_FALSE(HostTensor().ToDevice(ctx.get(), "cpu:0").status().ok());

  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln-host-tensor-" + std::to_string(::getpid()) + ".npy"))
          .string();
  ASSERT_TRUE(x.WriteNpy(path).ok());
  absl::StatusOr<HostTensor> read = HostTensor::ReadNpy(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->literal(), x.literal());
  EXPECT_FALSE(HostTensor::ReadNpy(path).ok());
}

}  // namespace
}  // namespace kiln::client
