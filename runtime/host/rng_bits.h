// rng-bit-generator's bit streams, as XLA's RngBitGeneratorExpander defines
// them, so that a module gives the bits it gives under XLA:
//   - Philox (rng_philox, and rng_default: XLA's CPU default): key
//     state[0]; a 128-bit counter, state[1] low and state[2] high (a u64[2]
//     state's counter is state[1] low and state[0] high). Counter c + b
//     gives the four words of block b; 32-bit results take the words in
//     order, 64-bit ones pair them (w0 | w1 << 32, w2 | w3 << 32). The new
//     state's counter is past every block used (its high word is not kept
//     for a u64[2] state).
//   - ThreeFry (rng_three_fry), state u64[2]: key state[0], counter
//     state[1]. 32-bit results halve one dimension (the first of even size,
//     else the largest): counter c + i, for element i of the halved shape,
//     gives the two words that land at positions 2h and 2h + 1 of that
//     dimension. 64-bit results take counter c + i for element i and pair
//     the words. The counter moves by the elements generated.
// Results of 8 and 16 bits are 32-bit results truncated, as XLA's are.
#ifndef KILN_RUNTIME_HOST_RNG_BITS_H_
#define KILN_RUNTIME_HOST_RNG_BITS_H_

#include <array>
#include <cstdint>
#include <vector>

namespace kiln::host {

// Threefry-2x32 with 20 rounds.
std::array<uint32_t, 2> ThreeFry2x32(std::array<uint32_t, 2> counter,
                                     std::array<uint32_t, 2> key);

// Fills `out` with `count` elements of `width` bytes (1, 2, 4 or 8) and
// advances `state` (`state_size` u64s: 2 or 3) in place.
void PhiloxBits(uint64_t* state, int64_t state_size, int64_t count, int width, uint8_t* out);
// Fills `out`, an array of `dims` with elements of `width` bytes, and
// advances `state` (u64[2]) in place.
void ThreeFryBits(uint64_t* state, const std::vector<int64_t>& dims, int width, uint8_t* out);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_RNG_BITS_H_
