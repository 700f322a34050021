#include "runtime/tpusim/layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kiln::tpusim {
namespace {

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t CeilDiv(int64_t v, int64_t m) { return (v + m - 1) / m; }

}  // namespace

int64_t TileRows(ir::ElementType type) {
  switch (ir::ElementTypeSize(type)) {
    case 1: return 32;
    case 2: return 16;
    default: return 8;
  }
}

int64_t PaddedElements(const ir::Shape& shape) {
  if (!shape.IsArray()) return 0;
  const int64_t count = shape.ElementCount();
  if (count == 0) return 0;
  const int64_t tile_rows = TileRows(shape.type());
  const int rank = shape.rank();
  if (rank <= 1) {
    return RoundUp(CeilDiv(count, kLaneCount), tile_rows) * kLaneCount;
  }
  // The default pair first, so that ties keep it.
  int64_t best = count / (shape.dim(rank - 2) * shape.dim(rank - 1)) *
                 RoundUp(shape.dim(rank - 2), tile_rows) * RoundUp(shape.dim(rank - 1), kLaneCount);
  for (int lane = 0; lane < rank; ++lane) {
    for (int row = 0; row < rank; ++row) {
      if (row == lane) continue;
      const int64_t rest = count / (shape.dim(lane) * shape.dim(row));
      best = std::min(best, rest * RoundUp(shape.dim(row), tile_rows) *
                                RoundUp(shape.dim(lane), kLaneCount));
    }
  }
  return best;
}

int64_t PaddedBytes(const ir::Shape& shape) {
  if (shape.IsTuple()) {
    int64_t total = 0;
    for (const ir::Shape& s : shape.tuple_shapes()) total += PaddedBytes(s);
    return total;
  }
  if (!shape.IsArray()) return 0;
  return PaddedElements(shape) * ir::ElementTypeSize(shape.type());
}

absl::Status CheckTpuShape(const ir::Shape& shape) {
  if (shape.IsTuple()) {
    for (const ir::Shape& s : shape.tuple_shapes()) {
      absl::Status st = CheckTpuShape(s);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  switch (shape.type()) {
    case ir::ElementType::kF64:
      return absl::InvalidArgumentError("TPUs have no f64 (use f32)");
    case ir::ElementType::kS64:
    case ir::ElementType::kU64:
      return absl::InvalidArgumentError(absl::StrCat(
          "TPUs have no 64-bit integers (", ir::ElementTypeName(shape.type()),
          "; use s32 or u32)"));
    case ir::ElementType::kF16:
      return absl::InvalidArgumentError("TPUs have no f16 (use bf16)");
    default:
      return absl::OkStatus();
  }
}

absl::Status CheckTpuTypes(const ir::Module& module) {
  for (const auto& comp : module.computations()) {
    for (const auto& instr : comp->instructions()) {
      absl::Status st = CheckTpuShape(instr->shape());
      if (!st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tpusim cannot compile instruction ", instr->name(), " (",
            instr->shape().ToString(), " ", ir::OpcodeName(instr->opcode()), ") in ",
            comp->name(), ": ", st.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::tpusim
