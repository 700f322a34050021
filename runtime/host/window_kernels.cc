// reduce-window and select-and-scatter.
#include <algorithm>
#include <cstring>
#include <memory>
#include <climits>
#include <type_traits>

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/host/cancel.h"
#include "runtime/host/kernel.h"
#include "runtime/host/reducer_ops.h"
#include "runtime/host/scalar_call.h"
#include "runtime/host/threads.h"

namespace kiln::host {
namespace {

using ir::Opcode;
using ir::Shape;

// Window ops check for cancellation once per this many outputs.
constexpr int64_t kPollEvery = 4096;

// Precomputed geometry of a window op.
struct Geometry {
  std::vector<int64_t> in_dims, out_dims, win_sizes;
  std::vector<ir::WindowDim> window;
  std::vector<int64_t> in_strides;
  // Offsets of the window's positions from its first one, in visiting
  // order, for windows without base dilation (empty otherwise).
  std::vector<int64_t> offsets;

  void Prepare() {
    const int rank = static_cast<int>(in_dims.size());
    offsets.clear();
    for (int d = 0; d < rank; ++d) {
      if (window[d].base_dilation != 1 || win_sizes[d] == 0) return;
    }
    offsets.push_back(0);
    for (int d = 0; d < rank; ++d) {
      std::vector<int64_t> next;
      next.reserve(offsets.size() * win_sizes[d]);
      for (int64_t base : offsets) {
        for (int64_t w = 0; w < win_sizes[d]; ++w) {
          next.push_back(base + w * window[d].window_dilation * in_strides[d]);
        }
      }
      offsets.swap(next);
    }
  }
};

// Calls visit(input_linear_index or -1 for padding) for every window
// position of output index `o`, in row-major window order.
template <typename F>
void ForEachInWindow(const Geometry& g, const std::vector<int64_t>& o, F&& visit) {
  const int rank = static_cast<int>(g.in_dims.size());
  if (rank == 0) {
    visit(0);
    return;
  }
  for (int64_t d : g.win_sizes) {
    if (d == 0) return;
  }
  // A window wholly inside the input: its first position plus the offsets.
  if (!g.offsets.empty()) {
    int64_t first = 0;
    bool inside = true;
    for (int d = 0; d < rank && inside; ++d) {
      const ir::WindowDim& wd = g.window[d];
      const int64_t p = o[d] * wd.stride - wd.pad_lo;
      inside = p >= 0 && p + (g.win_sizes[d] - 1) * wd.window_dilation < g.in_dims[d];
      first += p * g.in_strides[d];
    }
    if (inside) {
      for (int64_t offset : g.offsets) visit(first + offset);
      return;
    }
  }
  int64_t w[ir::kMaxRank] = {};
  while (true) {
    int64_t linear = 0;
    bool valid = true;
    for (int d = 0; d < rank && valid; ++d) {
      const ir::WindowDim& wd = g.window[d];
      int64_t p = o[d] * wd.stride - wd.pad_lo + w[d] * wd.window_dilation;
      if (p < 0 || p % wd.base_dilation != 0) {
        valid = false;
        break;
      }
      p /= wd.base_dilation;
      if (p >= g.in_dims[d]) valid = false;
      linear += p * g.in_strides[d];
    }
    visit(valid ? linear : -1);
    int k = rank - 1;
    for (; k >= 0; --k) {
      if (++w[k] < g.win_sizes[k]) break;
      w[k] = 0;
    }
    if (k < 0) return;
  }
}

// `a dir b` (the select computation of a max- or min-pool gradient).
template <typename A>
bool CompareValues(ir::ComparisonDirection dir, A a, A b) {
  switch (dir) {
    case ir::ComparisonDirection::kGe: return a >= b;
    case ir::ComparisonDirection::kGt: return a > b;
    case ir::ComparisonDirection::kLe: return a <= b;
    case ir::ComparisonDirection::kLt: return a < b;
    case ir::ComparisonDirection::kEq: return a == b;
    default: return a != b;
  }
}

bool NextIndex(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
    if (++idx[k] < dims[k]) return true;
    idx[k] = 0;
  }
  return false;
}

// The trailing dimensions a window passes through unchanged (size 1, stride
// 1, no padding or dilation): a window op over an [outer..., inner...] array
// is then one over rows of `inner` contiguous elements, and its loops run
// along those rows (pooling in NHWC layout has the channels there). Returns
// the geometry of the outer dimensions and sets *inner; *inner is 1 when no
// dimension passes through.
Geometry OuterGeometry(const Geometry& g, int64_t* inner) {
  int keep = static_cast<int>(g.in_dims.size());
  *inner = 1;
  while (keep > 1) {
    const int d = keep - 1;
    const ir::WindowDim& w = g.window[d];
    if (w.size != 1 || w.stride != 1 || w.pad_lo != 0 || w.pad_hi != 0 ||
        w.base_dilation != 1 || g.in_dims[d] != g.out_dims[d]) {
      break;
    }
    *inner *= g.in_dims[d];
    --keep;
  }
  Geometry outer;
  outer.in_dims.assign(g.in_dims.begin(), g.in_dims.begin() + keep);
  outer.out_dims.assign(g.out_dims.begin(), g.out_dims.begin() + keep);
  outer.win_sizes.assign(g.win_sizes.begin(), g.win_sizes.begin() + keep);
  outer.window.assign(g.window.begin(), g.window.begin() + keep);
  outer.in_strides = ir::RowMajorStrides(outer.in_dims);  // in rows
  outer.Prepare();
  return outer;
}

// acc[j] = op(acc[j], row[j]) for j < n, with op fixed at compile time so
// the loop has no switch per element.
template <Opcode kOp, typename A, typename T>
void CombineRow(A* acc, const T* row, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] = ApplyReducerOp<A>(kOp, acc[j], static_cast<A>(row[j]));
}

