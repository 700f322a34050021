// Fuzzes the wire form of modules: arbitrary bytes as a ModuleProto, its
// conversion and verification, as the server meets them in a Compile
// request. A module that verifies must print and fingerprint. Any crash or
// sanitizer report is a bug.
#include <cstdint>

#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"
#include "kiln/v1/hlo.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::v1::ModuleProto proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto module = kiln::ir::ModuleFromProto(proto);
  if (!module.ok() || !kiln::ir::Verify(**module).ok()) return 0;
  (void)kiln::ir::PrintModule(**module);
  (void)kiln::ir::Fingerprint(**module);
  return 0;
}
