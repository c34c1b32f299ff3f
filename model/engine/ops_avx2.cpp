// AVX2 + FMA element-wise kernels (ops_kernels.h): 8 floats per step, widened to two vectors
// of 4 doubles. Every function carries a target attribute instead of the file being compiled
// with -mavx2 (as in quant/kernels_avx2.cpp), so nothing AVX2 runs before the cpuid check.
#include <cstring>

#include "model/engine/ops_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define K3_AVX2 __attribute__((target("avx2,fma")))
#define K3_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace k3::model::engine::detail {
namespace {

using std::size_t;

K3_AVX2_INLINE __m256d set1(double v) { return _mm256_set1_pd(v); }

// ops_scalar.cpp's expm1_clamped, instruction for instruction.
K3_AVX2_INLINE __m256d expm1_clamped(__m256d x, double limit) {
  x = _mm256_min_pd(set1(limit), _mm256_max_pd(set1(-limit), x));
  const __m256d t = _mm256_fmadd_pd(x, set1(kLog2e), set1(kShifter));
  const __m256d n = _mm256_sub_pd(t, set1(kShifter));
  __m256d r = _mm256_fmadd_pd(n, set1(-kLn2Hi), x);
  r = _mm256_fmadd_pd(n, set1(-kLn2Lo), r);
  __m256d p = set1(kExpC[7]);
  for (int i = 6; i >= 0; --i) p = _mm256_fmadd_pd(p, r, set1(kExpC[i]));
  const __m256d q = _mm256_fmadd_pd(_mm256_mul_pd(r, r), p, r);
  const __m256i bits = _mm256_add_epi64(_mm256_castpd_si256(t),
                                        _mm256_set1_epi64x(static_cast<long long>(kExpBias)));
  const __m256d s = _mm256_castsi256_pd(_mm256_slli_epi64(bits, 52));
  const __m256d e = _mm256_fmadd_pd(s, q, _mm256_sub_pd(s, set1(1.0)));
  const __m256d sign = _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(kSignBit)));
  return _mm256_or_pd(e, _mm256_and_pd(x, sign));
}

K3_AVX2_INLINE __m256d neg(__m256d x) {
  return _mm256_xor_pd(x,
                       _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(kSignBit))));
}

K3_AVX2_INLINE __m128 situ4(__m128 g4, __m128 u4, const SituParams& p) {
  const __m256d g = _mm256_cvtps_pd(g4), u = _mm256_cvtps_pd(u4);
  const __m256d eg = expm1_clamped(_mm256_mul_pd(g, set1(p.g_scale)), kTanhLimit);
  const __m256d es = expm1_clamped(neg(g), kExpLimit);
  const __m256d eu = expm1_clamped(_mm256_mul_pd(u, set1(p.u_scale)), kTanhLimit);
  const __m256d two = set1(2.0);
  const __m256d num = _mm256_mul_pd(_mm256_mul_pd(set1(p.scale), eg), eu);
  const __m256d den = _mm256_mul_pd(_mm256_mul_pd(_mm256_add_pd(eg, two), _mm256_add_pd(eu, two)),
                                    _mm256_add_pd(es, two));
  return _mm256_cvtpd_ps(_mm256_div_pd(num, den));
}

K3_AVX2_INLINE __m128 sigmoid4(__m128 x4) {
  const __m256d e = expm1_clamped(neg(_mm256_cvtps_pd(x4)), kExpLimit);
  return _mm256_cvtpd_ps(_mm256_div_pd(set1(1.0), _mm256_add_pd(e, set1(2.0))));
}

K3_AVX2_INLINE __m128 silu4(__m128 x4) {
  const __m256d x = _mm256_cvtps_pd(x4);
  const __m256d e = expm1_clamped(neg(x), kExpLimit);
  return _mm256_cvtpd_ps(_mm256_div_pd(x, _mm256_add_pd(e, set1(2.0))));
}