template <typename A, typename T>
void CombineRow(Opcode op, A* acc, const T* row, int64_t n) {
  switch (op) {
    case Opcode::kAdd: return CombineRow<Opcode::kAdd>(acc, row, n);
    case Opcode::kMultiply: return CombineRow<Opcode::kMultiply>(acc, row, n);
    case Opcode::kMaximum: return CombineRow<Opcode::kMaximum>(acc, row, n);
    case Opcode::kMinimum: return CombineRow<Opcode::kMinimum>(acc, row, n);
    case Opcode::kAnd: return CombineRow<Opcode::kAnd>(acc, row, n);
    case Opcode::kOr: return CombineRow<Opcode::kOr>(acc, row, n);
    default:
      for (int64_t j = 0; j < n; ++j) acc[j] = ApplyReducerOp<A>(op, acc[j], static_cast<A>(row[j]));
  }
}

// Whether every window of `g` lies wholly inside its input (reads no
// padding): the first position of each window is then affine in the output
// index, and ForEachInsideWindow walks them without per-output checks.
bool InsideEverywhere(const Geometry& g) {
  if (g.offsets.empty()) return false;
  for (size_t d = 0; d < g.out_dims.size(); ++d) {
    const ir::WindowDim& w = g.window[d];
    if (g.out_dims[d] == 0 || w.pad_lo > 0) return false;
    const int64_t last =
        (g.out_dims[d] - 1) * w.stride - w.pad_lo + (g.win_sizes[d] - 1) * w.window_dilation;
    if (last >= g.in_dims[d]) return false;
  }
  return true;
}

