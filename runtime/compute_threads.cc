#include "runtime/compute_threads.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace kiln::runtime {
namespace {

int Cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::atomic<int> g_threads{0};

}  // namespace

void SetComputeThreads(int threads) { g_threads = threads > 0 ? threads : Cores(); }

int ComputeThreads() {
  const int threads = g_threads.load();
  return threads > 0 ? threads : Cores();
}

}  // namespace kiln::runtime
