// AVX-512 tile for gemm_f32_nn: gemm_f32_tile.inc on 16 floats, 12 rows x 32 columns of
// accumulators (24 zmm), one broadcast of a[r][p] per row and two loads of b[p][j .. j+31] per
// position, so 24 FMAs per 14 loads. Column remainders use mask registers. As in
// gemm_f32_avx2.cpp the vector code is compiled in a `#pragma GCC target` region.
#include "quant/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <utility>

// GCC enables the ISA for the region; clang (the sanitizer and fuzz builds) for every function
// declared in it.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

namespace k3::quant::detail {
namespace {

using std::size_t;

using Floats = __m512;
using Mask = __mmask16;
constexpr size_t kLanes = 16;
constexpr size_t kTileRows = 12;

[[gnu::always_inline]] inline Floats loadu(const float* p) { return _mm512_loadu_ps(p); }
[[gnu::always_inline]] inline void storeu(float* p, Floats v) { _mm512_storeu_ps(p, v); }
[[gnu::always_inline]] inline Floats load_masked(const float* p, Mask m) {
  return _mm512_maskz_loadu_ps(m, p);
}
[[gnu::always_inline]] inline void store_masked(float* p, Mask m, Floats v) {
  _mm512_mask_storeu_ps(p, m, v);
}
[[gnu::always_inline]] inline Mask lane_mask(size_t n) { return static_cast<Mask>((1u << n) - 1); }
[[gnu::always_inline]] inline Floats broadcast(const float* p) { return _mm512_set1_ps(*p); }
[[gnu::always_inline]] inline Floats fmadd(Floats a, Floats b, Floats c) {
  return _mm512_fmadd_ps(a, b, c);
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
GemmF32Kernel gemm_f32_avx512() {
  return {gemm_f32_rows<Tile>, Tile::kRows, Tile::kCols, 512, 8 * Tile::kRows};
}
}  // namespace k3::quant::detail

#else  // not x86-64: no AVX-512 tile.

namespace k3::quant::detail {
GemmF32Kernel gemm_f32_avx512() { return {}; }
}  // namespace k3::quant::detail

#endif
