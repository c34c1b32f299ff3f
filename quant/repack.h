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
// results as on the original matrix up to float summation order; the VNNI order below gives
// them bit for bit (its kernels keep the plain layout's block order).
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

// The VNNI order: groups of 16 rows whose super-blocks hold each row's codes 4 at a time, one
// 32-bit lane per row, the layout x86 vpdpbusd consumes directly (the weight-side twin of
// ActView::qs16). A batch-1 kernel keeps one int32 accumulator lane per row and applies the 16
// scales once per block: no horizontal sums, no scale shuffles. For group g and block b the
// super-block at byte (g * blocks + b) * 16 * block_bytes holds
//   Q4_0: 4 chunks of 64 bytes; in chunk p, byte 4r + j of row r is code(8p + j) | code(8p +
//         4 + j) << 4, code(e) being the stored nibble (value + 8) of element e of the block;
//         then the 16 f16 scales (256 + 32 = 16 x 18 bytes);
//   Q8_0: 8 chunks of 64 bytes; in chunk k, byte 4r + j is code(4k + j) + 128 (as unsigned);
//         then the 16 f16 scales (512 + 32 = 16 x 34 bytes).
// The K-quants keep their bits per code but are regrouped so that a batch-1 kernel decodes a
// block's codes and scales once for 16 rows (one lane per row) instead of once per row. Code e
// of a 256-block is read through sub-block t = e / 16 and e = 16 t + 4 s + j (quad s, byte j):
//   Q2_K (16 x 84 bytes): 16 code chunks of 64 bytes, in chunk t byte 4r + j of row r holding
//         code(16t + 4s + j) at bits 2s..2s+1 (s = 0..3); 4 scale chunks, chunk k holding ggml's
//         scale bytes 4k, 4k+2, 4k+1, 4k+3 of row r at 4r (so each 16-bit word pairs sub-blocks
//         2p and 2p+1); the 16 f16 d; the 16 f16 dmin.
//   Q3_K (16 x 110 bytes): the low 2 bits of the codes as Q2_K's; 64 high-bit masks of 8 bytes,
//         one per quad q = 4t + s, bit 4r + j the high bit of row r's element 4q + j (a kernel
//         loads it straight into a mask register); 3 scale
//         chunks A, B, C of the 6-bit scales v = ggml's code XOR 32 (so a sign-extended 6-bit
//         read gives the scale's value, code - 32): with S_k byte i = v(4k + {0, 2, 1, 3}[i]),
//         A = lo4(S_0) | lo4(S_1) << 4, B = lo4(S_2) | lo4(S_3) << 4 and C = hi2(S_0) |
//         hi2(S_1) << 2 | hi2(S_2) << 4 | hi2(S_3) << 6, byte by byte; the 16 f16 d.
// The offsets of those fields are layout::kQ2KVnni* and kQ3KVnni* (quant/blocks.h).
// The last rows % 16 rows follow in the plain layout; the byte count is unchanged.
inline constexpr std::size_t kVnniRows = 16;

// Types with a VNNI-order layout: Q8_0, Q4_0, Q2_K, Q3_K.
bool can_repack_vnni(Type type);

// Owns the repacked bytes of one matrix.
struct Repacked {
  Type type = Type::kF32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t interleave = 0;
  bool vnni = false;
  std::vector<std::uint8_t> data;

  MatrixView view() const;
};

// Repacks a plain view (interleave 0) by `rows_per_group` (2..16) rows. Throws InputError for
// a type without a repacked layout or an already repacked view.
Repacked repack(const MatrixView& w, std::size_t rows_per_group = kRepackRows);

// Repacks a plain view into the VNNI order (interleave 16, vnni set). Throws InputError for a
// type without that layout or an already repacked view.
Repacked repack_vnni(const MatrixView& w);

// The plain (checkpoint layout) data bytes of a view, repacked or not.
std::vector<std::uint8_t> unpack(const MatrixView& w);

// Rows [first, first + count) of a view in the plain layout, written to dst
// (count * row_bytes(w.type, w.cols) bytes), for a view of a repackable type, repacked or not.
void unpack_rows(const MatrixView& w, std::size_t first, std::size_t count, std::uint8_t* dst);

}  // namespace k3::quant
