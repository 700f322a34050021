// How tpusim stores arrays in HBM, and which element types it has.
//
// An array is stored in tiles of (rows, 128) elements: 8 rows for 32-bit
// types, 16 for 16-bit types (bf16), 32 for 8-bit types and pred. Layout
// assignment puts the tile on the two dimensions that waste least: one
// dimension goes to the 128 lanes and another to the rows, both padded to
// whole tiles, as XLA's TPU layout assignment moves a small feature
// dimension away from the lanes (an image's 3 channels would otherwise take
// 128). Ties keep the two minor dimensions (lanes minor). A rank-1 array of
// n elements is laid out as ceil(n/128) rows of 128; a scalar takes one
// row. Memory accounting and the cost model's HBM traffic count these
// padded sizes.
#ifndef KILN_RUNTIME_TPUSIM_LAYOUT_H_
#define KILN_RUNTIME_TPUSIM_LAYOUT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "compiler/ir/instruction.h"
#include "compiler/ir/shape.h"

namespace kiln::tpusim {

inline constexpr int64_t kLaneCount = 128;

// Rows of a tile for `type` (8, 16 or 32).
int64_t TileRows(ir::ElementType type);
// Elements an array occupies, padding included; 0 for tuples and tokens.
int64_t PaddedElements(const ir::Shape& shape);
// Bytes an array occupies, padding included; a tuple's is its elements' sum.
int64_t PaddedBytes(const ir::Shape& shape);

// OK when every array type in `shape` exists on a TPU: pred, s8, s16, s32,
// u8, u16, u32, bf16, f32. f64, s64, u64 and f16 do not.
absl::Status CheckTpuShape(const ir::Shape& shape);
// The same for every instruction of every computation in `module`; the
// error names the first instruction with a type a TPU lacks.
absl::Status CheckTpuTypes(const ir::Module& module);

}  // namespace kiln::tpusim

#endif  // KILN_RUNTIME_TPUSIM_LAYOUT_H_
