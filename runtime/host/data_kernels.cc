// Data-movement ops: iota, broadcast, reshape, transpose, slice, reverse,
// pad, concatenate, dynamic-slice, dynamic-update-slice.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/host/kernel.h"
#include "runtime/host/strided_copy.h"

namespace kiln::host {
namespace {

using ir::Opcode;
using ir::Shape;

// Reads integer start indices (scalars, or one rank-1 array in the old form)
// and clamps them so the window [start, start+size) fits the operand.
std::vector<int64_t> ClampedStarts(const std::vector<BufferPtr>& ops,
                                   int first_index, const Shape& operand,
                                   const std::vector<int64_t>& sizes) {
  std::vector<int64_t> starts(operand.rank(), 0);
  const bool old_form = static_cast<int>(ops.size()) - first_index == 1 &&
                        operand.rank() != 1 &&
                        ops[first_index]->shape().rank() == 1;
  for (int i = 0; i < operand.rank(); ++i) {
    const Buffer& b = old_form ? *ops[first_index] : *ops[first_index + i];
    const int64_t k = old_form ? i : 0;
    int64_t v = ir::DispatchType(b.shape().type(), [&](auto tag) -> int64_t {
      using T = decltype(tag);
      return ir::ConvertValue<int64_t>(b.as<T>()[k]);
    });
    starts[i] = std::clamp<int64_t>(v, 0, operand.dim(i) - sizes[i]);
  }
  return starts;
}

int64_t Offset(const std::vector<int64_t>& index,
               const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) off += index[i] * strides[i];
  return off;
}

}  // namespace

