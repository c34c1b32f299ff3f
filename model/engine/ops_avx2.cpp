// AVX2 + FMA element-wise kernels (ops_kernels.h): ops_simd.inc on 4 doubles, and the KDA token
// step. The vector code is compiled in a `#pragma GCC target` region (the table accessor
// outside it), so nothing AVX2 runs before the cpuid check.
#include <cstring>

#include "model/engine/ops_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace k3::model::engine::detail {
namespace {

using std::size_t;

using Doubles = __m256d;
constexpr size_t kLanes = 4;

[[gnu::always_inline]] inline Doubles set1(double v) { return _mm256_set1_pd(v); }
[[gnu::always_inline]] inline Doubles add(Doubles a, Doubles b) { return _mm256_add_pd(a, b); }
[[gnu::always_inline]] inline Doubles sub(Doubles a, Doubles b) { return _mm256_sub_pd(a, b); }
[[gnu::always_inline]] inline Doubles mul(Doubles a, Doubles b) { return _mm256_mul_pd(a, b); }
[[gnu::always_inline]] inline Doubles div(Doubles a, Doubles b) { return _mm256_div_pd(a, b); }
[[gnu::always_inline]] inline Doubles fmadd(Doubles a, Doubles b, Doubles c) {
  return _mm256_fmadd_pd(a, b, c);
}
[[gnu::always_inline]] inline Doubles min(Doubles a, Doubles b) { return _mm256_min_pd(a, b); }
[[gnu::always_inline]] inline Doubles max(Doubles a, Doubles b) { return _mm256_max_pd(a, b); }
[[gnu::always_inline]] inline Doubles bit_or(Doubles a, Doubles b) { return _mm256_or_pd(a, b); }
[[gnu::always_inline]] inline Doubles bit_and(Doubles a, Doubles b) { return _mm256_and_pd(a, b); }
[[gnu::always_inline]] inline Doubles bit_xor(Doubles a, Doubles b) { return _mm256_xor_pd(a, b); }
[[gnu::always_inline]] inline Doubles pow2(Doubles t) {
  const __m256i bits = _mm256_add_epi64(_mm256_castpd_si256(t),
                                        _mm256_set1_epi64x(static_cast<long long>(kExpBias)));
  return _mm256_castsi256_pd(_mm256_slli_epi64(bits, 52));
}
[[gnu::always_inline]] inline Doubles widen(const float* p) {
  return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
[[gnu::always_inline]] inline void narrow(float* p, Doubles v) {
  _mm_storeu_ps(p, _mm256_cvtpd_ps(v));
}
[[gnu::always_inline]] inline void store(double* p, Doubles v) { _mm256_storeu_pd(p, v); }

#include "model/engine/ops_simd.inc"

// ops_scalar.cpp's kda_token, 32 value columns at a time (four vectors): the chunk's u and o
// stay in registers over the key rows, and its columns of S are swept twice while in L1. Each
// element sees the scalar operations in the scalar order; the last V % 32 columns go through
// the scalar kernel itself.
void kda_token(const float* S_in, float* S, size_t ld, size_t K, size_t V, const float* alpha,
               const float* k, const float* q, const float* v, float beta, float* u, float* o) {
  constexpr size_t kChunk = 32, kVecs = kChunk / 8;
  const size_t V32 = V / kChunk * kChunk;
  const __m256 b = _mm256_set1_ps(beta);
  for (size_t j0 = 0; j0 < V32; j0 += kChunk) {
    __m256 uv[kVecs], ov[kVecs];
    for (size_t c = 0; c < kVecs; ++c) uv[c] = ov[c] = _mm256_setzero_ps();
    for (size_t i = 0; i < K; ++i) {
      const float* in = S_in + i * ld + j0;
      float* row = S + i * ld + j0;
      const __m256 a = _mm256_set1_ps(alpha[i]), ki = _mm256_set1_ps(k[i]);
      for (size_t c = 0; c < kVecs; ++c) {
        const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(in + 8 * c), a);
        _mm256_storeu_ps(row + 8 * c, r);
        uv[c] = _mm256_add_ps(uv[c], _mm256_mul_ps(r, ki));
      }
    }
    for (size_t c = 0; c < kVecs; ++c) {
      uv[c] = _mm256_mul_ps(b, _mm256_sub_ps(_mm256_loadu_ps(v + j0 + 8 * c), uv[c]));
      _mm256_storeu_ps(u + j0 + 8 * c, uv[c]);
    }
    for (size_t i = 0; i < K; ++i) {
      float* row = S + i * ld + j0;
      const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
      for (size_t c = 0; c < kVecs; ++c) {
        const __m256 r = _mm256_add_ps(_mm256_loadu_ps(row + 8 * c), _mm256_mul_ps(ki, uv[c]));
        _mm256_storeu_ps(row + 8 * c, r);
        ov[c] = _mm256_add_ps(ov[c], _mm256_mul_ps(r, qi));
      }
    }
    for (size_t c = 0; c < kVecs; ++c) _mm256_storeu_ps(o + j0 + 8 * c, ov[c]);
  }
  if (V32 < V) {
    scalar_math().kda_token(S_in + V32, S + V32, ld, K, V - V32, alpha, k, q, v + V32, beta,
                            u + V32, o + V32);
  }
}

}  // namespace
}  // namespace k3::model::engine::detail

#pragma GCC pop_options

namespace k3::model::engine::detail {
const MathKernels& avx2_math() {
  static const MathKernels table{situ, sigmoid, silu, tanh, lane_sums, kda_token};
  return table;
}
}  // namespace k3::model::engine::detail

#else  // not x86-64: no AVX2 kernels, the scalar ones are used.

namespace k3::model::engine::detail {
const MathKernels& avx2_math() {
  static const MathKernels table{};
  return table;
}
}  // namespace k3::model::engine::detail

#endif
