// AVX2 + FMA element-wise kernels (ops_kernels.h): ops_simd.inc on 4 doubles and 8 floats. The
// vector code is compiled in a `#pragma GCC target` region (the table accessor outside it), so
// nothing AVX2 runs before the cpuid check.
#include <cstring>

#include "model/engine/ops_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC enables the ISA for the region; clang (the sanitizer build) for every function declared
// in it.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

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

using Floats = __m256;
constexpr size_t kFloatLanes = 8;

[[gnu::always_inline]] inline Floats fset1(float v) { return _mm256_set1_ps(v); }
[[gnu::always_inline]] inline Floats fload(const float* p) { return _mm256_loadu_ps(p); }
[[gnu::always_inline]] inline void fstore(float* p, Floats v) { _mm256_storeu_ps(p, v); }
[[gnu::always_inline]] inline Floats fadd(Floats a, Floats b) { return _mm256_add_ps(a, b); }
[[gnu::always_inline]] inline Floats fsub(Floats a, Floats b) { return _mm256_sub_ps(a, b); }
[[gnu::always_inline]] inline Floats fmul(Floats a, Floats b) { return _mm256_mul_ps(a, b); }

#include "model/engine/ops_simd.inc"

}  // namespace
}  // namespace k3::model::engine::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace k3::model::engine::detail {
const MathKernels& avx2_math() {
  static const MathKernels table{situ, sigmoid, silu, tanh, lane_sums, scaled_add, kda_token};
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
