#include "base/host_identity.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln {

const std::string& HostId() {
  static const std::string* const id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    if (in) std::getline(in, line);
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (stripped.empty()) return new std::string();
    const std::string boot = absl::StrCat("kiln-host:", stripped);
    // FNV-1a: stable across processes and builds (absl::Hash is seeded
    // per process).
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : boot) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    return new std::string(hex);
  }();
  return *id;
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(getpid(), sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {
    const int n = static_cast<int>(std::thread::hardware_concurrency());
    for (int cpu = 0; cpu < std::max(1, n); ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace kiln