// visit(output, first) for outputs [begin, end) in row-major order,
// `first` being the input index of its window's first position; stops early
// when `poll` and the execution is cancelled. Requires InsideEverywhere(g).
template <typename F>
void ForEachInsideWindowIn(const Geometry& g, int64_t begin, int64_t end, bool poll, F& visit) {
  const int rank = static_cast<int>(g.out_dims.size());
  std::vector<int64_t> idx(rank, 0), step(rank);
  int64_t first = 0;
  for (int d = 0; d < rank; ++d) {
    first -= g.window[d].pad_lo * g.in_strides[d];
    step[d] = g.window[d].stride * g.in_strides[d];
  }
  int64_t rem = begin;  // the index of output `begin`
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = rem % g.out_dims[d];
    rem /= g.out_dims[d];
    first += idx[d] * step[d];
  }
  for (int64_t o = begin; o < end; ++o) {
    if (poll && o > begin && CancelledEvery(o - begin, kPollEvery)) return;
    visit(o, first);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < g.out_dims[d]) {
        first += step[d];
        break;
      }
      first -= step[d] * (g.out_dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// Outputs of a window op at or above which ForEachInsideWindow splits them
// over the compute threads.
constexpr int64_t kParallelOutputs = 8192;

// ForEachInsideWindowIn over all outputs; with `parallel` (visits of
// different outputs write different elements) and enough outputs, on all
// the compute threads (the OpenMP team oneDNN also runs on).
template <typename F>
void ForEachInsideWindow(const Geometry& g, bool parallel, F&& visit) {
  int64_t count = 1;
  for (int64_t d : g.out_dims) count *= d;
  int threads = 1;
  if (parallel && count >= kParallelOutputs) {
    UseComputeThreads();
    threads = omp_get_max_threads();
  }
  if (threads <= 1) {
    ForEachInsideWindowIn(g, 0, count, /*poll=*/true, visit);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    ForEachInsideWindowIn(g, count * t / n, count * (t + 1) / n, /*poll=*/t == 0, visit);
  }
}

template <typename F>
void WithDirection(ir::ComparisonDirection dir, F&& f) {
  using D = ir::ComparisonDirection;
  switch (dir) {
    case D::kGe: return f(std::integral_constant<D, D::kGe>{});
    case D::kGt: return f(std::integral_constant<D, D::kGt>{});
    case D::kLe: return f(std::integral_constant<D, D::kLe>{});
    case D::kLt: return f(std::integral_constant<D, D::kLt>{});
    case D::kEq: return f(std::integral_constant<D, D::kEq>{});
    default: return f(std::integral_constant<D, D::kNe>{});
  }
}

#if defined(__SSE2__)
// Rows of at least four columns go in blocks of four, block b from column
// min(4b, inner - 4): when inner is not a multiple of four the last block
// overlaps the one before it, which suits rows whose columns are computed
// independently (a column written twice gets the same value twice). Up to
// four blocks go at once, so that their chains of dependent operations
// (one per window position) interleave.
inline int64_t BlockStart(int64_t inner, int64_t b) { return std::min(4 * b, inner - 4); }

// f(std::integral_constant<int, count>{}, j, n) for the groups of `count`
// blocks that make up a row of `inner` columns, block c of a group at
// column j[c], n columns each: 4, or a lone block of n = inner < 4.
template <typename F>
__attribute__((always_inline)) inline void ForEachBlockGroup(int64_t inner, F&& f) {
  if (inner < 4) {
    const int64_t j = 0;
    f(std::integral_constant<int, 1>{}, &j, inner);
    return;
  }
  auto group = [&](auto count, int64_t b) {
    int64_t j[decltype(count)::value];
    #pragma GCC unroll 4
    for (int c = 0; c < decltype(count)::value; ++c) j[c] = BlockStart(inner, b + c);
    f(count, static_cast<const int64_t*>(j), int64_t{4});
  };
  const int64_t blocks = (inner + 3) / 4;
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) group(std::integral_constant<int, 4>{}, b);
  switch (blocks - b) {
    case 1: return group(std::integral_constant<int, 1>{}, b);
    case 2: return group(std::integral_constant<int, 2>{}, b);
    case 3: return group(std::integral_constant<int, 3>{}, b);
    default: return;
  }
}

// One output row of an f32 reduce-window whose windows lie inside the input:
// row[j] folds column j of the window's rows (at base + offsets[k] * inner)
// in window order, as the scalar loop does (so the same bits).
template <Opcode kOp>
void ReduceWindowRowF32(const float* base, const int64_t* offsets, int64_t positions,
                        int64_t inner, float init, float* row) {
  ForEachBlockGroup(inner, [&](auto count, const int64_t* j, int64_t n) {
    constexpr int kCount = decltype(count)::value;
    __m128 a[kCount];
    #pragma GCC unroll 4
    for (int c = 0; c < kCount; ++c) a[c] = _mm_set1_ps(init);
    for (int64_t k = 0; k < positions; ++k) {
      const float* p = base + offsets[k] * inner;
      #pragma GCC unroll 4
      for (int c = 0; c < kCount; ++c) {
        a[c] = ApplyReducerOpF32x4<kOp>(a[c], LoadF32x4(p + j[c], n));
      }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < kCount; ++c) StoreF32x4(row + j[c], a[c], n);
  });
}

