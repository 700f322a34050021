#include "server/metrics.h"

#include <algorithm>
#include <vector>

namespace kiln::server {

namespace {

// The entry named `name`, made when missing (no string built to find one).
template <typename Map>
typename Map::mapped_type& Entry(Map& map, absl::string_view name) {
  auto it = map.find(name);
  if (it == map.end()) it = map.emplace(std::string(name), typename Map::mapped_type()).first;
  return it->second;
}

// The map's names in order.
template <typename Map>
std::vector<const typename Map::value_type*> Sorted(const Map& map) {
  std::vector<const typename Map::value_type*> out;
  out.reserve(map.size());
  for (const auto& entry : map) out.push_back(&entry);
  std::sort(out.begin(), out.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  return out;
}

}  // namespace

void Metrics::Add(absl::string_view counter, int64_t delta) {
  absl::MutexLock lock(&mu_);
  Entry(counters_, counter) += delta;
}

void Metrics::Set(absl::string_view counter, int64_t value) {
  absl::MutexLock lock(&mu_);
  Entry(counters_, counter) = value;
}

int64_t Metrics::Get(absl::string_view counter) const {
  absl::MutexLock lock(&mu_);
  auto it = counters_.find(counter);
  return it == counters_.end() ? 0 : it->second;
}

void Metrics::Record(absl::string_view timer, absl::Duration d) {
  const double us = absl::ToDoubleMicroseconds(d);
  absl::MutexLock lock(&mu_);
  Timer& t = Entry(timers_, timer);
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
  for (const auto* counter : Sorted(counters_)) {
    auto* c = out.add_counters();
    c->set_name(counter->first);
    c->set_value(counter->second);
  }
  for (const auto* timer : Sorted(timers_)) {
    const std::string& name = timer->first;
    const Timer& t = timer->second;
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
  return std::map<std::string, int64_t>(counters_.begin(), counters_.end());
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