absl::StatusOr<Kernel> MakeDataKernel(const ir::Instruction& instr) {
  const Shape out_shape = instr.shape();
  const ir::Attributes& at = instr.attrs();
  const int esize = ir::ElementTypeSize(out_shape.type());
  const std::vector<int64_t> out_strides = ir::RowMajorStrides(out_shape.dims());
  switch (instr.opcode()) {
    case Opcode::kIota: {
      const int64_t dim = at.iota_dimension;
      return Kernel([out_shape, dim, out_strides](ExecState& st,
                                                  const std::vector<BufferPtr>&)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        const int64_t n = out_shape.ElementCount();
        const int64_t stride = out_strides[dim], size = out_shape.dim(dim);
        ir::DispatchType(out_shape.type(), [&](auto tag) {
          using T = decltype(tag);
          T* o = out->as<T>();
          for (int64_t i = 0; i < n; ++i) {
            o[i] = ir::ConvertValue<T>((i / stride) % size);
          }
        });
        return out;
      });
    }
    case Opcode::kBroadcast: {
      const Shape& in = instr.operand(0)->shape();
      std::vector<int64_t> in_strides = ir::RowMajorStrides(in.dims());
      std::vector<int64_t> src_strides(out_shape.rank(), 0);
      for (int i = 0; i < in.rank(); ++i) src_strides[at.dimensions[i]] = in_strides[i];
      return Kernel([out_shape, src_strides, out_strides, esize](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        StridedCopy(out_shape.dims(), ops[0]->data(), 0, src_strides,
                    out->data(), 0, out_strides, esize);
        return out;
      });
    }
    case Opcode::kReshape:
      return Kernel([out_shape](ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        // A value nothing else holds (Program::Run dropped its slot: this is
        // its last reader) is reshaped in place, its storage taken over,
        // when the device charges the new shape what it charged the old
        // (tpusim's tiles may pad the two differently) or charges neither
        // (an array of a program's arena).
        if (Unshared(ops[0]) &&
            (st.memory == nullptr || ops[0]->InArena() ||
             st.memory->FootprintOf(out_shape) == ops[0]->charged_bytes())) {
          return HostBuffer::Alias(ops[0], out_shape);
        }
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        if (out->size_bytes() > 0) {
          std::memcpy(out->data(), ops[0]->data(), out->size_bytes());
        }
        return out;
      });
    case Opcode::kTranspose:
    case Opcode::kSlice:
    case Opcode::kReverse: {
      // Each is a strided read of the operand in output order.
      const Shape& in = instr.operand(0)->shape();
      const std::vector<int64_t> in_strides = ir::RowMajorStrides(in.dims());
      std::vector<int64_t> src_strides(out_shape.rank());
      int64_t src_offset = 0;
      for (int i = 0; i < out_shape.rank(); ++i) {
        if (instr.opcode() == Opcode::kTranspose) {
          src_strides[i] = in_strides[at.dimensions[i]];
        } else if (instr.opcode() == Opcode::kSlice) {
          src_strides[i] = in_strides[i] * at.slice[i].stride;
          src_offset += at.slice[i].start * in_strides[i];
        } else {
          const bool rev = std::find(at.dimensions.begin(), at.dimensions.end(),
                                     i) != at.dimensions.end();
          src_strides[i] = rev ? -in_strides[i] : in_strides[i];
          if (rev) src_offset += (in.dim(i) - 1) * in_strides[i];
        }
      }
      return Kernel([out_shape, src_strides, src_offset, out_strides, esize](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        StridedCopy(out_shape.dims(), ops[0]->data(), src_offset, src_strides,
                    out->data(), 0, out_strides, esize);
        return out;
      });
    }
    case Opcode::kPad: {
      const Shape& in = instr.operand(0)->shape();
      const std::vector<int64_t> in_strides = ir::RowMajorStrides(in.dims());
      // The part of the operand that lands inside the output (negative
      // padding crops), and where it lands.
      std::vector<int64_t> box(in.rank()), src_strides(in.rank()),
          dst_strides(in.rank());
      int64_t src_offset = 0, dst_offset = 0;
      bool empty = false;
      for (int i = 0; i < in.rank(); ++i) {
        const ir::PadDim& p = at.padding[i];
        const int64_t step = p.interior + 1;
        // First operand index whose position lo + j*step >= 0.
        int64_t first = p.lo >= 0 ? 0 : (-p.lo + step - 1) / step;
        // Last operand index whose position < out dim.
        int64_t last = in.dim(i) - 1;
        if (out_shape.dim(i) <= p.lo) {
          last = -1;
        } else {
          last = std::min(last, (out_shape.dim(i) - 1 - p.lo) / step);
        }
        box[i] = std::max<int64_t>(0, last - first + 1);
        if (box[i] == 0) empty = true;
        src_strides[i] = in_strides[i];
        dst_strides[i] = out_strides[i] * step;
        src_offset += first * in_strides[i];
        dst_offset += (p.lo + first * step) * out_strides[i];
      }
      return Kernel([out_shape, box, src_strides, dst_strides, src_offset,
                     dst_offset, empty, esize](ExecState& st,
                                               const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        const int64_t n = out_shape.ElementCount();
        const uint8_t* value = ops[1]->data();
        for (int64_t i = 0; i < n; ++i) std::memcpy(out->data() + i * esize, value, esize);
        if (!empty) {
          StridedCopy(box, ops[0]->data(), src_offset, src_strides, out->data(),
                      dst_offset, dst_strides, esize);
        }
        return out;
      });
    }
    case Opcode::kConcatenate: {
      const int64_t dim = at.dimensions[0];
      std::vector<Shape> in_shapes;
      for (const ir::Instruction* o : instr.operands()) in_shapes.push_back(o->shape());
      return Kernel([out_shape, in_shapes, dim, out_strides, esize](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        int64_t pos = 0;
        for (size_t k = 0; k < ops.size(); ++k) {
          StridedCopy(in_shapes[k].dims(), ops[k]->data(), 0,
                      ir::RowMajorStrides(in_shapes[k].dims()), out->data(),
                      pos * out_strides[dim], out_strides, esize);
          pos += in_shapes[k].dim(dim);
        }
        return out;
      });
    }
    case Opcode::kDynamicSlice: {
      const Shape in = instr.operand(0)->shape();
      const std::vector<int64_t> in_strides = ir::RowMajorStrides(in.dims());
      const std::vector<int64_t> sizes = at.slice_sizes;
      return Kernel([out_shape, in, in_strides, sizes, out_strides, esize](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        std::vector<int64_t> starts = ClampedStarts(ops, 1, in, sizes);
        StridedCopy(sizes, ops[0]->data(), Offset(starts, in_strides),
                    in_strides, out->data(), 0, out_strides, esize);
        return out;
      });
    }
    case Opcode::kDynamicUpdateSlice: {
      const Shape upd = instr.operand(1)->shape();
      const std::vector<int64_t> upd_strides = ir::RowMajorStrides(upd.dims());
      return Kernel([out_shape, upd, upd_strides, out_strides, esize](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        if (out->size_bytes() > 0) {
          std::memcpy(out->data(), ops[0]->data(), out->size_bytes());
        }
        std::vector<int64_t> starts = ClampedStarts(ops, 2, out_shape, upd.dims());
        StridedCopy(upd.dims(), ops[1]->data(), 0, upd_strides, out->data(),
                    Offset(starts, out_strides), out_strides, esize);
        return out;
      });
    }
    default:
      return absl::InternalError(
          absl::StrCat("no data kernel for ", ir::OpcodeName(instr.opcode())));
  }
}

}  // namespace kiln::host
