// Conversion between the IR and its wire form (proto/kiln/v1/hlo.proto).
#ifndef KILN_COMPILER_IR_PROTO_CONVERT_H_
#define KILN_COMPILER_IR_PROTO_CONVERT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "kiln/v1/hlo.pb.h"

namespace kiln::ir {

void ShapeToProto(const Shape& shape, v1::ShapeProto* proto);
absl::StatusOr<Shape> ShapeFromProto(const v1::ShapeProto& proto);

void LiteralToProto(const Literal& literal, v1::LiteralProto* proto);
// Checks the data size matches the shape.
absl::StatusOr<Literal> LiteralFromProto(const v1::LiteralProto& proto);

v1::ModuleProto ModuleToProto(const Module& module);
// Rebuilds the module; every id reference is checked, so a malformed message
// is an InvalidArgument, never a crash. The result still needs Verify().
absl::StatusOr<std::unique_ptr<Module>> ModuleFromProto(
    const v1::ModuleProto& proto);

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_PROTO_CONVERT_H_
