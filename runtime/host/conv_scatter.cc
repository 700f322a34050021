// A convolution of our own for few input or output channels, computed from
// the input side: each input pixel adds its contribution to the output
// pixels its value reaches. Convolutions of stride 1 over NHWC images with
// few channels (a network's first layer on grey images, the data gradient
// of a layer with few input channels, which reads a gradient padded by the
// kernel's reach) spend most of a gather formulation's work on padding or
// on vector lanes no channel fills; this one skips the padding and fills
// its vectors with (kernel column, output channel) pairs.
//
// For input pixel (u, v) of image n and kernel row i, the outputs reached
// are the KW pixels of output row u - i + pad_top from column v - KW + 1 +
// pad_left on, which lie next to each other in NHWC: KW * Cout contiguous
// floats. Their increments are sum_c in[n, u, v, c] * P[i, c, :], where
// P[i, c, (KW - 1 - j) * Cout + o] = W[i, j, c, o]. The sums collect in a
// per-thread image with a margin of KH - 1 rows and KW - 1 columns around
// it, so no pixel near an edge needs a bounds check, and the outputs are
// copied from it.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "runtime/host/cancel.h"
#include "runtime/host/conv_kernels.h"
#include "runtime/host/threads.h"

namespace kiln::host {
namespace {

constexpr int kLanes = 16;
// Channels looked at for zeros at a time.
constexpr int64_t kChannelChunk = 64;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

__attribute__((always_inline)) inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
__attribute__((always_inline)) inline void Store(float* p, Vec v) {
  std::memcpy(p, &v, sizeof(v));
}

typedef int32_t Mask __attribute__((vector_size(kLanes * sizeof(int32_t))));

__attribute__((always_inline)) inline Mask LoadMask(const int32_t* p) {
  Mask m;
  std::memcpy(&m, p, sizeof(m));
  return m;
}

// Adds the contributions of P neighbouring input pixels (`pixel`, then
// `pixel + channels` ...) to N vectors of outputs each: for pixel p,
// out + p * out_step + offsets[r] += sum_c pixel_p[c] * weights[c * stride
// + r * kLanes], in the lanes that masks[r] selects (a kernel row's last
// vector reaches past its outputs, and a pixel's infinity times a padding
// zero would be NaN there). The pixels share each weight vector loaded.
template <int N, int P>
__attribute__((always_inline)) inline void AddPixels(
    const float* pixel, int64_t channels, const float* weights, int64_t stride,
    float* out, int64_t out_step, const int64_t* offsets, const int32_t* masks,
    bool skip_zeros) {
  Vec acc[P][N];
  for (int p = 0; p < P; ++p) {
    for (int r = 0; r < N; ++r) acc[p][r] = Vec{};
  }
  // Channels that are zero in every pixel add nothing (the kernel is
  // finite): they are left out, found without a branch per channel. (A
  // gradient behind ReLU and max pooling is mostly zeros.)
  int32_t live[kChannelChunk];
  int64_t total = 0;
  for (int64_t c0 = 0; c0 < channels; c0 += kChannelChunk) {
    const int64_t chunk = std::min<int64_t>(kChannelChunk, channels - c0);
    int64_t count = 0;
    for (int64_t c = c0; c < c0 + chunk; ++c) {
      bool nonzero = !skip_zeros;
      for (int p = 0; p < P; ++p) nonzero |= pixel[p * channels + c] != 0.0f;
      live[count] = static_cast<int32_t>(c);
      count += nonzero;
    }
    total += count;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t c = live[k];
      Vec g[P];
      for (int p = 0; p < P; ++p) g[p] = Vec{} + pixel[p * channels + c];
      const float* w = weights + c * stride;
      Vec wr[N];
      for (int r = 0; r < N; ++r) wr[r] = Load(w + r * kLanes);
      for (int p = 0; p < P; ++p) {
        for (int r = 0; r < N; ++r) acc[p][r] += g[p] * wr[r];
      }
    }
  }
  if (total == 0) return;
  // Pixel by pixel: their outputs overlap.
  for (int p = 0; p < P; ++p) {
    for (int r = 0; r < N; ++r) {
      float* o = out + p * out_step + offsets[r];
      const Vec old = Load(o);
      Store(o, LoadMask(masks + r * kLanes) != 0 ? old + acc[p][r] : old);
    }
  }
}

// Vectors of a pixel handled at once: enough independent sums to fill the
// multiply-add units, few enough (for two pixels) to stay in registers.
constexpr int kBlock = 12;

struct Geometry {
  int64_t batch, h, w, in_c, kh, kw, out_c, oh, ow, pad_top, pad_left;
  int64_t row_vectors;  // vectors per kernel row: KW * Cout rounded up
  int64_t margin_w;     // width of the image with margins: W + KW - 1
  int64_t margin_h;     // its height: H + KH - 1
};

// Every input pixel of one image into `acc` (the image with margins,
// zeroed, with a vector's slack at its end).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void ScatterImage(const Geometry& g, const float* in, const float* packed,
                  const int64_t* offsets, const int32_t* masks, bool skip, float* acc) {
  const int64_t vectors = g.kh * g.row_vectors;
  const int64_t stride = vectors * kLanes;
  for (int64_t u = 0; u < g.h; ++u) {
    for (int64_t v = 0; v < g.w; v += 2) {
      const float* pixel = in + (u * g.w + v) * g.in_c;
      float* out = acc + (u * g.margin_w + v) * g.out_c;
      const bool pair = v + 1 < g.w;
      for (int64_t r0 = 0; r0 < vectors; r0 += kBlock) {
        const float* w = packed + r0 * kLanes;
        const int64_t* off = offsets + r0;
        const int32_t* mask = masks + r0 * kLanes;
        // clang-format off
        switch (std::min<int64_t>(kBlock, vectors - r0)) {
#define KILN_ADD_PIXELS(n)                                                   \
  case n:                                                                    \
    if (pair) {                                                              \
      AddPixels<n, 2>(pixel, g.in_c, w, stride, out, g.out_c, off, mask, skip); \
    } else {                                                                 \
      AddPixels<n, 1>(pixel, g.in_c, w, stride, out, g.out_c, off, mask, skip); \
    }                                                                        \
    break;
          KILN_ADD_PIXELS(1) KILN_ADD_PIXELS(2) KILN_ADD_PIXELS(3) KILN_ADD_PIXELS(4)
          KILN_ADD_PIXELS(5) KILN_ADD_PIXELS(6) KILN_ADD_PIXELS(7) KILN_ADD_PIXELS(8)
          KILN_ADD_PIXELS(9) KILN_ADD_PIXELS(10) KILN_ADD_PIXELS(11) KILN_ADD_PIXELS(12)
#undef KILN_ADD_PIXELS
        }
        // clang-format on
      }
    }
  }
}