K3_AVX2_INLINE __m128 tanh4(__m128 x4) {
  const __m256d e = expm1_clamped(_mm256_mul_pd(_mm256_cvtps_pd(x4), set1(2.0)), kTanhLimit);
  return _mm256_cvtpd_ps(_mm256_div_pd(e, _mm256_add_pd(e, set1(2.0))));
}

K3_AVX2_INLINE __m128 lo(__m256 v) { return _mm256_castps256_ps128(v); }
K3_AVX2_INLINE __m128 hi(__m256 v) { return _mm256_extractf128_ps(v, 1); }
K3_AVX2_INLINE __m256 join(__m128 l, __m128 h) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(l), h, 1);
}

// The last n % 8 elements go through the same 8-wide step on a zero-padded copy, so an
// element's bits do not depend on its position or the array's length.
K3_AVX2 void situ(float* gate, const float* up, size_t n, const SituParams& p) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
    _mm256_storeu_ps(gate + i, join(situ4(lo(g), lo(u), p), situ4(hi(g), hi(u), p)));
  }
  if (i < n) {
    alignas(32) float gb[8] = {}, ub[8] = {};
    std::memcpy(gb, gate + i, (n - i) * sizeof(float));
    std::memcpy(ub, up + i, (n - i) * sizeof(float));
    const __m256 g = _mm256_load_ps(gb), u = _mm256_load_ps(ub);
    _mm256_store_ps(gb, join(situ4(lo(g), lo(u), p), situ4(hi(g), hi(u), p)));
    std::memcpy(gate + i, gb, (n - i) * sizeof(float));
  }
}

template <__m128 (*F)(__m128)>
K3_AVX2_INLINE void unary(float* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, join(F(lo(v)), F(hi(v))));
  }
  if (i < n) {
    alignas(32) float b[8] = {};
    std::memcpy(b, x + i, (n - i) * sizeof(float));
    const __m256 v = _mm256_load_ps(b);
    _mm256_store_ps(b, join(F(lo(v)), F(hi(v))));
    std::memcpy(x + i, b, (n - i) * sizeof(float));
  }
}

K3_AVX2 void sigmoid(float* x, size_t n) { unary<sigmoid4>(x, n); }
K3_AVX2 void silu(float* x, size_t n) { unary<silu4>(x, n); }
K3_AVX2 void tanh(float* x, size_t n) { unary<tanh4>(x, n); }

// ops_scalar.cpp's lane_sums: lanes 0-3 and 4-7 as two vectors, mul then add as there.
K3_AVX2 void lane_sums(const float* x, const float* w, size_t n, double* sq, double* dot) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, d0 = s0, d1 = s0;
  size_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    const __m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    s0 = _mm256_add_pd(s0, _mm256_mul_pd(x0, x0));
    s1 = _mm256_add_pd(s1, _mm256_mul_pd(x1, x1));
    if (w != nullptr) {
      d0 = _mm256_add_pd(d0, _mm256_mul_pd(x0, _mm256_cvtps_pd(_mm_loadu_ps(w + i))));
      d1 = _mm256_add_pd(d1, _mm256_mul_pd(x1, _mm256_cvtps_pd(_mm_loadu_ps(w + i + 4))));
    }
  }
  _mm256_storeu_pd(sq, s0);
  _mm256_storeu_pd(sq + 4, s1);
  _mm256_storeu_pd(dot, d0);
  _mm256_storeu_pd(dot + 4, d1);
  for (size_t l = 0; i < n; ++i, ++l) {  // the tail: element i is in lane l = i mod 8
    const double v = x[i];
    sq[l] += v * v;
    if (w != nullptr) dot[l] += v * double(w[i]);
  }
}

// ops_scalar.cpp's kda_token, 32 value columns at a time (four vectors): the chunk's u and o
// stay in registers over the key rows, and its columns of S are swept twice while in L1. Each
// element sees the scalar operations in the scalar order; the last V % 32 columns go through
// the scalar kernel itself.
K3_AVX2 void kda_token(const float* S_in, float* S, size_t ld, size_t K, size_t V,
                       const float* alpha, const float* k, const float* q, const float* v,
                       float beta, float* u, float* o) {
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
