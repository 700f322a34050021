#include "server/metrics.h"

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TEST(MetricsTest, CountersAndPercentiles) {
  Metrics m;
  m.Add("x");
  m.Add("x", 4);
  EXPECT_EQ(m.Get("x"), 5);
  EXPECT_EQ(m.Get("missing"), 0);
  for (int i = 1; i <= 100; ++i) m.Record("t", absl::Microseconds(i));
  v1::MetricsResponse snap = m.Snapshot();
  ASSERT_EQ(snap.timers_size(), 1);
  const auto& t = snap.timers(0);
  EXPECT_EQ(t.count(), 100);
  EXPECT_DOUBLE_EQ(t.mean_micros(), 50.5);
  EXPECT_DOUBLE_EQ(t.max_micros(), 100);
  EXPECT_NEAR(t.p50_micros(), 50.5, 1);
  EXPECT_NEAR(t.p90_micros(), 90, 1);
  EXPECT_NEAR(t.p99_micros(), 99, 1);
}

}  // namespace
}  // namespace kiln::server
