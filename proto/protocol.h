// Rules of the wire contract (kiln/v1/service.proto, docs/protocol.md)
// that the server and the client library both apply.
#ifndef KILN_PROTO_PROTOCOL_H_
#define KILN_PROTO_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "kiln/v1/service.pb.h"

namespace kiln::protocol {

// The handle of output `index` (tuples flattened) of sequenced execution
// `sequence` (protocol 6), known before the execution runs.
inline std::string SequencedHandle(uint64_t sequence, int index) {
  return absl::StrCat("r-", sequence, ".", index);
}

// The number of the sequenced execution whose output `handle` names
// ("r-<sequence>.<index>"), if it names one.
inline std::optional<uint64_t> SequenceOf(absl::string_view handle) {
  if (!absl::ConsumePrefix(&handle, "r-")) return std::nullopt;
  const size_t dot = handle.find('.');
  uint64_t sequence = 0, index = 0;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(handle.substr(0, dot), &sequence) ||
      !absl::SimpleAtoi(handle.substr(dot + 1), &index)) {
    return std::nullopt;
  }
  return sequence;
}

// The handles `req` donates: at each donated index, on the one device and
// on every replica; inline values (no handle) are left out.
inline std::vector<std::string> DonatedHandles(const v1::ExecuteRequest& req) {
  std::vector<std::string> donated;
  auto add = [&](const google::protobuf::RepeatedPtrField<std::string>& handles) {
    for (int index : req.donated_arguments()) {
      if (index >= 0 && index < handles.size() && !handles[index].empty()) {
        donated.push_back(handles[index]);
      }
    }
  };
  add(req.argument_handles());
  for (const v1::ReplicaArguments& replica : req.replicas()) add(replica.argument_handles());
  return donated;
}

}  // namespace kiln::protocol

#endif  // KILN_PROTO_PROTOCOL_H_
