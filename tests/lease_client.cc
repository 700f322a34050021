// A client that uploads a buffer and then hangs, so that a test can kill it
// and watch the server free its memory after the lease.
//   lease_client ADDRESS BYTES
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/flags.h"
#include "client/client.h"

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: lease_client ADDRESS BYTES\nA test helper: opens a session, holds BYTES on the server and waits to be killed.");
  if (argc != 3) {
    std::fprintf(stderr, "usage: lease_client ADDRESS BYTES\n");
    return 2;
  }
  auto client = kiln::client::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  const int64_t bytes = std::atoll(argv[2]);
  kiln::ir::Literal value(kiln::ir::Shape(kiln::ir::ElementType::kU8, {bytes}));
  auto buffer = (*client)->TransferToDevice(value, "cpu:0");
  if (!buffer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(buffer.status().message()).c_str());
    return 1;
  }
  std::printf("ready %s\n", (*client)->session_id().c_str());
  std::fflush(stdout);
  // Bounded: the test kills us long before this.
  std::this_thread::sleep_for(std::chrono::seconds(300));
  return 0;
}
