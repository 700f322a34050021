// reduce: fast typed loops for add/multiply/max/min/and/or reducers, and a
// general path that calls the reducer computation.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/host/cancel.h"
#include "runtime/host/kernel.h"
#include "runtime/host/reducer_ops.h"
#include "runtime/host/scalar_call.h"
#include "runtime/host/strided_copy.h"

namespace kiln::host {
namespace {

using ir::Opcode;
using ir::Shape;

// Reduces `rows` runs of `run` contiguous elements each into out[row].
template <typename T>
void ReduceRuns(Opcode op, const T* in, T init, int64_t rows, int64_t run,
                T* out) {
  using A = Accumulator<T>;
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, run)) return;  // the program stops at the next step
    const T* p = in + r * run;
    A acc = static_cast<A>(init);
    if (op == Opcode::kAdd && !std::is_same_v<T, bool>) {
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

// out[j] = op(init, in[0, j], in[1, j], ...) for `rows` rows of `cols`.
template <typename T>
void ReduceLeading(Opcode op, const T* in, T init, int64_t rows, int64_t cols,
                   T* out) {
  using A = Accumulator<T>;
  std::unique_ptr<A[]> acc(new A[cols]);
  std::fill(acc.get(), acc.get() + cols, static_cast<A>(init));
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, cols)) return;
    const T* p = in + r * cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] = ApplyReducerOp<A>(op, acc[j], static_cast<A>(p[j]));
  }
  for (int64_t j = 0; j < cols; ++j) out[j] = ir::ConvertValue<T>(acc[j]);
}

#if defined(__SSE2__)
// ReduceLeading for f32, a reducer fixed at compile time and at most
// 4 * kChunks columns: the accumulators stay in registers across the rows
// (every column still folds its rows in order, so the same bits).
template <Opcode kOp, int kChunks>
void ReduceLeadingF32InRegisters(const float* in, float init, int64_t rows, int64_t cols,
                                 float* out) {
  __m128 acc[kChunks];
  for (int c = 0; c < kChunks; ++c) acc[c] = _mm_set1_ps(init);
  const int64_t last = cols - 4 * (kChunks - 1);  // columns in the last chunk
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, cols)) return;
    const float* p = in + r * cols;
    for (int c = 0; c < kChunks; ++c) {
      acc[c] = ApplyReducerOpF32x4<kOp>(acc[c], LoadF32x4(p + 4 * c, c + 1 < kChunks ? 4 : last));
    }
  }
  for (int c = 0; c < kChunks; ++c) StoreF32x4(out + 4 * c, acc[c], c + 1 < kChunks ? 4 : last);
}

// ReduceLeading for f32 and a reducer fixed at compile time: each row folds
// into the accumulators four columns at a time, in order.
template <Opcode kOp>
void ReduceLeadingF32(const float* in, float init, int64_t rows, int64_t cols, float* out) {
  switch ((cols + 3) / 4) {
    case 1: return ReduceLeadingF32InRegisters<kOp, 1>(in, init, rows, cols, out);
    case 2: return ReduceLeadingF32InRegisters<kOp, 2>(in, init, rows, cols, out);
    case 3: return ReduceLeadingF32InRegisters<kOp, 3>(in, init, rows, cols, out);
    case 4: return ReduceLeadingF32InRegisters<kOp, 4>(in, init, rows, cols, out);
    default: break;
  }
  std::unique_ptr<float[]> acc(new float[cols]);
  std::fill(acc.get(), acc.get() + cols, init);
  for (int64_t r = 0; r < rows; ++r) {
    if (CancelledAtRow(r, cols)) return;
    const float* p = in + r * cols;
    for (int64_t j = 0; j < cols; j += 4) {
      const int64_t n = std::min<int64_t>(4, cols - j);
      StoreF32x4(acc.get() + j,
                 ApplyReducerOpF32x4<kOp>(LoadF32x4(acc.get() + j, n), LoadF32x4(p + j, n)), n);
    }
  }
  std::copy(acc.get(), acc.get() + cols, out);
}
#endif

}  // namespace

