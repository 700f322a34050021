#include "runtime/host/strided_copy.h"

#include <cstring>

namespace kiln::host {
namespace {

template <typename T>
void InnerCopy(const uint8_t* src, int64_t src_stride, uint8_t* dst,
               int64_t dst_stride, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = s[i * src_stride];
}

}  // namespace

void StridedCopy(const std::vector<int64_t>& dims_in, const uint8_t* src,
                 int64_t src_offset, const std::vector<int64_t>& src_strides_in,
                 uint8_t* dst, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides_in, int elem_size) {
  for (int64_t d : dims_in) {
    if (d == 0) return;
  }
  // Drop size-1 dims and merge dims that are contiguous in both layouts so
  // the inner loop is as long as possible.
  std::vector<int64_t> dims, ss, ds;
  for (size_t i = 0; i < dims_in.size(); ++i) {
    if (dims_in[i] == 1) continue;
    if (!dims.empty() && ss.back() == src_strides_in[i] * dims_in[i] &&
        ds.back() == dst_strides_in[i] * dims_in[i]) {
      dims.back() *= dims_in[i];
      ss.back() = src_strides_in[i];
      ds.back() = dst_strides_in[i];
      continue;
    }
    dims.push_back(dims_in[i]);
    ss.push_back(src_strides_in[i]);
    ds.push_back(dst_strides_in[i]);
  }
  if (dims.empty()) {
    std::memcpy(dst + dst_offset * elem_size, src + src_offset * elem_size,
                elem_size);
    return;
  }
  const int rank = static_cast<int>(dims.size());
  const int64_t inner = dims[rank - 1];
  const int64_t s_in = ss[rank - 1], d_in = ds[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t s_off = src_offset, d_off = dst_offset;
  while (true) {
    const uint8_t* s = src + s_off * elem_size;
    uint8_t* d = dst + d_off * elem_size;
    if (s_in == 1 && d_in == 1) {
      std::memcpy(d, s, inner * elem_size);
    } else {
      switch (elem_size) {
        case 1: InnerCopy<uint8_t>(s, s_in, d, d_in, inner); break;
        case 2: InnerCopy<uint16_t>(s, s_in, d, d_in, inner); break;
        case 4: InnerCopy<uint32_t>(s, s_in, d, d_in, inner); break;
        case 8: InnerCopy<uint64_t>(s, s_in, d, d_in, inner); break;
        default:
          for (int64_t i = 0; i < inner; ++i) {
            std::memcpy(d + i * d_in * elem_size, s + i * s_in * elem_size,
                        elem_size);
          }
      }
    }
    // Odometer over the outer dims.
    int k = rank - 2;
    for (; k >= 0; --k) {
      ++idx[k];
      s_off += ss[k];
      d_off += ds[k];
      if (idx[k] < dims[k]) break;
      s_off -= ss[k] * dims[k];
      d_off -= ds[k] * dims[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

}  // namespace kiln::host
