// Helpers shared by the lazy-tensor tests (client/loop_test.cc,
// client/tensor_test.cc and client/pipeline_test.cc over the embedded
// service, tests/feed_e2e_test.cc against kiln-server).
#ifndef KILN_CLIENT_LOOP_TEST_UTIL_H_
#define KILN_CLIENT_LOOP_TEST_UTIL_H_

#include <vector>

#include "client/lazy.h"
#include "client/loop.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client::testing {

// A client of an embedded service with one cpu device (null, and a test
// failure, if it cannot start).
inline std::unique_ptr<Client> ConnectEmbedded(const std::string& backend_config = "") {
  embedded::Options options;
  options.devices = "cpu:1";
  options.backend_config = backend_config;
  auto client = embedded::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

inline ir::Literal F32(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

inline Tensor Vec(LazyContext* ctx, std::vector<float> v) {
  return ctx->FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v, "cpu:0");
}

inline std::vector<double> Values(const ir::Literal& lit) {
  std::vector<double> out;
  for (int64_t i = 0; i < lit.element_count(); ++i) out.push_back(lit.GetAsDouble(i));
  return out;
}

// The values of `t`, computed as needed; none (and a test failure) if that
// fails.
inline std::vector<double> Values(const Tensor& t) {
  absl::StatusOr<ir::Literal> lit = t.ToHost();
  EXPECT_TRUE(lit.ok()) << lit.status();
  return lit.ok() ? Values(*lit) : std::vector<double>{};
}

// A running sum of f32[2] infeed values; each iteration outfeeds the sum.
inline absl::StatusOr<std::vector<Tensor>> SumInfeeds(DeviceLoop& loop,
                                                      const std::vector<Tensor>& s) {
  Tensor next = s[0] + loop.Infeed(ir::Shape(ir::ElementType::kF32, {2}));
  loop.Outfeed(next);
  return std::vector<Tensor>{next};
}

}  // namespace kiln::client::testing

#endif  // KILN_CLIENT_LOOP_TEST_UTIL_H_
