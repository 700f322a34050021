// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011): a counter-based generator, 128-bit counter and 64-bit key
// in, four 32-bit words out. rng-bit-generator's rng_default draws from it.
#ifndef KILN_RUNTIME_HOST_PHILOX_H_
#define KILN_RUNTIME_HOST_PHILOX_H_

#include <array>
#include <cstdint>

namespace kiln::host {

inline std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kM0} * counter[0];
    const uint64_t p1 = uint64_t{kM1} * counter[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += kW0;
    key[1] += kW1;
  }
  return counter;
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_PHILOX_H_
