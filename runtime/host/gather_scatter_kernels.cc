// gather and scatter with XLA's dimension numbers.
#include <algorithm>
#include <cstring>

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

// Iterates the "batch" positions of an index array (all dims but
// index_vector_dim) and reads each start vector.
struct IndexReader {
  Shape indices;
  int64_t index_vector_dim;
  std::vector<int64_t> batch_dims;  // sizes
  std::vector<int64_t> batch_strides;  // strides into indices per batch dim
  int64_t vector_len, vector_stride;

  IndexReader(const Shape& s, int64_t ivd) : indices(s), index_vector_dim(ivd) {
    const std::vector<int64_t> strides = ir::RowMajorStrides(s.dims());
    for (int i = 0; i < s.rank(); ++i) {
      if (i == ivd) continue;
      batch_dims.push_back(s.dim(i));
      batch_strides.push_back(strides[i]);
    }
    vector_len = ivd < s.rank() ? s.dim(ivd) : 1;
    vector_stride = ivd < s.rank() ? strides[ivd] : 0;
  }
  int64_t BatchCount() const {
    int64_t n = 1;
    for (int64_t d : batch_dims) n *= d;
    return n;
  }
  // Start vector of batch position `g` (given as a multi-index).
  void Read(const Buffer& b, const std::vector<int64_t>& g,
            std::vector<int64_t>* out) const {
    int64_t base = 0;
    for (size_t i = 0; i < g.size(); ++i) base += g[i] * batch_strides[i];
    out->resize(vector_len);
    ir::DispatchType(indices.type(), [&](auto tag) {
      using T = decltype(tag);
      const T* p = b.as<T>();
      for (int64_t k = 0; k < vector_len; ++k) {
        (*out)[k] = ir::ConvertValue<int64_t>(p[base + k * vector_stride]);
      }
    });
  }
};

bool Next(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
    if (++idx[k] < dims[k]) return true;
    idx[k] = 0;
  }
  return false;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

