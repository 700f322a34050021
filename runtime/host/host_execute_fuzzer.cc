// Fuzzes compiling and running modules on the host interpreter, as a
// server runs what a client sends: arbitrary HLO text that verifies is
// compiled and executed once on zero inputs, on a device of 64 MiB, with
// empty feeds and a deadline after which the execution is cancelled. Errors
// are fine; a crash, a sanitizer report or a hang is a bug.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_device.h"

namespace {

// Inputs larger than this are not built (the device would refuse them).
constexpr int64_t kMaxInputBytes = int64_t{16} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto module = kiln::ir::ParseModule(text);
  if (!module.ok() || !kiln::ir::Verify(**module).ok()) return 0;
  auto executable = kiln::host::CompileProgram("cpu", **module, {});
  if (!executable.ok()) return 0;
  kiln::host::HostDevice device("cpu", 0, int64_t{64} << 20, 4);
  std::vector<kiln::runtime::BufferPtr> args;
  for (const kiln::ir::Shape& shape : (*executable)->parameter_shapes()) {
    if (!shape.IsArray() || shape.ByteSize() > kMaxInputBytes) return 0;
    auto buffer = device.TransferToDevice(kiln::ir::Literal(shape));
    if (!buffer.ok()) return 0;
    args.push_back(*std::move(buffer));
  }
  kiln::runtime::ExecuteOptions options;
  options.infeed_timeout = absl::Milliseconds(5);
  options.outfeed_timeout = absl::Milliseconds(5);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
  options.cancelled = [deadline] { return absl::Now() > deadline; };
  (void)(*executable)->Execute(device, args, options);
  return 0;
}
