// Internal: the per-ISA row kernels behind gemm(). Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/activations.h"
#include "quant/types.h"

namespace k3::quant::detail {

// A kernel computes, for one weight "unit" (one row; a packed pair of rows for MS_INT4) and
// activation rows a0 .. a0+na-1 (na <= kMaxActs), every dot product of the unit's rows with
// those activations: y[(a0 + i) * ldy + r] for each row r of the unit. The view, shapes and
// activation format have been validated by the caller.
using RowKernel = void (*)(const MatrixView& w, std::size_t unit, const ActView& a, std::size_t a0,
                           std::size_t na, float* y, std::size_t ldy);

inline constexpr std::size_t kMaxActs = 4;

// A RowKernel from a kernel templated on the activation count: `kKernel` is a stateless generic
// lambda []<int NA>(w, unit, a, a0, y, ldy) that calls it, and the count is chosen here, once
// per call. One definition serves every ISA's table.
template <auto kKernel>
void rows_by_count(const MatrixView& w, std::size_t unit, const ActView& a, std::size_t a0,
                   std::size_t na, float* y, std::size_t ldy) {
  static_assert(kMaxActs == 4, "one case per activation count");
  switch (na) {
    case 1:
      kKernel.template operator()<1>(w, unit, a, a0, y, ldy);
      return;
    case 2:
      kKernel.template operator()<2>(w, unit, a, a0, y, ldy);
      return;
    case 3:
      kKernel.template operator()<3>(w, unit, a, a0, y, ldy);
      return;
    default:
      kKernel.template operator()<4>(w, unit, a, a0, y, ldy);
      return;
  }
}

// Optional: all outputs of units [u0, u0 + nu) (nu <= kTileUnits) for activation rows
// [0, a.rows), with its own register blocking over rows and activations (and its own choice
// of path by batch size). Used instead of the row kernel when present.
using TileKernel = void (*)(const MatrixView& w, std::size_t u0, std::size_t nu, const ActView& a,
                            float* y, std::size_t ldy);

inline constexpr std::size_t kTileUnits = 16;

// Repacked views (MatrixView::interleave == kRepackRows): a TileKernel over rows
// [u0, u0 + nu) where u0 and nu are multiples of kRepackRows and all rows are in full groups.
//
// VNNI-order views (MatrixView::vnni): a TileKernel over rows [u0, u0 + nu) of whole 16-row
// groups, nu <= 16 * kVnniTileGroups (AVX-512 VNNI only; elsewhere the groups are unpacked).
//
// Activations: one row of `cols` floats into 32-element int8 blocks (ActFormat kQ8Block32 or,
// with even_odd, kQ8Block32EvenOdd), with the same bits as quantize_q8_32 in activations.cpp;
// the exact input sums (kQ8Block32Sums) only when xsum and row_xsum are not null.
using Q8Block32Quantizer = void (*)(const float* x, std::size_t cols, bool even_odd,
                                    std::int8_t* qs, float* d, std::int32_t* isum, float* xsum,
                                    float* row_xsum);

// One row into 256-element K-quant blocks (ActFormat kQ8K), with the same bits as
// quantize_q8_k in activations.cpp.
using Q8KQuantizer = void (*)(const float* x, std::size_t cols, std::int8_t* qs, float* d,
                              std::int16_t* bsums);

// Q2_K weights: the affine fits of one 256-element block's 16 sub-blocks (make_qkx2_quants,
// weights |x|, 16 grid steps), with the same bits as q2_k_fit in reference.cpp: the 256 codes
// L, each sub-block's scale and its minimum negated.
using Q2KFit = void (*)(const float* x, std::uint8_t* L, float* scales, float* neg_mins);

// Q8_0 weights: one 32-element block (scale and codes), with the same bits as quant_q8_0 in
// reference.cpp.
using Q8_0Block = void (*)(const float* x, std::uint8_t* block);

struct KernelTable {
  RowKernel row[kTypeCount] = {};
  TileKernel tile[kTypeCount] = {};
  TileKernel repacked[kTypeCount] = {};
  TileKernel vnni[kTypeCount] = {};
  Q8Block32Quantizer q8_block32 = nullptr;
  Q8KQuantizer q8_k = nullptr;
  Q2KFit q2_k_fit = nullptr;
  Q8_0Block q8_0_block = nullptr;
};

inline constexpr std::size_t kVnniTileGroups = 8;

inline std::size_t rows_per_unit(Type t) { return t == Type::kModelSlimInt4 ? 2 : 1; }

// Start of row `row` of a block format with compile-time geometry (no runtime division in the
// per-row path).
template <std::size_t kElems, std::size_t kBytes>
inline const std::uint8_t* block_row(const MatrixView& w, std::size_t row) {
  return w.data.data() + row * (w.cols / kElems * kBytes);
}

// Rows [row0, row0 + nrows) of a repacked view (whole groups) unpacked into a per-thread plain
// copy, then through `tile` where it is not null, else through `row`: the plain matrix's bits.
void run_unpacked(const MatrixView& w, std::size_t row0, std::size_t nrows, const ActView& a,
                  float* y, std::size_t ldy, RowKernel row, TileKernel tile);

// ModelSlim: a row's and a group's offset (0 where the checkpoint has none), and the 32-blocks
// of an MS_INT4 scale group (a whole row of `blocks` in per-channel mode).
inline float ms_offset(const MatrixView& w, std::size_t row) {
  return w.offset.empty() ? 0.0f : w.offset[row];
}
inline float ms_group_offset(const MatrixView& w, std::size_t i) {
  return w.group_offset.empty() ? 0.0f : w.group_offset[i];
}
inline std::size_t ms_blocks_per_group(const MatrixView& w, std::size_t blocks) {
  return w.group_size == 0 ? blocks : w.group_size / 32;
}

// Packed row `unit` of an MS_INT4 matrix against activations of `blocks` 32-blocks: its bytes,
// its two rows (r0 = 2 unit from the low nibbles, r1 = 2 unit + 1 from the high ones), the
// 32-blocks per scale group and the group count.
struct MsInt4Unit {
  const std::uint8_t* p;
  std::size_t r0, r1, bpg, groups;
  MsInt4Unit(const MatrixView& w, std::size_t unit, std::size_t blocks)
      : p(w.data.data() + unit * w.cols),
        r0(2 * unit),
        r1(2 * unit + 1),
        bpg(ms_blocks_per_group(w, blocks)),
        groups(blocks / bpg) {}
};

// Tables are complete for scalar; a null entry in a SIMD table falls back to the next lower ISA.
const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();
const KernelTable& amx_kernels();  // only the entries where tiles beat the AVX-512 kernels

}  // namespace k3::quant::detail