// !(a dir b) in each lane, NaN included (the select computation declines
// the current choice).
template <ir::ComparisonDirection kDir>
__m128 NotCompareF32x4(__m128 a, __m128 b) {
  using D = ir::ComparisonDirection;
  if constexpr (kDir == D::kGe) return _mm_cmpnge_ps(a, b);
  else if constexpr (kDir == D::kGt) return _mm_cmpngt_ps(a, b);
  else if constexpr (kDir == D::kLe) return _mm_cmpnle_ps(a, b);
  else if constexpr (kDir == D::kLt) return _mm_cmpnlt_ps(a, b);
  else if constexpr (kDir == D::kEq) return _mm_cmpneq_ps(a, b);
  else return _mm_cmpeq_ps(a, b);
}

// For kCount blocks of n columns of a window (from columns j[c]; its rows
// at operand + (first + offsets[k]) * inner), the position each column
// selects: the first, replaced by each later one the select declines, as
// the scalar loop does.
template <ir::ComparisonDirection kDir, int kCount>
__attribute__((always_inline)) inline void ChooseInWindowF32(
    const float* operand, int64_t first, const int64_t* offsets, int64_t positions, int64_t inner,
    const int64_t* j, int64_t n, __m128i* chosen) {
  __m128 best[kCount];
  const float* p = operand + (first + offsets[0]) * inner;
  #pragma GCC unroll 4
  for (int c = 0; c < kCount; ++c) {
    best[c] = LoadF32x4(p + j[c], n);
    chosen[c] = _mm_setzero_si128();
  }
  for (int64_t k = 1; k < positions; ++k) {
    p = operand + (first + offsets[k]) * inner;
    const __m128i position = _mm_set1_epi32(static_cast<int32_t>(k));
    #pragma GCC unroll 4
    for (int c = 0; c < kCount; ++c) {
      const __m128 v = LoadF32x4(p + j[c], n);
      const __m128 take = NotCompareF32x4<kDir>(best[c], v);
      best[c] = _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, best[c]));
      const __m128i mask = _mm_castps_si128(take);
      chosen[c] = _mm_or_si128(_mm_and_si128(mask, position), _mm_andnot_si128(mask, chosen[c]));
    }
  }
}

// One source row of an f32 select-and-scatter whose windows lie inside the
// operand: each column selects within its column of the window and adds its
// source element there. Four columns at a time, without branches: which
// position wins is unpredictable.
template <ir::ComparisonDirection kDir, Opcode kOp>
void SelectAndScatterRowF32(const float* operand, int64_t first, const int64_t* offsets,
                            int64_t positions, int64_t inner, const float* src, float* out) {
  for (int64_t j = 0; j < inner; j += 4) {
    const int64_t n = std::min<int64_t>(4, inner - j);
    __m128i chosen;
    ChooseInWindowF32<kDir, 1>(operand, first, offsets, positions, inner, &j, n, &chosen);
    alignas(16) int32_t at[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(at), chosen);
    for (int64_t l = 0; l < n; ++l) {
      float& dst = out[(first + offsets[at[l]]) * inner + j + l];
      dst = ApplyReducerOp<float>(kOp, dst, src[j + l]);
    }
  }
}

