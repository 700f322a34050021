// Moving a large value in pieces: transfers, feeds and device copies all
// split their bytes the same way.
#ifndef KILN_BASE_CHUNKS_H_
#define KILN_BASE_CHUNKS_H_

#include <algorithm>
#include <cstdint>

namespace kiln {

// Splits `total` bytes into consecutive pieces of at most `chunk` bytes and
// calls `send(offset, length)` for each; an empty value is one empty piece.
// Stops when `send` returns false; returns whether every piece went.
template <typename Send>
bool ForEachChunk(int64_t total, int64_t chunk, Send&& send) {
  int64_t sent = 0;
  do {
    const int64_t n = std::min(chunk, total - sent);
    if (!send(sent, n)) return false;
    sent += n;
  } while (sent < total);
  return true;
}

}  // namespace kiln

#endif  // KILN_BASE_CHUNKS_H_
