// AVX-512 tile for gemm_f32_nn: 12 rows x 32 columns of accumulators (24 zmm), one broadcast
// of a[r][p] per row and two loads of b[p][j .. j+31] per position, so 24 FMAs per 14 loads.
// Column remainders use mask registers. As in kernels_avx512.cpp the ISA is enabled per
// function, never for the whole file.
#include "quant/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <utility>

#define K3_TARGET_512 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define K3_512 __attribute__((target(K3_TARGET_512)))
#define K3_512_INLINE __attribute__((target(K3_TARGET_512), always_inline)) inline

// The register tile only lives in registers if its loops are unrolled before scalar
// replacement; otherwise GCC 12 also stores every accumulator to the stack on each position.
#define K3_UNROLL _Pragma("GCC unroll 32")

namespace k3::quant::detail {
namespace {

using std::size_t;

K3_512_INLINE __m512 load(const float* p, bool masked, __mmask16 mask) {
  return masked ? _mm512_maskz_loadu_ps(mask, p) : _mm512_loadu_ps(p);
}

// NV vectors of 16 columns; kMask: the last one has only the lanes of `mask`.
template <int MR, int NV, bool kMask>
K3_512 void tile(const float* panel, size_t ldp, float* const* c, size_t j0, const float* b,
                 size_t ldb, size_t count, __mmask16 mask) {
  __m512 acc[MR][NV];
  K3_UNROLL
  for (int r = 0; r < MR; ++r) {
    K3_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = load(c[r] + j0 + 16 * v, kMask && v == NV - 1, mask);
  }
  // Rows of the panel are `ldp` apart: one pointer per 4 rows, the others at +1..3 strides,
  // which x86 addressing reaches with two stride registers.
  constexpr int kGroups = (MR + 3) / 4;
  const float* ag[kGroups];
  K3_UNROLL
  for (int g = 0; g < kGroups; ++g) ag[g] = panel + 4 * g * ldp;
  const float* bp = b;
  for (size_t q = 0; q < count; ++q, bp += ldb) {
    __m512 bv[NV];
    K3_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = load(bp + 16 * v, kMask && v == NV - 1, mask);
    K3_UNROLL
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(ag[r / 4][(r % 4) * ldp + q]);
      K3_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  K3_UNROLL
  for (int r = 0; r < MR; ++r) {
    K3_UNROLL
    for (int v = 0; v < NV; ++v) {
      if (kMask && v == NV - 1) {
        _mm512_mask_storeu_ps(c[r] + j0 + 16 * v, mask, acc[r][v]);
      } else {
        _mm512_storeu_ps(c[r] + j0 + 16 * v, acc[r][v]);
      }
    }
  }
}

template <int MR>
K3_512 void tile_cols(const float* panel, size_t ldp, float* const* c, size_t j0, const float* b,
                      size_t ldb, size_t count, size_t width) {
  const size_t rem = width % 16;
  const auto mask = static_cast<__mmask16>((1u << rem) - 1);
  if (width == 32) return tile<MR, 2, false>(panel, ldp, c, j0, b, ldb, count, mask);
  if (width > 16) return tile<MR, 2, true>(panel, ldp, c, j0, b, ldb, count, mask);
  if (width == 16) return tile<MR, 1, false>(panel, ldp, c, j0, b, ldb, count, mask);
  tile<MR, 1, true>(panel, ldp, c, j0, b, ldb, count, mask);
}

struct Avx512Tile {
  static constexpr size_t kRows = 12;
  static constexpr size_t kCols = 32;

  template <size_t... R>
  static void dispatch(std::index_sequence<R...>, size_t nr, const float* panel, size_t ldp,
                       float* const* c, size_t j0, const float* b, size_t ldb, size_t count,
                       size_t width) {
    ((nr == R + 1 ? tile_cols<R + 1>(panel, ldp, c, j0, b, ldb, count, width) : void()), ...);
  }

  static void run(size_t nr, const float* panel, size_t ldp, float* const* c, size_t j0,
                  const float* b, size_t ldb, size_t count, size_t width) {
    dispatch(std::make_index_sequence<kRows>(), nr, panel, ldp, c, j0, b, ldb, count, width);
  }
};

}  // namespace

GemmF32Kernel gemm_f32_avx512() {
  return {gemm_f32_rows<Avx512Tile>, Avx512Tile::kRows, Avx512Tile::kCols, 512,
          8 * Avx512Tile::kRows};
}

}  // namespace k3::quant::detail

#else  // not x86-64: no AVX-512 tile.

namespace k3::quant::detail {
GemmF32Kernel gemm_f32_avx512() { return {}; }
}  // namespace k3::quant::detail

#endif
