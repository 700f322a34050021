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
#include "runtime/host/reduce_loops.h"
#include "runtime/host/reducer_ops.h"
#include "runtime/host/scalar_call.h"
#include "runtime/host/strided_copy.h"

namespace kiln::host {
namespace {

using ir::Opcode;
using ir::Shape;

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
          ColumnFold<T> fold(op, init, rows);
          fold.Fold(in, run);
          fold.Finish(out->as<T>());
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
