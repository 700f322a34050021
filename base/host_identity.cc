#include "base/host_identity.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"

namespace kiln {

const std::string& HostBootId() {
  static const std::string* const id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    if (in) std::getline(in, line);
    return new std::string(absl::StripAsciiWhitespace(line));
  }();
  return *id;
}

int AllowedCoreCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(getpid(), sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace kiln
