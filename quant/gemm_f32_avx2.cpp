// AVX2 + FMA tile for gemm_f32_nn: 6 rows x 16 columns of accumulators (12 ymm), one
// broadcast of a[r][p] per row and two loads of b[p][j .. j+15] per position, so 12 FMAs per
// 8 loads. As in kernels_avx2.cpp the ISA is enabled per function, never for the whole file.
#include "quant/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#define K3_AVX2 __attribute__((target("avx2,fma,f16c")))
#define K3_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

// The register tile only lives in registers if its loops are unrolled before scalar
// replacement; otherwise GCC 12 also stores every accumulator to the stack on each position.
#define K3_UNROLL _Pragma("GCC unroll 32")

namespace k3::quant::detail {
namespace {

using std::size_t;

// Lanes < n set (n in 1..8): masked loads neither read nor fault on the other lanes.
K3_AVX2_INLINE __m256i lane_mask(size_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

template <bool kMasked>
K3_AVX2_INLINE __m256 load(const float* p, __m256i mask) {
  return kMasked ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p);
}

// NV vectors of 8 columns; kMask: the last one is partial (mask).
template <int MR, int NV, bool kMask>
K3_AVX2 void tile(const float* panel, size_t ldp, float* const* c, size_t j0, const float* b,
                  size_t ldb, size_t count, __m256i mask) {
  __m256 acc[MR][NV];
  K3_UNROLL
  for (int r = 0; r < MR; ++r) {
    K3_UNROLL
    for (int v = 0; v < NV; ++v) {
      acc[r][v] =
          v == NV - 1 ? load<kMask>(c[r] + j0 + 8 * v, mask) : load<false>(c[r] + j0 + 8 * v, mask);
    }
  }
  // Rows of the panel are `ldp` apart: one pointer per 4 rows, the others at +1..3 strides.
  constexpr int kGroups = (MR + 3) / 4;
  const float* ag[kGroups];
  K3_UNROLL
  for (int g = 0; g < kGroups; ++g) ag[g] = panel + 4 * g * ldp;
  const float* bp = b;
  for (size_t q = 0; q < count; ++q, bp += ldb) {
    __m256 bv[NV];
    K3_UNROLL
    for (int v = 0; v < NV; ++v) {
      bv[v] = v == NV - 1 ? load<kMask>(bp + 8 * v, mask) : load<false>(bp + 8 * v, mask);
    }
    K3_UNROLL
    for (int r = 0; r < MR; ++r) {
      const __m256 x = _mm256_broadcast_ss(ag[r / 4] + (r % 4) * ldp + q);
      K3_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  K3_UNROLL
  for (int r = 0; r < MR; ++r) {
    K3_UNROLL
    for (int v = 0; v < NV; ++v) {
      if (kMask && v == NV - 1) {
        _mm256_maskstore_ps(c[r] + j0 + 8 * v, mask, acc[r][v]);
      } else {
        _mm256_storeu_ps(c[r] + j0 + 8 * v, acc[r][v]);
      }
    }
  }
}

template <int MR>
K3_AVX2 void tile_cols(const float* panel, size_t ldp, float* const* c, size_t j0, const float* b,
                       size_t ldb, size_t count, size_t width) {
  const size_t rem = width % 8;
  const __m256i mask = lane_mask(rem == 0 ? 8 : rem);
  if (width == 16) return tile<MR, 2, false>(panel, ldp, c, j0, b, ldb, count, mask);
  if (width > 8) return tile<MR, 2, true>(panel, ldp, c, j0, b, ldb, count, mask);
  if (width == 8) return tile<MR, 1, false>(panel, ldp, c, j0, b, ldb, count, mask);
  tile<MR, 1, true>(panel, ldp, c, j0, b, ldb, count, mask);
}

struct Avx2Tile {
  static constexpr size_t kRows = 6;
  static constexpr size_t kCols = 16;

  static void run(size_t nr, const float* panel, size_t ldp, float* const* c, size_t j0,
                  const float* b, size_t ldb, size_t count, size_t width) {
    switch (nr) {
      case 1:
        return tile_cols<1>(panel, ldp, c, j0, b, ldb, count, width);
      case 2:
        return tile_cols<2>(panel, ldp, c, j0, b, ldb, count, width);
      case 3:
        return tile_cols<3>(panel, ldp, c, j0, b, ldb, count, width);
      case 4:
        return tile_cols<4>(panel, ldp, c, j0, b, ldb, count, width);
      case 5:
        return tile_cols<5>(panel, ldp, c, j0, b, ldb, count, width);
      default:
        return tile_cols<6>(panel, ldp, c, j0, b, ldb, count, width);
    }
  }
};

}  // namespace

GemmF32Kernel gemm_f32_avx2() {
  return {gemm_f32_rows<Avx2Tile>, Avx2Tile::kRows, Avx2Tile::kCols, 512, 16 * Avx2Tile::kRows};
}

}  // namespace k3::quant::detail

#else  // not x86-64: no AVX2 tile, the scalar one is used.

namespace k3::quant::detail {
GemmF32Kernel gemm_f32_avx2() { return {}; }
}  // namespace k3::quant::detail

#endif