// SelectAndScatterRowF32 for windows that do not overlap: each position of
// the window is written, with op(init, source) where it was chosen and init
// elsewhere (what scattering into an output filled with init gives, as no
// other window reaches these elements), as whole vectors.
template <ir::ComparisonDirection kDir, Opcode kOp>
void SelectAndWriteRowF32(const float* operand, int64_t first, const int64_t* offsets,
                          int64_t positions, int64_t inner, const float* src, float init,
                          float* out) {
  const __m128 fill = _mm_set1_ps(init);
  ForEachBlockGroup(inner, [&](auto count, const int64_t* j, int64_t n) {
    constexpr int kCount = decltype(count)::value;
    __m128i chosen[kCount];
    ChooseInWindowF32<kDir, kCount>(operand, first, offsets, positions, inner, j, n, chosen);
    __m128 value[kCount];
    #pragma GCC unroll 4
    for (int c = 0; c < kCount; ++c) {
      value[c] = ApplyReducerOpF32x4<kOp>(fill, LoadF32x4(src + j[c], n));
    }
    for (int64_t k = 0; k < positions; ++k) {
      float* p = out + (first + offsets[k]) * inner;
      const __m128i position = _mm_set1_epi32(static_cast<int32_t>(k));
      #pragma GCC unroll 4
      for (int c = 0; c < kCount; ++c) {
        const __m128 here = _mm_castsi128_ps(_mm_cmpeq_epi32(chosen[c], position));
        StoreF32x4(p + j[c], _mm_or_ps(_mm_and_ps(here, value[c]), _mm_andnot_ps(here, fill)), n);
      }
    }
  });
}
#endif

}  // namespace

