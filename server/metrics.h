// Counters and timers with percentiles, for the server's metrics RPC.
#ifndef KILN_SERVER_METRICS_H_
#define KILN_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kiln/v1/service.pb.h"

namespace kiln::server {

// Thread-safe. Counters and timers are created on first use and live as long
// as the registry.
class Metrics {
 public:
  void Add(absl::string_view counter, int64_t delta = 1);
  int64_t Get(absl::string_view counter) const;
  void Record(absl::string_view timer, absl::Duration d);
  // Sets a gauge-like counter to an absolute value.
  void Set(absl::string_view counter, int64_t value);
  v1::MetricsResponse Snapshot() const;

  // A timer as a cumulative histogram (Prometheus' form): how many samples
  // fell at or below each bound of kBucketSeconds, and their sum.
  struct Histogram {
    int64_t count = 0;
    double sum_seconds = 0;
    std::vector<int64_t> cumulative;  // one per bound of kBucketSeconds
  };
  static const std::vector<double>& BucketSeconds();
  std::map<std::string, int64_t> Counters() const;
  std::map<std::string, Histogram> Histograms() const;

  // Keeps the most recent samples of each timer for its percentiles.
  static constexpr size_t kReservoir = 4096;

 private:
  struct Timer {
    int64_t count = 0;
    double total_micros = 0;
    double max_micros = 0;
    std::deque<double> recent;
    std::vector<int64_t> buckets;  // per bound of BucketSeconds(), not cumulative
  };
  mutable absl::Mutex mu_;
  // Hashed: every execution adds to a few (an eager op's is microseconds).
  // Snapshots sort them by name.
  absl::flat_hash_map<std::string, int64_t> counters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Timer> timers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server

#endif  // KILN_SERVER_METRICS_H_
