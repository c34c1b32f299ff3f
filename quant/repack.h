// Optional row-interleaved repacking of a weight matrix, produced once at load time.
//
// GEMV on the checkpoint layout reads R rows as R separate streams. After repack(), the blocks
// of R consecutive rows are interleaved block by block, so one sequential stream feeds R dot
// products (what the kernels' prefetch and the hardware prefetchers handle best). For group g
// (rows gR .. gR+R-1) and block b, the "super-block" at byte (g * blocks + b) * R * block_bytes
// holds the R block scales (f16 d, or the E8M0 byte for MXFP4) of rows gR .. gR+R-1, then
// their R quant payloads (32 int8 / 16 nibble bytes each), every field unchanged from ggml's
// block. The last rows % R rows follow in the plain layout. The byte count is unchanged.
//
// The repacked view is an ordinary MatrixView with `interleave == R`: gemv/gemm/dot/
// dequantize/row_slice accept it (row_slice only on group boundaries) and give the same
// results as on the original matrix up to float summation order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "quant/types.h"

namespace k3::quant {

// Rows per group the SIMD kernels are written for.
inline constexpr std::size_t kRepackRows = 4;

// Types with a repacked layout: Q8_0, Q4_0, MXFP4 (ggml blocks).
bool can_repack(Type type);

// Owns the repacked bytes of one matrix.
struct Repacked {
  Type type = Type::kF32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t interleave = 0;
  std::vector<std::uint8_t> data;

  MatrixView view() const;
};

// Repacks a plain view (interleave 0) by `rows_per_group` (2..16) rows. Throws InputError for
// a type without a repacked layout or an already repacked view.
Repacked repack(const MatrixView& w, std::size_t rows_per_group = kRepackRows);

// The plain (checkpoint layout) data bytes of a view, repacked or not.
std::vector<std::uint8_t> unpack(const MatrixView& w);

// Rows [first, first + count) of a view in the plain layout, written to dst
// (count * row_bytes(w.type, w.cols) bytes), for a Q8_0/Q4_0/MXFP4 view, repacked or not.
void unpack_rows(const MatrixView& w, std::size_t first, std::size_t count, std::uint8_t* dst);

}  // namespace k3::quant
