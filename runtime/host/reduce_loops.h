// The loops of reductions with a fast reducer (reducer_ops.h): rows of
// contiguous elements folded into one result each, and rows folded
// column by column into accumulators (ColumnFold). The reduce kernel and the fused
// reductions (fused_reduce.h) share them, so that both give the same bits.
#ifndef KILN_RUNTIME_HOST_REDUCE_LOOPS_H_
#define KILN_RUNTIME_HOST_REDUCE_LOOPS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "compiler/ir/opcode.h"
#include "runtime/host/cancel.h"
#include "runtime/host/reducer_ops.h"

namespace kiln::host {

// Reduces `rows` runs of `run` contiguous elements each into out[row].
template <typename T>
void ReduceRuns(ir::Opcode op, const T* in, T init, int64_t rows, int64_t run, T* out) {
  using A = Accumulator<T>;
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, run)) return;  // the program stops at the next step
    const T* p = in + r * run;
    A acc = static_cast<A>(init);
    if (op == ir::Opcode::kAdd && !std::is_same_v<T, bool> && run > 0) {
      // Four partial sums let the compiler vectorize without reassociating
      // a single chain.
      A s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= run; i += 4) {
        s0 += static_cast<A>(p[i]);
        s1 += static_cast<A>(p[i + 1]);
        s2 += static_cast<A>(p[i + 2]);
        s3 += static_cast<A>(p[i + 3]);
      }
      for (; i < run; ++i) s0 += static_cast<A>(p[i]);
      acc = static_cast<A>(acc + ((s0 + s1) + (s2 + s3)));
    } else {
      for (int64_t i = 0; i < run; ++i) acc = ApplyReducerOp<A>(op, acc, static_cast<A>(p[i]));
    }
    out[r] = ir::ConvertValue<T>(acc);
  }
}

// acc[j] = op(acc[j], in[0, j], in[1, j], ...) for `rows` rows of `cols`.
template <typename T>
void FoldRowsPlain(ir::Opcode op, const T* in, int64_t rows, int64_t cols, Accumulator<T>* acc) {
  using A = Accumulator<T>;
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, cols)) return;
    const T* p = in + r * cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] = ApplyReducerOp<A>(op, acc[j], static_cast<A>(p[j]));
  }
}

#if defined(__SSE2__)
// FoldRowsPlain for f32, a reducer fixed at compile time and at most
// 4 * kChunks columns: the accumulators stay in registers across the rows
// (every column still folds its rows in order, so the same bits).
template <ir::Opcode kOp, int kChunks>
void FoldRowsF32InRegisters(const float* in, int64_t rows, int64_t cols, float* acc) {
  __m128 a[kChunks];
  const int64_t last = cols - 4 * (kChunks - 1);  // columns in the last chunk
  for (int c = 0; c < kChunks; ++c) a[c] = LoadF32x4(acc + 4 * c, c + 1 < kChunks ? 4 : last);
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, cols)) break;
    const float* p = in + r * cols;
    for (int c = 0; c < kChunks; ++c) {
      a[c] = ApplyReducerOpF32x4<kOp>(a[c], LoadF32x4(p + 4 * c, c + 1 < kChunks ? 4 : last));
    }
  }
  for (int c = 0; c < kChunks; ++c) StoreF32x4(acc + 4 * c, a[c], c + 1 < kChunks ? 4 : last);
}

// FoldRowsPlain for f32 and a reducer fixed at compile time: each row folds
// into the accumulators four columns at a time, in order.
template <ir::Opcode kOp>
void FoldRowsF32(const float* in, int64_t rows, int64_t cols, float* acc) {
  switch ((cols + 3) / 4) {
    case 1: return FoldRowsF32InRegisters<kOp, 1>(in, rows, cols, acc);
    case 2: return FoldRowsF32InRegisters<kOp, 2>(in, rows, cols, acc);
    case 3: return FoldRowsF32InRegisters<kOp, 3>(in, rows, cols, acc);
    case 4: return FoldRowsF32InRegisters<kOp, 4>(in, rows, cols, acc);
    default: break;
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, cols)) return;
    const float* p = in + r * cols;
    for (int64_t j = 0; j < cols; j += 4) {
      const int64_t n = std::min<int64_t>(4, cols - j);
      StoreF32x4(acc + j, ApplyReducerOpF32x4<kOp>(LoadF32x4(acc + j, n), LoadF32x4(p + j, n)), n);
    }
  }
}
#endif

