// Internal: the x86 helpers that the AVX2 (kernels_avx2.cpp) and AVX-512 (kernels_avx512*.cpp)
// kernel files share. They are compiled for AVX2, a subset of the AVX-512 kernels' target, so
// AVX-512 functions inline them as well; as everywhere in quant/, the ISA is enabled per
// function with a target attribute, so nothing here can run before the cpuid check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#define K3_AVX2 __attribute__((target("avx2,fma,f16c")))
#define K3_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace k3::quant::detail {

// Weights stream from DRAM once per call. Hardware prefetch alone leaves too few misses in
// flight for the slow-consuming integer kernels (measured: Q4_0 GEMV at 25% of read bandwidth
// without this), so every kernel prefetches its own weight stream this far ahead, into L2:
// prefetching into L1 holds line-fill buffers and measured 5-15% slower.
inline constexpr std::size_t kPrefetchBytes = 4096;

K3_AVX2_INLINE void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1);
}

// Every line of `bytes` at p, kPrefetchBytes ahead: the batch-1 GEMV over a group of repacked
// rows reads one super-block per step. Measured on the development host (AVX-512, 1 GiB
// rotation): 4 KiB ahead into L2 is best; 2 KiB, 8-16 KiB, or L1 (T0) prefetch were 5-15 %
// slower, and no software prefetch ~25 % slower.
K3_AVX2_INLINE void prefetch_block(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes + o, _MM_HINT_T1);
}

K3_AVX2_INLINE __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
K3_AVX2_INLINE __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// The 16 signed 6-bit Q3_K scales (minus 32) from their 12 packed bytes: low nibbles are
// p[j] & 15 (j < 8) and p[j-8] >> 4 (j >= 8); the top two bits of scale j sit in
// p[8 + j % 4] at bit 2 * (j / 4).
K3_AVX2_INLINE __m128i q3_k_scales(const std::uint8_t* p) {
  std::uint64_t lo;
  std::uint32_t hi;
  std::memcpy(&lo, p, sizeof lo);
  std::memcpy(&hi, p + 8, sizeof hi);
  const __m128i v = _mm_cvtsi64_si128(static_cast<long long>(lo));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m128i low =
      _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  const __m128i top = _mm_and_si128(
      _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(hi)), _mm_setr_epi32(0, 2, 4, 6)),
      _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
}

}  // namespace k3::quant::detail

#endif
