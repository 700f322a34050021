#include "server/prometheus.h"

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TEST(PrometheusTest, ConventionalNamesLabelsAndUnits) {
  Metrics m;
  m.Add("bytes_in", 100);
  m.Add("bytes_out", 7);
  m.Add("compile_cache_hits", 3);
  m.Add("tpu_simulated_nanos_hbm", 1500000000);
  m.Set("live_bytes{cpu:0}", 4096);
  m.Set("sessions_live", 2);
  m.Add("something_new", 5);
  const std::string text = PrometheusText(m.Counters(), m.Histograms());
  for (const char* line : {
           "# TYPE kiln_transfer_bytes_total counter\n",
           "kiln_transfer_bytes_total{direction=\"to_device\"} 100\n",
           "kiln_transfer_bytes_total{direction=\"from_device\"} 7\n",
           "kiln_compile_cache_hits_total 3\n",
           "kiln_tpu_simulated_seconds_total{unit=\"hbm\"} 1.5\n",
           "# TYPE kiln_device_memory_used_bytes gauge\n",
           "kiln_device_memory_used_bytes{device=\"cpu:0\"} 4096\n",
           "# TYPE kiln_sessions gauge\n",
           "kiln_sessions 2\n",
           "# TYPE kiln_something_new untyped\n",
           "kiln_build_info{version=\"",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
  // One HELP and TYPE per family, even with several labelled samples.
  size_t first = text.find("# TYPE kiln_transfer_bytes_total");
  EXPECT_EQ(text.find("# TYPE kiln_transfer_bytes_total", first + 1), std::string::npos);
}

TEST(PrometheusTest, TimersAreCumulativeHistogramsInSeconds) {
  Metrics m;
  m.Record("execute", absl::Microseconds(7));      // <= 1e-5
  m.Record("execute", absl::Milliseconds(3));      // <= 5e-3
  m.Record("execute", absl::Milliseconds(3));
  m.Record("execute", absl::Seconds(4000));        // past the last bound
  const std::string text = PrometheusText(m.Counters(), m.Histograms());
  for (const char* line : {
           "# TYPE kiln_execute_seconds histogram\n",
           "kiln_execute_seconds_bucket{le=\"1e-05\"} 1\n",
           "kiln_execute_seconds_bucket{le=\"0.0025\"} 1\n",
           "kiln_execute_seconds_bucket{le=\"0.005\"} 3\n",
           "kiln_execute_seconds_bucket{le=\"600\"} 3\n",
           "kiln_execute_seconds_bucket{le=\"+Inf\"} 4\n",
           "kiln_execute_seconds_count 4\n",
           "kiln_execute_seconds_sum 4000.006007\n",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace kiln::server
