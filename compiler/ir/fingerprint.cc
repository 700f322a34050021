#include "compiler/ir/fingerprint.h"

#include <cstdio>

#include "compiler/ir/hlo_printer.h"

namespace kiln::ir {
namespace {

// splitmix64's finalizer: spreads every input bit over the output.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::string StableHash128(absl::string_view data) {
  uint64_t a = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  uint64_t b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : data) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b + c + 1) * 0x9e3779b97f4a7c15ULL;
    b ^= b >> 29;
  }
  a = Mix(a ^ data.size());
  b = Mix(b + a);
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx",
                static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::string Fingerprint(const Module& module) {
  PrintOptions options;
  options.canonical_names = true;
  return StableHash128(PrintModule(module, options));
}

}  // namespace kiln::ir
