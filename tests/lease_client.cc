// A client that uploads a buffer and then stays alive, so that a test can
// watch it keep its lease, kill it, and watch the server free its memory
// after the lease. It prints "ready SESSION", then "alive N" after each of
// its calls (one every 200 ms), each of which renews the lease.
//   lease_client ADDRESS BYTES
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/flags.h"
#include "client/client.h"

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: lease_client ADDRESS BYTES\nA test helper: opens a session, holds BYTES on the server, reports each call that keeps its lease, and waits to be killed.");
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
  for (int i = 1; i <= 1500; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto info = (*client)->MemoryInfo("cpu:0");
    if (!info.ok()) {
      std::printf("lost %s\n", std::string(info.status().message()).c_str());
      std::fflush(stdout);
      return 1;
    }
    std::printf("alive %d\n", i);
    std::fflush(stdout);
  }
  return 0;
}