#if defined(__SSE2__)
// f32 sums of kCols columns, row r added to partial sum r % 4 of its
// column (partials[q * kCols + j]): four independent chains of additions
// per column rather than one, so that few columns are not bound by the
// latency of an addition. Four rows are 4 * kCols contiguous floats, the
// partial sums' own layout: whole vectors add into kCols accumulators.
template <int kCols>
void FoldRowsF32AddPartials(const float* in, int64_t rows, float* partials) {
  __m128 v[kCols];
  #pragma GCC unroll 8
  for (int k = 0; k < kCols; ++k) v[k] = _mm_loadu_ps(partials + 4 * k);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    if (CancelledAtRow(r / 4, 4 * kCols)) break;
    const float* p = in + r * kCols;
    #pragma GCC unroll 8
    for (int k = 0; k < kCols; ++k) v[k] = _mm_add_ps(v[k], _mm_loadu_ps(p + 4 * k));
  }
  #pragma GCC unroll 8
  for (int k = 0; k < kCols; ++k) _mm_storeu_ps(partials + 4 * k, v[k]);
  for (int64_t q = 0; r < rows; ++r, ++q) {
    for (int j = 0; j < kCols; ++j) partials[q * kCols + j] += in[r * kCols + j];
  }
}
#endif

// A reduction over the leading dimensions: rows of `cols` elements fold
// column by column into one result per column. The rows may come in
// several calls of Fold, in order; every call but the last passes a
// multiple of kRowMultiple rows, and the bits are those of one call.
//
// The order: f32 sums of one to kPartialColumns columns add row r into
// partial sum r % 4 of its column (each starting at +0) and give
// init + ((p0 + p1) + (p2 + p3)), as a sum over a contiguous run does
// (ReduceRuns; so a column of -0 summed from an initial -0 gives +0, not
// -0, while a sum of no rows is the initial value itself); every other
// fold takes each column's rows in order.
template <typename T>
class ColumnFold {
 public:
  static constexpr int64_t kRowMultiple = 4;
  static constexpr int64_t kPartialColumns = 8;

  ColumnFold(ir::Opcode op, T init, int64_t cols) : op_(op), init_(init), cols_(cols) {
    using A = Accumulator<T>;
    partials_ = std::is_same_v<T, float> && op == ir::Opcode::kAdd && cols >= 1 &&
                cols <= kPartialColumns;
    const int64_t size = (partials_ ? 4 : 1) * cols;
    acc_.reset(new A[std::max<int64_t>(1, size)]);
    std::fill(acc_.get(), acc_.get() + size, partials_ ? A{0} : static_cast<A>(init));
  }

  void Fold(const T* in, int64_t rows) {
    if (rows <= 0 || cols_ <= 0) return;
    folded_ = true;
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) {
      if (partials_) {
        float* acc = acc_.get();
        switch (cols_) {
          case 1: return FoldRowsF32AddPartials<1>(in, rows, acc);
          case 2: return FoldRowsF32AddPartials<2>(in, rows, acc);
          case 3: return FoldRowsF32AddPartials<3>(in, rows, acc);
          case 4: return FoldRowsF32AddPartials<4>(in, rows, acc);
          case 5: return FoldRowsF32AddPartials<5>(in, rows, acc);
          case 6: return FoldRowsF32AddPartials<6>(in, rows, acc);
          case 7: return FoldRowsF32AddPartials<7>(in, rows, acc);
          case 8: return FoldRowsF32AddPartials<8>(in, rows, acc);
          default: break;  // not partials_
        }
      }
      WithReducer(op_, [&](auto kOp) { FoldRowsF32<decltype(kOp)::value>(in, rows, cols_, acc_.get()); });
      return;
    }
#endif
    if (partials_) {
      // Without SSE2: the same partial sums, a row at a time.
      for (int64_t r = 0; r < rows; ++r) {
        if (CancelledAtRow(r, cols_)) return;
        Accumulator<T>* partial = acc_.get() + (r % 4) * cols_;
        for (int64_t j = 0; j < cols_; ++j) partial[j] += static_cast<Accumulator<T>>(in[r * cols_ + j]);
      }
      return;
    }
    FoldRowsPlain<T>(op_, in, rows, cols_, acc_.get());
  }

  void Finish(T* out) const {
    using A = Accumulator<T>;
    for (int64_t j = 0; j < cols_; ++j) {
      if (!partials_ || !folded_) {  // a sum of nothing is its initial value
        out[j] = partials_ ? init_ : ir::ConvertValue<T>(acc_[j]);
        continue;
      }
      const A* p = acc_.get() + j;
      out[j] = ir::ConvertValue<T>(
          static_cast<A>(static_cast<A>(init_) + ((p[0] + p[cols_]) + (p[2 * cols_] + p[3 * cols_]))));
    }
  }

 private:
  ir::Opcode op_;
  T init_;
  int64_t cols_;
  bool partials_ = false;
  bool folded_ = false;  // rows were folded
  std::unique_ptr<Accumulator<T>[]> acc_;
};

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_REDUCE_LOOPS_H_