absl::StatusOr<Kernel> MakeReduceKernel(const ir::Instruction& instr,
                                        ProgramSource& programs) {
  const int n = instr.operand_count() / 2;
  const Shape in_shape = instr.operand(0)->shape();
  const Shape out_shape = instr.shape();
  const int rank = in_shape.rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t d : instr.attrs().dimensions) reduced[d] = true;
  // Kept dims first, then reduced dims: each output element becomes a
  // contiguous run.
  std::vector<int64_t> perm;
  for (int i = 0; i < rank; ++i) if (!reduced[i]) perm.push_back(i);
  const int kept = static_cast<int>(perm.size());
  for (int i = 0; i < rank; ++i) if (reduced[i]) perm.push_back(i);
  int64_t rows = 1, run = 1;
  for (int i = 0; i < rank; ++i) (reduced[i] ? run : rows) *= in_shape.dim(i);
  bool identity = true;
  for (int i = 0; i < rank; ++i) identity = identity && perm[i] == i;
  bool leading = true;  // reduced dims are exactly 0..k-1
  for (int i = 0; i < rank; ++i) leading = leading && (reduced[i] == (i < rank - kept));
  std::vector<int64_t> perm_dims, perm_strides;
  const std::vector<int64_t> in_strides = ir::RowMajorStrides(in_shape.dims());
  for (int64_t p : perm) {
    perm_dims.push_back(in_shape.dim(p));
    perm_strides.push_back(in_strides[p]);
  }
  const std::vector<int64_t> dense = ir::RowMajorStrides(perm_dims);
  const int esize = ir::ElementTypeSize(in_shape.type());

  std::optional<Opcode> fast = MatchScalarBinary(*instr.called(0));
  if (n == 1 && fast.has_value()) {
    const Opcode op = *fast;
    return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                      -> absl::StatusOr<BufferPtr> {
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
      const uint8_t* src = ops[0]->data();
      std::vector<uint8_t> temp;
      if (!identity && !leading) {
        temp.resize(in_shape.ByteSize());
        StridedCopy(perm_dims, src, 0, perm_strides, temp.data(), 0, dense, esize);
        src = temp.data();
      }
      ir::DispatchType(in_shape.type(), [&](auto tag) {
        using T = decltype(tag);
        const T init = ops[1]->as<T>()[0];
        const T* in = reinterpret_cast<const T*>(src);
        if (leading && !identity) {
#if defined(__SSE2__)
          if constexpr (std::is_same_v<T, float>) {
            return WithReducer(op, [&](auto kOp) {
              ReduceLeadingF32<decltype(kOp)::value>(in, init, run, rows, out->as<T>());
            });
          }
#endif
          ReduceLeading<T>(op, in, init, run, rows, out->as<T>());
        } else {
          ReduceRuns<T>(op, in, init, rows, run, out->as<T>());
        }
      });
      return out;
    });
  }
  // General path: call the reducer for every element, in index order.
  std::vector<ir::ElementType> types;
  for (int i = 0; i < n; ++i) types.push_back(instr.operand(i)->shape().type());
  std::vector<ir::ElementType> arg_types = types;
  arg_types.insert(arg_types.end(), types.begin(), types.end());
  ASSIGN_OR_RETURN(auto reducer, programs.Get(instr.called(0)));
  auto call = std::make_shared<ScalarCall>(reducer, arg_types);
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    // Permuted copies of every input so runs are contiguous.
    std::vector<std::vector<uint8_t>> inputs(n);
    for (int k = 0; k < n; ++k) {
      const int size = ir::ElementTypeSize(types[k]);
      inputs[k].resize(in_shape.ElementCount() * size);
      StridedCopy(perm_dims, ops[k]->data(), 0, perm_strides, inputs[k].data(),
                  0, dense, size);
    }
    std::vector<std::vector<uint8_t>> acc(n);
    std::vector<const uint8_t*> args(2 * n);
    std::vector<uint8_t*> results(n);
    for (int64_t r = 0; r < rows; ++r) {
      if (CancelledAtRow(r, run)) return absl::CancelledError("the execution was cancelled");
      for (int k = 0; k < n; ++k) {
        const int size = ir::ElementTypeSize(types[k]);
        acc[k].assign(ops[n + k]->data(), ops[n + k]->data() + size);
      }
      for (int64_t i = 0; i < run; ++i) {
        for (int k = 0; k < n; ++k) {
          const int size = ir::ElementTypeSize(types[k]);
          args[k] = acc[k].data();
          args[n + k] = inputs[k].data() + (r * run + i) * size;
          results[k] = acc[k].data();
        }
        RETURN_IF_ERROR(call->Call(st, args, results));
      }
      for (int k = 0; k < n; ++k) {
        Buffer& dst = n == 1 ? *out : *out->tuple_elements()[k];
        const int size = ir::ElementTypeSize(types[k]);
        std::memcpy(dst.data() + r * size, acc[k].data(), size);
      }
    }
    return out;
  });
}

}  // namespace kiln::host