absl::StatusOr<Kernel> MakeWindowKernel(const ir::Instruction& instr,
                                        ProgramSource& programs) {
  Geometry g;
  const Shape in_shape = instr.operand(0)->shape();
  g.in_dims = in_shape.dims();
  g.in_strides = ir::RowMajorStrides(g.in_dims);
  g.window = instr.attrs().window;
  for (const ir::WindowDim& w : g.window) g.win_sizes.push_back(w.size);
  g.Prepare();
  const Shape out_shape = instr.shape();
  const ir::ElementType type = in_shape.type();
  const int esize = ir::ElementTypeSize(type);

  if (instr.opcode() == Opcode::kReduceWindow) {
    const int n = instr.operand_count() / 2;
    g.out_dims = n == 1 ? out_shape.dims() : out_shape.tuple_shape(0).dims();
    std::optional<Opcode> fast = MatchScalarBinary(*instr.called(0));
    int64_t inner = 1;
    const Geometry outer = OuterGeometry(g, &inner);
    if (n == 1 && fast.has_value()) {
      // Rows of `inner` elements (1 when no dimension passes through): each
      // window position combines a whole row.
      const Opcode op = *fast;
      const bool inside = InsideEverywhere(outer);
      return Kernel([outer, inner, inside, op, out_shape, type](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        if (out_shape.ElementCount() == 0) return out;
        ir::DispatchType(type, [&](auto tag) {
          using T = decltype(tag);
          using A = Accumulator<T>;
          const T* in = ops[0]->as<T>();
          const T init_value = ops[1]->as<T>()[0];
          const A init = static_cast<A>(init_value);
          T* o = out->as<T>();
          if (inside) {
            const int64_t* offsets = outer.offsets.data();
            const int64_t positions = static_cast<int64_t>(outer.offsets.size());
            // `kOp` is a compile-time constant for f32 (the common case) and
            // the runtime op otherwise (fewer instantiations to build).
            auto run = [&](auto kOp) {
              ForEachInsideWindow(outer, /*parallel=*/true, [&](int64_t linear, int64_t first) {
                // Element by element, so the accumulator stays in a register.
                const T* base = in + first * inner;
                T* row = o + linear * inner;
                for (int64_t j = 0; j < inner; ++j) {
                  A a = init;
                  for (int64_t k = 0; k < positions; ++k) {
                    a = ApplyReducerOp<A>(kOp, a, static_cast<A>(base[offsets[k] * inner + j]));
                  }
                  row[j] = ir::ConvertValue<T>(a);
                }
              });
            };
            if constexpr (std::is_same_v<T, float>) {
#if defined(__SSE2__)
              WithReducer(op, [&](auto kOp) {
                ForEachInsideWindow(outer, /*parallel=*/true, [&](int64_t linear, int64_t first) {
                  ReduceWindowRowF32<decltype(kOp)::value>(in + first * inner, offsets, positions,
                                                           inner, init, o + linear * inner);
                });
              });
#else
              WithReducer(op, run);
#endif
            } else {
              run(op);
            }
            return;
          }
          // Not std::vector: vector<bool> has no data().
          std::unique_ptr<A[]> acc(new A[inner]);
          std::vector<int64_t> idx(outer.out_dims.size(), 0);
          int64_t linear = 0;
          do {
            std::fill(acc.get(), acc.get() + inner, init);
            ForEachInWindow(outer, idx, [&](int64_t i) {
              if (i >= 0) {
                CombineRow(op, acc.get(), in + i * inner, inner);
              } else {
                for (int64_t j = 0; j < inner; ++j) acc[j] = ApplyReducerOp<A>(op, acc[j], init);
              }
            });
            T* row = o + linear * inner;
            for (int64_t j = 0; j < inner; ++j) row[j] = ir::ConvertValue<T>(acc[j]);
            ++linear;
          } while (NextIndex(idx, outer.out_dims) && !CancelledEvery(linear, kPollEvery));
        });
        return out;
      });
    }
    std::vector<ir::ElementType> types;
    for (int i = 0; i < n; ++i) types.push_back(instr.operand(i)->shape().type());
    std::vector<ir::ElementType> arg_types = types;
    arg_types.insert(arg_types.end(), types.begin(), types.end());
    ASSIGN_OR_RETURN(auto reducer, programs.Get(instr.called(0)));
    auto call = std::make_shared<ScalarCall>(reducer, arg_types);
    return Kernel([g, n, types, call, out_shape](
                      ExecState& st, const std::vector<BufferPtr>& ops)
                      -> absl::StatusOr<BufferPtr> {
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
      if (ir::Shape(types[0], g.out_dims).ElementCount() == 0) return out;
      std::vector<std::vector<uint8_t>> acc(n);
      std::vector<const uint8_t*> args(2 * n);
      std::vector<uint8_t*> results(n);
      std::vector<int64_t> idx(g.out_dims.size(), 0);
      int64_t linear = 0;
      absl::Status status;
      do {
        for (int k = 0; k < n; ++k) {
          const int size = ir::ElementTypeSize(types[k]);
          acc[k].assign(ops[n + k]->data(), ops[n + k]->data() + size);
        }
        ForEachInWindow(g, idx, [&](int64_t i) {
          if (!status.ok()) return;
          for (int k = 0; k < n; ++k) {
            const int size = ir::ElementTypeSize(types[k]);
            args[k] = acc[k].data();
            args[n + k] = i >= 0 ? ops[k]->data() + i * size : ops[n + k]->data();
            results[k] = acc[k].data();
          }
          status = call->Call(st, args, results);
        });
        RETURN_IF_ERROR(status);
        for (int k = 0; k < n; ++k) {
          Buffer& dst = n == 1 ? *out : *out->tuple_elements()[k];
          const int size = ir::ElementTypeSize(types[k]);
          std::memcpy(dst.data() + linear * size, acc[k].data(), size);
        }
        ++linear;
      } while (NextIndex(idx, g.out_dims) && !CancelledEvery(linear, kPollEvery));
      return out;
    });
  }

  // select-and-scatter(operand, source, init).
  g.out_dims = instr.operand(1)->shape().dims();
  const ir::Computation* select = instr.called(0);
  std::optional<ir::ComparisonDirection> select_dir;
  if (select->instruction_count() == 3 &&
      select->root()->opcode() == Opcode::kCompare &&
      select->root()->operand(0) == select->parameter(0) &&
      select->root()->operand(1) == select->parameter(1)) {
    select_dir = select->root()->attrs().direction;
  }
  std::optional<Opcode> scatter_op = MatchScalarBinary(*instr.called(1));
  int64_t inner = 1;
  const Geometry outer = OuterGeometry(g, &inner);
  if (select_dir.has_value() && scatter_op.has_value()) {
    // The usual max-pool gradient (compare, then add), over rows of `inner`
    // elements (1 when no dimension passes through): each element of a row
    // selects within its own column of the window.
    const ir::ComparisonDirection dir = *select_dir;
    const Opcode op = *scatter_op;
    const bool inside = InsideEverywhere(outer);
    // Windows that do not overlap (each spans no more than the stride)
    // scatter to different elements; `tiled` ones also cover every element
    // of the operand exactly once.
    bool disjoint = true, tiled = true;
    for (size_t d = 0; d < outer.window.size(); ++d) {
      const ir::WindowDim& w = outer.window[d];
      const int64_t extent = (outer.win_sizes[d] - 1) * w.window_dilation + 1;
      disjoint = disjoint && w.stride >= extent;
      tiled = tiled && w.stride == extent && w.window_dilation == 1 && w.pad_lo == 0 &&
              w.pad_hi == 0 && outer.out_dims[d] * w.stride == outer.in_dims[d];
    }
    return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                      -> absl::StatusOr<BufferPtr> {
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
      ir::DispatchType(type, [&](auto tag) {
        using T = decltype(tag);
        using A = Accumulator<T>;
        const T* operand = ops[0]->as<T>();
        const T* source = ops[1]->as<T>();
        T* o = out->as<T>();
        const T init = ops[2]->as<T>()[0];
#if defined(__SSE2__)
        if constexpr (std::is_same_v<T, float>) {
          if (inside && disjoint && outer.offsets.size() <= size_t{INT32_MAX}) {
            // Every element a window holds is written once, chosen or not:
            // the rest of the output needs filling only when not tiled.
            if (!tiled) std::fill(o, o + out_shape.ElementCount(), init);
            if (ir::Shape(type, g.out_dims).ElementCount() == 0) return;
            const int64_t* offsets = outer.offsets.data();
            const int64_t positions = static_cast<int64_t>(outer.offsets.size());
            WithDirection(dir, [&](auto kDir) {
              WithReducer(op, [&](auto kOp) {
                ForEachInsideWindow(outer, /*parallel=*/true, [&](int64_t linear, int64_t first) {
                  SelectAndWriteRowF32<decltype(kDir)::value, decltype(kOp)::value>(
                      operand, first, offsets, positions, inner, source + linear * inner, init,
                      o);
                });
              });
            });
            return;
          }
        }
#endif
        std::fill(o, o + out_shape.ElementCount(), init);
        if (ir::Shape(type, g.out_dims).ElementCount() == 0) return;
        if (inside) {
          // Compile-time direction and op for f32, runtime ones otherwise.
          auto run = [&](auto kDir, auto kOp) {
            const int64_t* offsets = outer.offsets.data();
            const int64_t positions = static_cast<int64_t>(outer.offsets.size());
            ForEachInsideWindow(outer, disjoint, [&](int64_t linear, int64_t first) {
              const T* src = source + linear * inner;
              for (int64_t j = 0; j < inner; ++j) {
                // Element by element, in registers, and without branches:
                // which position wins is unpredictable.
                int64_t chosen = first + offsets[0];
                A best_value = static_cast<A>(operand[chosen * inner + j]);
                for (int64_t k = 1; k < positions; ++k) {
                  const int64_t at = first + offsets[k];
                  const A v = static_cast<A>(operand[at * inner + j]);
                  const bool take = !CompareValues(kDir, best_value, v);
                  best_value = take ? v : best_value;
                  chosen = take ? at : chosen;
                }
                T& dst = o[chosen * inner + j];
                dst = ir::ConvertValue<T>(
                    ApplyReducerOp<A>(kOp, static_cast<A>(dst), static_cast<A>(src[j])));
              }
            });
          };
          if constexpr (std::is_same_v<T, float>) {
#if defined(__SSE2__)
            if (outer.offsets.size() <= size_t{INT32_MAX}) {
              const int64_t* offsets = outer.offsets.data();
              const int64_t positions = static_cast<int64_t>(outer.offsets.size());
              WithDirection(dir, [&](auto kDir) {
                WithReducer(op, [&](auto kOp) {
                  ForEachInsideWindow(outer, disjoint, [&](int64_t linear, int64_t first) {
                    SelectAndScatterRowF32<decltype(kDir)::value, decltype(kOp)::value>(
                        operand, first, offsets, positions, inner, source + linear * inner, o);
                  });
                });
              });
              return;
            }
#endif
            WithDirection(dir, [&](auto kDir) { WithReducer(op, [&](auto kOp) { run(kDir, kOp); }); });
          } else {
            run(dir, op);
          }
          return;
        }
        std::vector<int64_t> selected(inner);
        std::unique_ptr<A[]> best(new A[inner]);
        std::vector<int64_t> idx(outer.out_dims.size(), 0);
        int64_t linear = 0;
        do {
          std::fill(selected.begin(), selected.end(), -1);
          ForEachInWindow(outer, idx, [&](int64_t i) {
            if (i < 0) return;
            const T* row = operand + i * inner;
            for (int64_t j = 0; j < inner; ++j) {
              const A v = static_cast<A>(row[j]);
              if (selected[j] < 0 || !CompareValues(dir, best[j], v)) {
                selected[j] = i * inner + j;
                best[j] = v;
              }
            }
          });
          const T* src = source + linear * inner;
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t at = selected[j];
            if (at < 0) continue;
            o[at] = ir::ConvertValue<T>(
                ApplyReducerOp<A>(op, static_cast<A>(o[at]), static_cast<A>(src[j])));
          }
          ++linear;
        } while (NextIndex(idx, outer.out_dims) && !CancelledEvery(linear, kPollEvery));
      });
      return out;
    });
  }
  ASSIGN_OR_RETURN(auto select_prog, programs.Get(instr.called(0)));
  ASSIGN_OR_RETURN(auto scatter_prog, programs.Get(instr.called(1)));
  auto select_call = std::make_shared<ScalarCall>(
      select_prog, std::vector<ir::ElementType>{type, type});
  auto scatter_call = std::make_shared<ScalarCall>(
      scatter_prog, std::vector<ir::ElementType>{type, type});
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    const int64_t count = out_shape.ElementCount();
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(out->data() + i * esize, ops[2]->data(), esize);
    }
    if (ir::Shape(type, g.out_dims).ElementCount() == 0) return out;
    const uint8_t* operand = ops[0]->data();
    const uint8_t* source = ops[1]->data();
    std::vector<int64_t> idx(g.out_dims.size(), 0);
    int64_t linear = 0;
    absl::Status status;
    do {
      int64_t selected = -1;
      ForEachInWindow(g, idx, [&](int64_t i) {
        if (i < 0 || !status.ok()) return;
        if (selected < 0) {
          selected = i;
          return;
        }
        bool keep;
        if (select_dir.has_value()) {
          ir::DispatchType(type, [&](auto tag) {
            using T = decltype(tag);
            using A = Accumulator<T>;
            const A a = static_cast<A>(reinterpret_cast<const T*>(operand)[selected]);
            const A b = static_cast<A>(reinterpret_cast<const T*>(operand)[i]);
            keep = CompareValues(*select_dir, a, b);
          });
        } else {
          uint8_t result = 0;
          status = select_call->Call(st, {operand + selected * esize, operand + i * esize},
                                     {&result});
          keep = result != 0;
        }
        if (!keep) selected = i;
      });
      RETURN_IF_ERROR(status);
      if (selected >= 0) {
        uint8_t* dst = out->data() + selected * esize;
        const uint8_t* src = source + linear * esize;
        if (scatter_op.has_value()) {
          ir::DispatchType(type, [&](auto tag) {
            using T = decltype(tag);
            using A = Accumulator<T>;
            T* d = reinterpret_cast<T*>(dst);
            *d = ir::ConvertValue<T>(ApplyReducerOp<A>(*scatter_op, static_cast<A>(*d),
                                              static_cast<A>(*reinterpret_cast<const T*>(src))));
          });
        } else {
          RETURN_IF_ERROR(scatter_call->Call(st, {dst, src}, {dst}));
        }
      }
      ++linear;
    } while (NextIndex(idx, g.out_dims) && !CancelledEvery(linear, kPollEvery));
    return out;
  });
}

}  // namespace kiln::host
