// Fuzzes the HLO text parser and verifier with arbitrary bytes. A module
// that verifies must print, parse back and verify to the same fingerprint,
// and survive the trip through its wire form. Any crash, sanitizer report
// or broken round trip is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"

namespace {

void Fail(const char* what, const std::string& text) {
  std::fprintf(stderr, "%s\n%s\n", what, text.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto module = kiln::ir::ParseModule(text);
  if (!module.ok() || !kiln::ir::Verify(**module).ok()) return 0;
  const std::string printed = kiln::ir::PrintModule(**module);
  auto again = kiln::ir::ParseModule(printed);
  if (!again.ok()) Fail("a verified module's text does not parse", printed);
  if (!kiln::ir::Verify(**again).ok()) Fail("a verified module's text does not verify", printed);
  if (kiln::ir::Fingerprint(**again) != kiln::ir::Fingerprint(**module)) {
    Fail("printing and parsing changed the fingerprint", printed);
  }
  auto from_proto = kiln::ir::ModuleFromProto(kiln::ir::ModuleToProto(**module));
  if (!from_proto.ok()) Fail("a verified module does not come back from its proto", printed);
  if (!kiln::ir::Verify(**from_proto).ok()) Fail("the proto round trip does not verify", printed);
  if (kiln::ir::Fingerprint(**from_proto) != kiln::ir::Fingerprint(**module)) {
    Fail("the proto round trip changed the fingerprint", printed);
  }
  return 0;
}
