// Moving boxes of elements between strided layouts: the one primitive behind
// broadcast, transpose, slice, reverse, pad, concatenate and the dynamic
// slices. Works on bytes, so it serves every element type.
#ifndef KILN_RUNTIME_HOST_STRIDED_COPY_H_
#define KILN_RUNTIME_HOST_STRIDED_COPY_H_

#include <cstdint>
#include <vector>

namespace kiln::host {

// For every index vector i in the box `dims`:
//   dst[dst_offset + sum(i * dst_strides)] = src[src_offset + sum(i * src_strides)]
// Offsets and strides count elements of `elem_size` bytes; strides may be 0
// (broadcast) or negative (reverse).
void StridedCopy(const std::vector<int64_t>& dims, const uint8_t* src,
                 int64_t src_offset, const std::vector<int64_t>& src_strides,
                 uint8_t* dst, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides, int elem_size);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_STRIDED_COPY_H_
