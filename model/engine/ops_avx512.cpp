// AVX-512 element-wise kernels (ops_kernels.h): ops_simd.inc on 8 doubles and 16 floats, twice
// the AVX2 width for SiTU, the sigmoid gates, SiLU, the norms' lane sums and the KDA token step.
// As in ops_avx2.cpp, only the table accessor is compiled outside the target region.
#include <cstring>

#include "model/engine/ops_kernels.h"

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused mask source.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

// GCC enables the ISA for the region; clang (the sanitizer build) for every function declared
// in it.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
#endif

namespace k3::model::engine::detail {
namespace {

using std::size_t;

using Doubles = __m512d;
constexpr size_t kLanes = 8;

[[gnu::always_inline]] inline Doubles set1(double v) { return _mm512_set1_pd(v); }
[[gnu::always_inline]] inline Doubles add(Doubles a, Doubles b) { return _mm512_add_pd(a, b); }
[[gnu::always_inline]] inline Doubles sub(Doubles a, Doubles b) { return _mm512_sub_pd(a, b); }
[[gnu::always_inline]] inline Doubles mul(Doubles a, Doubles b) { return _mm512_mul_pd(a, b); }
[[gnu::always_inline]] inline Doubles div(Doubles a, Doubles b) { return _mm512_div_pd(a, b); }
[[gnu::always_inline]] inline Doubles fmadd(Doubles a, Doubles b, Doubles c) {
  return _mm512_fmadd_pd(a, b, c);
}
[[gnu::always_inline]] inline Doubles min(Doubles a, Doubles b) { return _mm512_min_pd(a, b); }
[[gnu::always_inline]] inline Doubles max(Doubles a, Doubles b) { return _mm512_max_pd(a, b); }
[[gnu::always_inline]] inline Doubles bit_or(Doubles a, Doubles b) { return _mm512_or_pd(a, b); }
[[gnu::always_inline]] inline Doubles bit_and(Doubles a, Doubles b) { return _mm512_and_pd(a, b); }
[[gnu::always_inline]] inline Doubles bit_xor(Doubles a, Doubles b) { return _mm512_xor_pd(a, b); }
[[gnu::always_inline]] inline Doubles pow2(Doubles t) {
  const __m512i bits =
      _mm512_add_epi64(_mm512_castpd_si512(t), _mm512_set1_epi64(static_cast<long long>(kExpBias)));
  return _mm512_castsi512_pd(_mm512_slli_epi64(bits, 52));
}
[[gnu::always_inline]] inline Doubles widen(const float* p) {
  return _mm512_cvtps_pd(_mm256_loadu_ps(p));
}
[[gnu::always_inline]] inline void narrow(float* p, Doubles v) {
  _mm256_storeu_ps(p, _mm512_cvtpd_ps(v));
}
[[gnu::always_inline]] inline void store(double* p, Doubles v) { _mm512_storeu_pd(p, v); }

using Floats = __m512;
constexpr size_t kFloatLanes = 16;

[[gnu::always_inline]] inline Floats fset1(float v) { return _mm512_set1_ps(v); }
[[gnu::always_inline]] inline Floats fload(const float* p) { return _mm512_loadu_ps(p); }
[[gnu::always_inline]] inline void fstore(float* p, Floats v) { _mm512_storeu_ps(p, v); }
[[gnu::always_inline]] inline Floats fadd(Floats a, Floats b) { return _mm512_add_ps(a, b); }
[[gnu::always_inline]] inline Floats fsub(Floats a, Floats b) { return _mm512_sub_ps(a, b); }
[[gnu::always_inline]] inline Floats fmul(Floats a, Floats b) { return _mm512_mul_ps(a, b); }

#include "model/engine/ops_simd.inc"

}  // namespace
}  // namespace k3::model::engine::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace k3::model::engine::detail {
const MathKernels& avx512_math() {
  static const MathKernels table{situ, sigmoid, silu, tanh, lane_sums, scaled_add, kda_token};
  return table;
}
}  // namespace k3::model::engine::detail

#else  // not x86-64: no AVX-512 kernels.

namespace k3::model::engine::detail {
const MathKernels& avx512_math() {
  static const MathKernels table{};
  return table;
}
}  // namespace k3::model::engine::detail

#endif
