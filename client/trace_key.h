// The structure of a lazy trace as an exact byte string: what Lower (lower.h)
// would turn into a module, computed in one walk without building any IR.
// Two traces with equal keys lower to the same module, with their entry
// parameters in the same order, so a context that has compiled a key runs
// the program again without lowering, printing or fingerprinting (the cheap
// step).
#ifndef KILN_CLIENT_TRACE_KEY_H_
#define KILN_CLIENT_TRACE_KEY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/tensor.h"

namespace kiln::client {

struct TraceKey {
  std::string bytes;
  // The realized nodes the program reads, in the order Lower gives them
  // entry parameters.
  NodeList params;
};

// The key of the program whose entry returns `outputs` in order, after
// `prefix` (what else tells programs apart, such as the device). Fails as
// Lower would on a node with an error.
absl::StatusOr<TraceKey> KeyOfTrace(NodeSpan outputs, absl::string_view prefix = "");
// The same, written over `key`: a caller that keys trace after trace keeps
// one TraceKey and its bytes' capacity.
absl::Status KeyOfTrace(NodeSpan outputs, absl::string_view prefix, TraceKey& key);

}  // namespace kiln::client

#endif  // KILN_CLIENT_TRACE_KEY_H_