// The kernel as the scatter reads it: for each input channel c, the KH rows'
// vectors, P[c][i][(KW - 1 - j) * Cout + o] = W[i, j, c, o], each row zero-
// padded to whole vectors.
void PackWeights(const Geometry& g, const float* w, const int64_t w_strides[4],
                 std::vector<float>& packed) {
  const int64_t row = g.row_vectors * kLanes;
  packed.assign(g.in_c * g.kh * row, 0.0f);
  for (int64_t c = 0; c < g.in_c; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      float* dst = packed.data() + (c * g.kh + i) * row;
      for (int64_t j = 0; j < g.kw; ++j) {
        for (int64_t o = 0; o < g.out_c; ++o) {
          dst[(g.kw - 1 - j) * g.out_c + o] =
              w[i * w_strides[0] + j * w_strides[1] + c * w_strides[2] +
                o * w_strides[3]];
        }
      }
    }
  }
}

// Output row y of image n from the image with margins: output pixel (y, x)
// is margin pixel (y + KH - 1 - pad_top, x + KW - 1 - pad_left), zero where
// that lies outside (padding beyond the kernel's reach).
void CopyOut(const Geometry& g, const float* acc, float* out) {
  const int64_t dy = g.kh - 1 - g.pad_top, dx = g.kw - 1 - g.pad_left;
  for (int64_t y = 0; y < g.oh; ++y) {
    float* row = out + y * g.ow * g.out_c;
    const int64_t my = y + dy;
    if (my < 0 || my >= g.margin_h) {
      std::fill_n(row, g.ow * g.out_c, 0.0f);
      continue;
    }
    // Columns x with 0 <= x + dx < margin_w.
    const int64_t x0 = std::clamp<int64_t>(-dx, 0, g.ow);
    const int64_t x1 = std::clamp<int64_t>(g.margin_w - dx, x0, g.ow);
    std::fill_n(row, x0 * g.out_c, 0.0f);
    std::memcpy(row + x0 * g.out_c, acc + (my * g.margin_w + x0 + dx) * g.out_c,
                (x1 - x0) * g.out_c * sizeof(float));
    std::fill_n(row + x1 * g.out_c, (g.ow - x1) * g.out_c, 0.0f);
  }
}

}  // namespace

