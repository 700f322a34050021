// Conversion between the IR and its wire form (proto/kiln/v1/hlo.proto).
#ifndef KILN_COMPILER_IR_PROTO_CONVERT_H_
#define KILN_COMPILER_IR_PROTO_CONVERT_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "kiln/v1/hlo.pb.h"

namespace kiln::ir {

void ShapeToProto(const Shape& shape, v1::ShapeProto* proto);
absl::StatusOr<Shape> ShapeFromProto(const v1::ShapeProto& proto);

void LiteralToProto(const Literal& literal, v1::LiteralProto* proto);
// Checks the data size matches the shape.
absl::StatusOr<Literal> LiteralFromProto(const v1::LiteralProto& proto);

// A value that travels on its own (a feed value) is an array, or a tuple
// of arrays (one level: an infeed of (images, labels)), of at most
// `max_bytes` bytes: INVALID_ARGUMENT / RESOURCE_EXHAUSTED otherwise.
absl::Status CheckFeedValue(const Shape& shape, int64_t max_bytes);

// The bytes such a value travels as: an array's own, or a tuple's elements'
// one after another (copied into `storage`, which the result may refer to).
const std::vector<uint8_t>& FeedValueBytes(const Literal& value, std::vector<uint8_t>* storage);

// Rebuilds a value sent in chunks (an array, or a tuple of arrays as
// FeedValueBytes lays it out): Start with the announced shape and size,
// Append the data pieces, Take once complete(). Every size is checked
// before memory is allocated.
class ChunkedValue {
 public:
  // `max_bytes` bounds what a peer may announce.
  absl::Status Start(const v1::ShapeProto& shape, int64_t total_bytes, int64_t max_bytes);
  absl::Status Append(absl::string_view data);
  bool started() const { return shape_.has_value(); }
  bool complete() const { return shape_.has_value() && received_ == total_; }
  Literal Take();

 private:
  // Memory grows with the data that arrives, never with what a header
  // announces: a peer that declares a large value and sends nothing holds
  // nothing.
  std::optional<Shape> shape_;
  // The bytes of each array of the value (one for an array, one per
  // element of a tuple), filled in order: Take moves them, copying nothing.
  std::vector<std::vector<uint8_t>> parts_;
  size_t part_ = 0;  // the part being filled
  int64_t total_ = 0, received_ = 0;
};

v1::ModuleProto ModuleToProto(const Module& module);
// Rebuilds the module; every id reference is checked, so a malformed message
// is an InvalidArgument, never a crash. The result still needs Verify().
absl::StatusOr<std::unique_ptr<Module>> ModuleFromProto(
    const v1::ModuleProto& proto);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_PROTO_CONVERT_H_