absl::StatusOr<Kernel> MakeGatherScatterKernel(const ir::Instruction& instr,
                                               ProgramSource& programs) {
  const Shape operand = instr.operand(0)->shape();
  const Shape out_shape = instr.shape();
  const int esize = ir::ElementTypeSize(operand.type());
  const std::vector<int64_t> op_strides = ir::RowMajorStrides(operand.dims());
  const std::vector<int64_t> out_strides = ir::RowMajorStrides(out_shape.dims());

  if (instr.opcode() == Opcode::kGather) {
    const ir::GatherDims g = instr.attrs().gather;
    const std::vector<int64_t> sizes = instr.attrs().slice_sizes;
    int64_t slice_elements = 1;
    for (int64_t d : sizes) slice_elements *= d;
    const IndexReader reader(instr.operand(1)->shape(), g.index_vector_dim);
    // Where each operand dim of the slice lands in the output.
    std::vector<int64_t> dst_strides(operand.rank(), 0);
    size_t j = 0;
    for (int d = 0; d < operand.rank(); ++d) {
      if (Contains(g.collapsed_slice_dims, d)) continue;
      dst_strides[d] = out_strides[g.offset_dims[j++]];
    }
    std::vector<int64_t> batch_out_strides;
    for (int d = 0; d < out_shape.rank(); ++d) {
      if (!Contains(g.offset_dims, d)) batch_out_strides.push_back(out_strides[d]);
    }
    return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                      -> absl::StatusOr<BufferPtr> {
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
      if (out_shape.ElementCount() == 0) return out;
      std::vector<int64_t> gi(reader.batch_dims.size(), 0), start;
      int64_t slice = 0;
      do {
        // A cancelled gather's output is never read.
        if (CancelledAtRow(slice++, slice_elements)) return out;
        reader.Read(*ops[1], gi, &start);
        int64_t src_off = 0;
        for (size_t k = 0; k < start.size(); ++k) {
          const int64_t d = g.start_index_map[k];
          const int64_t s = std::clamp<int64_t>(start[k], 0, operand.dim(d) - sizes[d]);
          src_off += s * op_strides[d];
        }
        int64_t dst_off = 0;
        for (size_t k = 0; k < gi.size(); ++k) dst_off += gi[k] * batch_out_strides[k];
        StridedCopy(sizes, ops[0]->data(), src_off, op_strides, out->data(),
                    dst_off, dst_strides, esize);
      } while (Next(gi, reader.batch_dims));
      return out;
    });
  }

  // scatter(operands..., indices, updates...): n of each.
  const int n = instr.operand_count() / 2;
  const ir::ScatterDims s = instr.attrs().scatter;
  const Shape updates = instr.operand(n + 1)->shape();
  const IndexReader reader(instr.operand(n)->shape(), s.index_vector_dim);
  std::vector<int> esizes;
  std::vector<ir::ElementType> types;
  for (int i = 0; i < n; ++i) {
    types.push_back(instr.operand(i)->shape().type());
    esizes.push_back(ir::ElementTypeSize(types.back()));
  }
  const std::vector<int64_t> upd_strides = ir::RowMajorStrides(updates.dims());
  std::vector<int64_t> window_sizes, window_upd_strides, window_op_dims;
  for (int64_t d : s.update_window_dims) {
    window_sizes.push_back(updates.dim(d));
    window_upd_strides.push_back(upd_strides[d]);
  }
  for (int d = 0; d < operand.rank(); ++d) {
    if (!Contains(s.inserted_window_dims, d)) window_op_dims.push_back(d);
  }
  int64_t update_elements = 1;
  for (int64_t d : window_sizes) update_elements *= d;
  std::vector<int64_t> batch_upd_strides;
  for (int d = 0; d < updates.rank(); ++d) {
    if (!Contains(s.update_window_dims, d)) batch_upd_strides.push_back(upd_strides[d]);
  }
  const ir::Computation* combiner = instr.called(0);
  std::optional<Opcode> fast = MatchScalarBinary(*combiner);
  const bool replace = combiner->root() == combiner->parameter(1);
  ASSIGN_OR_RETURN(auto prog, programs.Get(combiner));
  std::vector<ir::ElementType> arg_types = types;
  arg_types.insert(arg_types.end(), types.begin(), types.end());
  auto call = std::make_shared<ScalarCall>(prog, arg_types);
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    // Each result starts as its operand.
    std::vector<Buffer*> outs;
    if (n == 1) outs.push_back(out.get());
    else for (const BufferPtr& e : out->tuple_elements()) outs.push_back(e.get());
    for (int i = 0; i < n; ++i) {
      if (outs[i]->size_bytes() > 0) {
        std::memcpy(outs[i]->data(), ops[i]->data(), outs[i]->size_bytes());
      }
    }
    if (updates.ElementCount() == 0) return out;
    std::vector<const uint8_t*> args(2 * n);
    std::vector<uint8_t*> results(n);
    std::vector<int64_t> gi(reader.batch_dims.size(), 0), start;
    std::vector<int64_t> full_start(operand.rank());
    int64_t update = 0;
    do {
      // A cancelled scatter's output is never read.
      if (CancelledAtRow(update++, update_elements)) return out;
      reader.Read(*ops[n], gi, &start);
      std::fill(full_start.begin(), full_start.end(), 0);
      for (size_t k = 0; k < start.size(); ++k) {
        full_start[s.scatter_dims_to_operand_dims[k]] = start[k];
      }
      // The whole window must fit, else this update is skipped.
      bool in_bounds = true;
      for (int d = 0; d < operand.rank(); ++d) {
        int64_t extent = 1;
        for (size_t w = 0; w < window_op_dims.size(); ++w) {
          if (window_op_dims[w] == d) extent = window_sizes[w];
        }
        if (full_start[d] < 0 || full_start[d] + extent > operand.dim(d)) {
          in_bounds = false;
        }
      }
      if (in_bounds) {
        int64_t upd_base = 0;
        for (size_t k = 0; k < gi.size(); ++k) upd_base += gi[k] * batch_upd_strides[k];
        int64_t op_base = 0;
        for (int d = 0; d < operand.rank(); ++d) op_base += full_start[d] * op_strides[d];
        std::vector<int64_t> wi(window_sizes.size(), 0);
        bool any = true;
        for (int64_t ws : window_sizes) any = any && ws > 0;
        while (any) {
          int64_t uo = upd_base, oo = op_base;
          for (size_t w = 0; w < wi.size(); ++w) {
            uo += wi[w] * window_upd_strides[w];
            oo += wi[w] * op_strides[window_op_dims[w]];
          }
          uint8_t* dst = out->data() + oo * esize;
          const uint8_t* src = ops[n + 1]->data() + uo * esize;
          if (n > 1) {
            // The combiner sees every operand's element and every update's.
            for (int i = 0; i < n; ++i) {
              results[i] = outs[i]->data() + oo * esizes[i];
              args[i] = results[i];
              args[n + i] = ops[n + 1 + i]->data() + uo * esizes[i];
            }
            RETURN_IF_ERROR(call->Call(st, args, results));
          } else if (replace) {
            std::memcpy(dst, src, esize);
          } else if (fast.has_value()) {
            ir::DispatchType(operand.type(), [&](auto tag) {
              using T = decltype(tag);
              using A = Accumulator<T>;
              const A r = ApplyReducerOp<A>(*fast, static_cast<A>(*reinterpret_cast<T*>(dst)),
                                            static_cast<A>(*reinterpret_cast<const T*>(src)));
              *reinterpret_cast<T*>(dst) = ir::ConvertValue<T>(r);
            });
          } else {
            RETURN_IF_ERROR(call->Call(st, {dst, src}, {dst}));
          }
          if (!Next(wi, window_sizes)) break;
        }
      }
    } while (Next(gi, reader.batch_dims));
    return out;
  });
}

}  // namespace kiln::host