absl::StatusOr<Kernel> MakeScatterConvolutionKernel(
    const ir::Instruction& instr) {
  const ir::Shape& in = instr.operand(0)->shape();
  const ir::Shape& ker = instr.operand(1)->shape();
  const ir::Shape& out_shape = instr.shape();
  const ir::ConvDims& c = instr.attrs().conv;
  const auto refuse = [] {
    return absl::UnimplementedError(
        "the scatter convolution takes f32 NHWC images, stride 1, no dilation "
        "or groups");
  };
  if (in.type() != ir::ElementType::kF32 ||
      ker.type() != ir::ElementType::kF32 ||
      out_shape.type() != ir::ElementType::kF32 || in.rank() != 4 ||
      ker.rank() != 4 || out_shape.rank() != 4) {
    return refuse();
  }
  const bool nhwc_in = c.input_batch == 0 &&
                       c.input_spatial == std::vector<int64_t>{1, 2} &&
                       c.input_feature == 3;
  const bool nhwc_out = c.output_batch == 0 &&
                        c.output_spatial == std::vector<int64_t>{1, 2} &&
                        c.output_feature == 3;
  if (!nhwc_in || !nhwc_out || instr.attrs().feature_group_count != 1 ||
      instr.attrs().batch_group_count != 1) {
    return refuse();
  }
  std::vector<ir::WindowDim> window = instr.attrs().window;
  if (window.empty()) window.resize(2);
  for (const ir::WindowDim& d : window) {
    if (d.stride != 1 || d.base_dilation != 1 || d.window_dilation != 1 ||
        d.pad_lo < 0 || d.pad_hi < 0) {
      return refuse();
    }
  }
  Geometry g;
  g.batch = in.dim(0);
  g.h = in.dim(1);
  g.w = in.dim(2);
  g.in_c = in.dim(3);
  g.kh = ker.dim(c.kernel_spatial[0]);
  g.kw = ker.dim(c.kernel_spatial[1]);
  g.out_c = ker.dim(c.kernel_output_feature);
  g.oh = out_shape.dim(1);
  g.ow = out_shape.dim(2);
  g.pad_top = window[0].pad_lo;
  g.pad_left = window[1].pad_lo;
  g.row_vectors = (g.kw * g.out_c + kLanes - 1) / kLanes;
  g.margin_w = g.w + g.kw - 1;
  g.margin_h = g.h + g.kh - 1;
  if (g.batch == 0 || g.h == 0 || g.w == 0 || g.in_c == 0 || g.out_c == 0 ||
      g.kh == 0 || g.kw == 0) {
    return refuse();
  }
  const std::vector<int64_t> ks = ir::RowMajorStrides(ker.dims());
  const int64_t w_strides[4] = {
      ks[c.kernel_spatial[0]], ks[c.kernel_spatial[1]],
      ks[c.kernel_input_feature], ks[c.kernel_output_feature]};
  // Where vector r (kernel row i, vector q of it) of a pixel lands, from
  // the pixel's own position in the image with margins: KH - 1 - i rows
  // down.
  std::vector<int64_t> offsets;
  std::vector<int32_t> masks;
  for (int64_t i = 0; i < g.kh; ++i) {
    for (int64_t q = 0; q < g.row_vectors; ++q) {
      offsets.push_back((g.kh - 1 - i) * g.margin_w * g.out_c + q * kLanes);
      for (int64_t l = 0; l < kLanes; ++l)
        masks.push_back(q * kLanes + l < g.kw * g.out_c ? -1 : 0);
    }
  }
  const int64_t margin_floats = g.margin_h * g.margin_w * g.out_c + kLanes;
  return Kernel(
      [=, offsets = std::move(offsets), masks = std::move(masks)](
          ExecState& st,
          const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        std::vector<float> packed;
        PackWeights(g, ops[1]->as<float>(), w_strides, packed);
        // Zero inputs may be skipped only where zero times the kernel is zero.
        const bool skip = std::all_of(packed.begin(), packed.end(),
                                      [](float x) { return std::isfinite(x); });
        const float* src = ops[0]->as<float>();
        float* dst = out->as<float>();
        int threads = 1;
        if (g.batch > 1) {
          UseComputeThreads();
          threads = std::min<int64_t>(omp_get_max_threads(), g.batch);
        }
        // The calling thread asks for cancellation (its check is its own)
        // and tells the others, which stop at their next image too.
        std::atomic<bool> stop{false};
#pragma omp parallel num_threads(threads)
        {
          const int t = omp_get_thread_num(), n = omp_get_num_threads();
          std::vector<float> acc(margin_floats);
          for (int64_t b = g.batch * t / n; b < g.batch * (t + 1) / n; ++b) {
            if (t == 0 && Cancelled()) stop.store(true, std::memory_order_relaxed);
            if (stop.load(std::memory_order_relaxed))
              break;  // the program stops at its next step
            std::fill(acc.begin(), acc.end(), 0.0f);
            ScatterImage(g, src + b * g.h * g.w * g.in_c, packed.data(),
                         offsets.data(), masks.data(), skip, acc.data());
            CopyOut(g, acc.data(), dst + b * g.oh * g.ow * g.out_c);
          }
        }
        return out;
      });
}

}  // namespace kiln::host
