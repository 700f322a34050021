// The server's metrics in Prometheus' text exposition format (version
// 0.0.4): conventional names with units (`kiln_execute_seconds`,
// `kiln_transfer_bytes_total{direction}`, ...), timers as histograms.
// docs/operations.md lists every family.
#ifndef KILN_SERVER_PROMETHEUS_H_
#define KILN_SERVER_PROMETHEUS_H_

#include <cstdint>
#include <map>
#include <string>

#include "server/metrics.h"

namespace kiln::server {

// `counters` and `histograms` as Metrics keeps them (a name may end in
// "{device}", which becomes a `device` label). A name the table does not
// know is kept as an untyped `kiln_<name>` so that nothing disappears.
std::string PrometheusText(const std::map<std::string, int64_t>& counters,
                           const std::map<std::string, Metrics::Histogram>& histograms);

}  // namespace kiln::server

#endif  // KILN_SERVER_PROMETHEUS_H_
