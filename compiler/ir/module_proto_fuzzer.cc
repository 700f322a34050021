// Fuzzes the wire form of modules: arbitrary bytes as a ModuleProto, its
// conversion and verification, as the server meets them in a Compile
// request. A module that verifies must print and fingerprint. Any crash or
// sanitizer report is a bug.
//
// Its seeds are real modules in their wire form: with
// KILN_PROTO_SEEDS=SRC_DIR:OUT_DIR in the environment, every SRC_DIR/*.hlo
// that parses is written to OUT_DIR as the ModuleProto a client would send,
// before fuzzing starts from OUT_DIR (deploy/fuzz.sh does this).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"
#include "kiln/v1/hlo.pb.h"

namespace {

void WriteSeeds(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "KILN_PROTO_SEEDS must be SRC_DIR:OUT_DIR, got '%s'\n", spec.c_str());
    std::exit(2);
  }
  namespace fs = std::filesystem;
  const fs::path src = spec.substr(0, colon), out = spec.substr(colon + 1);
  std::error_code error;
  fs::create_directories(out, error);
  int written = 0, skipped = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(src, error)) {
    if (entry.path().extension() != ".hlo") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto module = kiln::ir::ParseModule(text.str());
    if (!module.ok()) {
      ++skipped;
      continue;
    }
    std::ofstream pb(out / entry.path().filename().replace_extension(".pb"), std::ios::binary);
    pb << kiln::ir::ModuleToProto(**module).SerializeAsString();
    ++written;
  }
  if (error) {
    std::fprintf(stderr, "KILN_PROTO_SEEDS: %s\n", error.message().c_str());
    std::exit(2);
  }
  std::fprintf(stderr, "module_proto_fuzzer: %d seeds written to %s (%d modules did not parse)\n",
               written, out.c_str(), skipped);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* spec = std::getenv("KILN_PROTO_SEEDS");
  if (spec != nullptr && *spec != 0) WriteSeeds(spec);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::v1::ModuleProto proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto module = kiln::ir::ModuleFromProto(proto);
  if (!module.ok() || !kiln::ir::Verify(**module).ok()) return 0;
  (void)kiln::ir::PrintModule(**module);
  (void)kiln::ir::Fingerprint(**module);
  return 0;
}
