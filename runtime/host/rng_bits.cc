#include "runtime/host/rng_bits.h"

#include <cstring>

#include "runtime/host/philox.h"

namespace kiln::host {
namespace {

uint32_t RotateLeft(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

// Stores the low `width` bytes of `value` as element `i`.
void Store(uint8_t* out, int64_t i, int width, uint64_t value) {
  switch (width) {
    case 1: out[i] = static_cast<uint8_t>(value); break;
    case 2: reinterpret_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(value); break;
    case 4: reinterpret_cast<uint32_t*>(out)[i] = static_cast<uint32_t>(value); break;
    default: reinterpret_cast<uint64_t*>(out)[i] = value; break;
  }
}

std::array<uint32_t, 2> Halves(uint64_t v) {
  return {static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32)};
}

}  // namespace

std::array<uint32_t, 2> ThreeFry2x32(std::array<uint32_t, 2> x, std::array<uint32_t, 2> key) {
  constexpr int kRotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  const uint32_t ks[3] = {key[0], key[1], 0x1BD11BDAu ^ key[0] ^ key[1]};
  x[0] += ks[0];
  x[1] += ks[1];
  for (int group = 0; group < 5; ++group) {
    for (int r : kRotations[group % 2]) {
      x[0] += x[1];
      x[1] = RotateLeft(x[1], r) ^ x[0];
    }
    // Key injection after every four rounds.
    x[0] += ks[(group + 1) % 3];
    x[1] += ks[(group + 2) % 3] + static_cast<uint32_t>(group + 1);
  }
  return x;
}

void PhiloxBits(uint64_t* state, int64_t state_size, int64_t count, int width, uint8_t* out) {
  const std::array<uint32_t, 2> key = Halves(state[0]);
  // A u64[2] state is read reversed: counter low state[1], high state[0].
  const uint64_t low = state[1];
  const uint64_t high = state_size > 2 ? state[2] : state[0];
  const bool wide = width == 8;
  const int64_t per_block = wide ? 2 : 4;
  const int64_t blocks = (count + per_block - 1) / per_block;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint64_t lo = low + static_cast<uint64_t>(b);
    const uint64_t hi = high + (lo < low ? 1 : 0);
    const std::array<uint32_t, 2> l = Halves(lo), h = Halves(hi);
    const std::array<uint32_t, 4> w = Philox4x32({l[0], l[1], h[0], h[1]}, key);
    for (int64_t k = 0; k < per_block && b * per_block + k < count; ++k) {
      const uint64_t value = wide ? (uint64_t{w[2 * k]} | uint64_t{w[2 * k + 1]} << 32) : w[k];
      Store(out, b * per_block + k, width, value);
    }
  }
  const uint64_t next = low + static_cast<uint64_t>(blocks);
  state[1] = next;
  if (state_size > 2 && next < low) ++state[2];
}

void ThreeFryBits(uint64_t* state, const std::vector<int64_t>& dims, int width, uint8_t* out) {
  const std::array<uint32_t, 2> key = Halves(state[0]);
  const uint64_t counter = state[1];
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (width == 8) {
    for (int64_t i = 0; i < count; ++i) {
      const std::array<uint32_t, 2> w =
          ThreeFry2x32(Halves(counter + static_cast<uint64_t>(i)), key);
      Store(out, i, 8, uint64_t{w[0]} | uint64_t{w[1]} << 32);
    }
    state[1] = counter + static_cast<uint64_t>(count);
    return;
  }
  // 32 bits and narrower: one dimension is halved, each counter gives an
  // adjacent pair along it. A scalar is a pair of which the first is kept.
  int split = -1;
  for (size_t d = 0; d < dims.size() && split < 0; ++d) {
    if (dims[d] % 2 == 0) split = static_cast<int>(d);
  }
  if (split < 0) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (split < 0 || dims[d] > dims[split]) split = static_cast<int>(d);
    }
  }
  const int64_t along = dims.empty() ? 1 : dims[split];
  const int64_t halved = (along + 1) / 2;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < split; ++d) outer *= dims[d];
  for (size_t d = split + 1; d < dims.size(); ++d) inner *= dims[d];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t h = 0; h < halved; ++h) {
      for (int64_t i = 0; i < inner; ++i) {
        const uint64_t index = static_cast<uint64_t>((o * halved + h) * inner + i);
        const std::array<uint32_t, 2> w = ThreeFry2x32(Halves(counter + index), key);
        for (int j = 0; j < 2 && 2 * h + j < along; ++j) {
          Store(out, (o * along + 2 * h + j) * inner + i, width, w[j]);
        }
      }
    }
  }
  state[1] = counter + static_cast<uint64_t>(outer * halved * inner);
}

}  // namespace kiln::host
