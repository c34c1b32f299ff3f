// AVX-512 kernels of F32, F16 and BF16 weights against fp32 activations: the row kernel
// (kernels_float.inc, shared with AVX2) and the tile kernel, which serves every batch: a GEMV
// over 8 rows read as 8 streams at batch 1, register blocks of 4 weight rows x 4 activation
// rows beyond. Each element is added in one order per row, so the bits do not depend on the
// batch or the path.
#include <cstdint>

#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

namespace k3::quant::detail::avx512 {
namespace {

template <Type T>
K3_512_INLINE __m512 load_w(const uint8_t* p) {
  if constexpr (T == Type::kF32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == Type::kF16) {
    return _mm512_cvtph_ps(load256(p));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
  }
}
template <Type T>
K3_512_INLINE __m512 load_w_masked(const uint8_t* p, __mmask16 m) {
  if constexpr (T == Type::kF32) {
    return _mm512_maskz_loadu_ps(m, p);
  } else if constexpr (T == Type::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  } else {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
}

using Floats = __m512;
constexpr size_t kLanes = 16;

K3_512_INLINE Floats fload(const float* p) { return _mm512_loadu_ps(p); }
K3_512_INLINE Floats fmadd(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }

// The last elements as one masked step into acc0, then the sum of both accumulators.
template <Type T>
K3_512_INLINE float finish_row(Floats acc0, Floats acc1, const uint8_t* p, const float* x,
                               size_t left) {
  if (left > 0) {
    const auto m = static_cast<__mmask16>((1u << left) - 1u);
    acc0 = _mm512_fmadd_ps(load_w_masked<T>(p, m), _mm512_maskz_loadu_ps(m, x), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

}  // namespace

#define K3_SIMD K3_512
#include "quant/kernels_float.inc"
#undef K3_SIMD

namespace {

// R weight rows x NA activation rows of fp32 work: R*NA accumulators, each weight vector
// loaded once per NA activations and each activation vector once per R rows.
template <Type T, int R, int NA>
K3_512 void float_block(const MatrixView& w, size_t r0, const ActView& a, size_t a0, float* y,
                        size_t ldy) {
  constexpr size_t kEs = T == Type::kF32 ? 4 : 2;
  const size_t n = w.cols;
  const uint8_t* p[R];
  const float* x[NA];
  for (int r = 0; r < R; ++r) p[r] = block_row<1, kEs>(w, r0 + r);
  for (int i = 0; i < NA; ++i) x[i] = a.f32 + (a0 + i) * a.cols;
  __m512 acc[R][NA];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NA; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  // The next R rows at the same offsets (rows are short next to a prefetch distance), on the
  // first activation pass only, and not past the matrix.
  const size_t next = r0 + 2 * R <= w.rows && a0 == 0 ? R * n * kEs : 0;
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) {
      if (next != 0 && k % (64 / kEs) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(p[r] + kEs * k + next), _MM_HINT_T1);
      wv[r] = load_w<T>(p[r] + kEs * k);
    }
    for (int i = 0; i < NA; ++i) {
      const __m512 xv = _mm512_loadu_ps(x[i] + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  if (k < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1u);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_w_masked<T>(p[r] + kEs * k, m);
    for (int i = 0; i < NA; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[i] + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int i = 0; i < NA; ++i) {
    for (int r = 0; r < R; ++r) y[(a0 + i) * ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][i]);
  }
}

// Batch 1 on R rows read as R streams, one 64-byte line per row per step with one prefetch
// each (kFloatPrefetch ahead); one accumulator per row added in the order of float_block, so
// the bits do not depend on the path.
inline constexpr size_t kFloatPrefetch = 2048;

template <Type T, int R>
K3_512 void float_gemv(const MatrixView& w, size_t r0, const ActView& a, float* y) {
  constexpr size_t kEs = T == Type::kF32 ? 4 : 2;
  constexpr size_t kStep = 64 / kEs;  // elements per line
  const size_t n = w.cols;
  const uint8_t* p[R];
  for (int r = 0; r < R; ++r) p[r] = block_row<1, kEs>(w, r0 + r);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + kStep <= n; k += kStep) {
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(p[r] + kEs * k) + kFloatPrefetch, _MM_HINT_T1);
      for (size_t h = 0; h < kStep; h += 16)
        acc[r] = _mm512_fmadd_ps(load_w<T>(p[r] + kEs * (k + h)), _mm512_loadu_ps(a.f32 + k + h),
                                 acc[r]);
    }
  }
  for (; k < n; k += 16) {
    const size_t left = n - k;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(m, a.f32 + k);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(load_w_masked<T>(p[r] + kEs * k, m), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) y[r0 + r] = _mm512_reduce_add_ps(acc[r]);
}

// Rows in groups of 4 (then 1), activations in groups of 4 (then 1..3).
template <Type T, int R>
K3_512 void float_rows(const MatrixView& w, size_t r0, const ActView& a, float* y, size_t ldy) {
  size_t a0 = 0;
  for (; a0 + 4 <= a.rows; a0 += 4) float_block<T, R, 4>(w, r0, a, a0, y, ldy);
  switch (a.rows - a0) {
    case 1:
      float_block<T, R, 1>(w, r0, a, a0, y, ldy);
      break;
    case 2:
      float_block<T, R, 2>(w, r0, a, a0, y, ldy);
      break;
    case 3:
      float_block<T, R, 3>(w, r0, a, a0, y, ldy);
      break;
    default:
      break;
  }
}

template <Type T>
K3_512 void float_tile(const MatrixView& w, size_t u0, size_t nu, const ActView& a, float* y,
                       size_t ldy) {
  size_t r = u0;
  if (a.rows == 1) {
    for (; r + 8 <= u0 + nu; r += 8) float_gemv<T, 8>(w, r, a, y);
  }
  for (; r + 4 <= u0 + nu; r += 4) float_rows<T, 4>(w, r, a, y, ldy);
  for (; r < u0 + nu; ++r) float_rows<T, 1>(w, r, a, y, ldy);
}

}  // namespace

K3_AVX512_ROWS(row_float_n, Type::kF32);
K3_AVX512_ROWS(row_float_n, Type::kF16);
K3_AVX512_ROWS(row_float_n, Type::kBF16);

void add_float_tiles(KernelTable& t) {
  t.tile[static_cast<size_t>(Type::kF32)] = float_tile<Type::kF32>;
  t.tile[static_cast<size_t>(Type::kF16)] = float_tile<Type::kF16>;
  t.tile[static_cast<size_t>(Type::kBF16)] = float_tile<Type::kBF16>;
}

}  // namespace k3::quant::detail::avx512

#endif
