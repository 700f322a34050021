#include "server/metrics.h"

#include <algorithm>
#include <vector>

namespace kiln::server {

void Metrics::Add(const std::string& counter, int64_t delta) {
  absl::MutexLock lock(&mu_);
  counters_[counter] += delta;
}

void Metrics::Set(const std::string& counter, int64_t value) {
  absl::MutexLock lock(&mu_);
  counters_[counter] = value;
}

int64_t Metrics::Get(const std::string& counter) const {
  absl::MutexLock lock(&mu_);
  auto it = counters_.find(counter);
  return it == counters_.end() ? 0 : it->second;
}

void Metrics::Record(const std::string& timer, absl::Duration d) {
  const double us = absl::ToDoubleMicroseconds(d);
  absl::MutexLock lock(&mu_);
  Timer& t = timers_[timer];
  ++t.count;
  t.total_micros += us;
  t.max_micros = std::max(t.max_micros, us);
  const std::vector<double>& bounds = BucketSeconds();
  if (t.buckets.empty()) t.buckets.assign(bounds.size(), 0);
  const double seconds = us * 1e-6;
  auto bound = std::lower_bound(bounds.begin(), bounds.end(), seconds);
  if (bound != bounds.end()) ++t.buckets[bound - bounds.begin()];
  t.recent.push_back(us);
  if (t.recent.size() > kReservoir) t.recent.pop_front();
}

v1::MetricsResponse Metrics::Snapshot() const {
  v1::MetricsResponse out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, value] : counters_) {
    auto* c = out.add_counters();
    c->set_name(name);
    c->set_value(value);
  }
  for (const auto& [name, t] : timers_) {
    auto* p = out.add_timers();
    p->set_name(name);
    p->set_count(t.count);
    p->set_mean_micros(t.count ? t.total_micros / t.count : 0);
    p->set_max_micros(t.max_micros);
    std::vector<double> sorted(t.recent.begin(), t.recent.end());
    std::sort(sorted.begin(), sorted.end());
    auto pct = [&](double q) {
      if (sorted.empty()) return 0.0;
      size_t i = static_cast<size_t>(q * (sorted.size() - 1) + 0.5);
      return sorted[std::min(i, sorted.size() - 1)];
    };
    p->set_p50_micros(pct(0.5));
    p->set_p90_micros(pct(0.9));
    p->set_p99_micros(pct(0.99));
  }
  return out;
}

const std::vector<double>& Metrics::BucketSeconds() {
  // From 10 us (a cached scalar step) to 10 minutes (a large compile).
  static const std::vector<double> bounds = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                             2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1,  0.25,
                                             0.5,    1,    2.5,  5,    10,   30,    60,
                                             120,    300,  600};
  return bounds;
}

std::map<std::string, int64_t> Metrics::Counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::map<std::string, Metrics::Histogram> Metrics::Histograms() const {
  std::map<std::string, Histogram> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, t] : timers_) {
    Histogram& h = out[name];
    h.count = t.count;
    h.sum_seconds = t.total_micros * 1e-6;
    int64_t running = 0;
    for (size_t i = 0; i < BucketSeconds().size(); ++i) {
      running += i < t.buckets.size() ? t.buckets[i] : 0;
      h.cumulative.push_back(running);
    }
  }
  return out;
}

}  // namespace kiln::server
