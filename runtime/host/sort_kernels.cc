// sort: stable sorting of one or more operands along a dimension with a
// comparator computation (fast path for a plain LT/GT compare).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/host/cancel.h"
#include "runtime/host/kernel.h"
#include "runtime/host/merge_sort.h"
#include "runtime/host/reducer_ops.h"
#include "runtime/host/scalar_call.h"

namespace kiln::host {

absl::StatusOr<Kernel> MakeSortKernel(const ir::Instruction& instr,
                                      ProgramSource& programs) {
  const int n = instr.operand_count();
  const ir::Shape shape = instr.operand(0)->shape();
  const ir::Shape out_shape = instr.shape();
  const int64_t dim = shape.rank() == 0 ? 0 : instr.attrs().dimensions[0];
  const int64_t len = shape.rank() == 0 ? 1 : shape.dim(dim);
  const int64_t stride = shape.rank() == 0 ? 1 : ir::RowMajorStrides(shape.dims())[dim];
  const int64_t total = shape.ElementCount();
  std::vector<ir::ElementType> types;
  std::vector<ir::ElementType> arg_types;
  for (int i = 0; i < n; ++i) {
    types.push_back(instr.operand(i)->shape().type());
    arg_types.push_back(types.back());
    arg_types.push_back(types.back());
  }
  const ir::Computation* cmp = instr.called(0);
  std::optional<ir::ComparisonDirection> fast;
  if (cmp->instruction_count() == 2 * n + 1 &&
      cmp->root()->opcode() == ir::Opcode::kCompare &&
      cmp->root()->operand(0) == cmp->parameter(0) &&
      cmp->root()->operand(1) == cmp->parameter(1)) {
    const auto d = cmp->root()->attrs().direction;
    if (d == ir::ComparisonDirection::kLt || d == ir::ComparisonDirection::kGt) fast = d;
  }
  ASSIGN_OR_RETURN(auto prog, programs.Get(cmp));
  auto call = std::make_shared<ScalarCall>(prog, arg_types);
  return Kernel([=](ExecState& st, const std::vector<BufferPtr>& ops)
                    -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
    std::vector<Buffer*> outs;
    if (n == 1) outs.push_back(out.get());
    else for (const BufferPtr& e : out->tuple_elements()) outs.push_back(e.get());
    if (total == 0) return out;
    const int64_t outer = total / (len * stride);
    std::vector<int64_t> perm(len);
    absl::Status status;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < stride; ++in) {
        // Many short rows: a poll about every 2^20 elements (long rows poll
        // inside MergeSort); a cancelled sort's output is never read.
        if (CancelledAtRow(o * stride + in, len)) return out;
        const int64_t base = o * len * stride + in;
        std::iota(perm.begin(), perm.end(), 0);
        if (fast.has_value()) {
          ir::DispatchType(types[0], [&](auto tag) {
            using T = decltype(tag);
            using A = Accumulator<T>;
            const T* p = ops[0]->as<T>() + base;
            if (*fast == ir::ComparisonDirection::kLt) {
              MergeSort(perm, [&](int64_t a, int64_t b) {
                return static_cast<A>(p[a * stride]) < static_cast<A>(p[b * stride]);
              }, Cancelled);
            } else {
              MergeSort(perm, [&](int64_t a, int64_t b) {
                return static_cast<A>(p[a * stride]) > static_cast<A>(p[b * stride]);
              }, Cancelled);
            }
          });
        } else {
          std::vector<const uint8_t*> args(2 * n);
          uint8_t result = 0;
          MergeSort(perm, [&](int64_t a, int64_t b) {
            if (!status.ok()) return false;
            for (int k = 0; k < n; ++k) {
              const int size = ir::ElementTypeSize(types[k]);
              args[2 * k] = ops[k]->data() + (base + a * stride) * size;
              args[2 * k + 1] = ops[k]->data() + (base + b * stride) * size;
            }
            status = call->Call(st, args, {&result});
            return status.ok() && result != 0;
          }, Cancelled);
          RETURN_IF_ERROR(status);
        }
        for (int k = 0; k < n; ++k) {
          const int size = ir::ElementTypeSize(types[k]);
          const uint8_t* src = ops[k]->data();
          uint8_t* dst = outs[k]->data();
          for (int64_t i = 0; i < len; ++i) {
            std::memcpy(dst + (base + i * stride) * size,
                        src + (base + perm[i] * stride) * size, size);
          }
        }
      }
    }
    return out;
  });
}

}  // namespace kiln::host
