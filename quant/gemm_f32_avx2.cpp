// AVX2 + FMA tile for gemm_f32_nn: gemm_f32_tile.inc on 8 floats, 6 rows x 16 columns of
// accumulators (12 ymm), one broadcast of a[r][p] per row and two loads of b[p][j .. j+15] per
// position, so 12 FMAs per 8 loads. The vector code is compiled in a `#pragma GCC target`
// region that includes nothing, so nothing AVX2 runs before the cpuid check.
#include "quant/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <utility>

// GCC enables the ISA for the region; clang (the sanitizer and fuzz builds) for every function
// declared in it.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace k3::quant::detail {
namespace {

using std::size_t;

using Floats = __m256;
using Mask = __m256i;
constexpr size_t kLanes = 8;
constexpr size_t kTileRows = 6;

[[gnu::always_inline]] inline Floats loadu(const float* p) { return _mm256_loadu_ps(p); }
[[gnu::always_inline]] inline void storeu(float* p, Floats v) { _mm256_storeu_ps(p, v); }
[[gnu::always_inline]] inline Floats load_masked(const float* p, Mask m) {
  return _mm256_maskload_ps(p, m);
}
[[gnu::always_inline]] inline void store_masked(float* p, Mask m, Floats v) {
  _mm256_maskstore_ps(p, m, v);
}
// Masked loads neither read nor fault on the other lanes.
[[gnu::always_inline]] inline Mask lane_mask(size_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}
[[gnu::always_inline]] inline Floats broadcast(const float* p) { return _mm256_broadcast_ss(p); }
[[gnu::always_inline]] inline Floats fmadd(Floats a, Floats b, Floats c) {
  return _mm256_fmadd_ps(a, b, c);
}

#include "quant/gemm_f32_tile.inc"

}  // namespace
}  // namespace k3::quant::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace k3::quant::detail {
GemmF32Kernel gemm_f32_avx2() {
  return {gemm_f32_rows<Tile>, Tile::kRows, Tile::kCols, 512, 16 * Tile::kRows};
}
}  // namespace k3::quant::detail

#else  // not x86-64: no AVX2 tile, the scalar one is used.

namespace k3::quant::detail {
GemmF32Kernel gemm_f32_avx2() { return {}; }
}  // namespace k3::quant::detail

#endif
