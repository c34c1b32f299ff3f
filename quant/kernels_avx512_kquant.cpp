// AVX-512 kernels of the K-quants Q2_K and Q3_K against Q8_K activations (256-element
// super-blocks, 16 sub-block scales): the row kernels, and Q2_K's GEMM tile on the 16-row
// interleaved activations. Per block the exact integer sums, added in block order into one
// float accumulator each (README.md, "Block order"), as the VNNI-order kernels
// (kernels_avx512_vnni.cpp) add them too.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quant/fp.h"
#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

namespace k3::quant::detail::avx512 {
namespace {

// Word indices that spread 4 consecutive sub-block scales j0..j0+3 over the four 128-bit
// lanes of a zmm (8 words each).
K3_512_INLINE __m512i scale_index(short j0) {
  const short a = j0, b = static_cast<short>(j0 + 1), c = static_cast<short>(j0 + 2),
              d = static_cast<short>(j0 + 3);
  return _mm512_set_epi16(d, d, d, d, d, d, d, d, c, c, c, c, c, c, c, c, b, b, b, b, b, b, b, b, a,
                          a, a, a, a, a, a, a);
}

// A Q2_K block's 16 sub-block scales as words (low 256 bits of a zmm, for scale_index) and its
// 16 mins as words.
struct Q2KScales {
  __m512i sc16;
  __m256i mins;
};
K3_512_INLINE Q2KScales q2_k_scales(const uint8_t* blk) {
  const __m128i sc8 = load128(blk + layout::kQ2KScales);
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return {_mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4))),
          _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4))};
}

// Q2_K codes u (0..3) times their sub-block scale sc (0..15, one sub-block per 128-bit lane, sc
// as words as scale_index spreads them): u * sc <= 45, looked up in each lane's table {0, sc,
// 2 sc, 3 sc}, which one word multiply builds. Folding the scale into the codes lets one
// vpdpbusd per activation row replace vpmaddubsw + vpdpwssd, with the same integer sums.
K3_512_INLINE __m512i q2_k_fold_scale(__m512i u, __m512i sc) {
  return _mm512_shuffle_epi8(_mm512_mullo_epi16(sc, _mm512_set1_epi32(0x03020100)), u);
}

// One 256-block: 64 elements per step (chunks c, c+1 of 32 elements, c = 4h + s, s in {0, 2}).
// Q2_K: u = code (0..3); Q3_K: u = code + 4 * high bit (0..7). Returns the int32 lanes of
// sum_j sc_j (u . qx)_j for every activation row.
template <bool kQ3, int NA>
K3_512_INLINE void kquant_block(const uint8_t* qs, __m256i hmask, __m512i sc16, const ActView& a,
                                size_t a0, size_t b, __m512i* sum) {
  const __m512i m3 = _mm512_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    const __m256i q32 = load256(qs + 32 * h);
    const __m512i z02 =
        _mm512_inserti64x4(_mm512_castsi256_si512(q32), _mm256_srli_epi16(q32, 2), 1);
    const __m512i z46 = _mm512_srli_epi16(z02, 4);
    for (int s = 0; s < 4; s += 2) {
      const int c = 4 * h + s;
      __m512i u = _mm512_and_si512(s == 0 ? z02 : z46, m3);  // chunks c (low half), c+1 (high)
      if constexpr (kQ3) {
        const __m512i bits =
            _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << c)),
                               _mm256_set1_epi8(static_cast<char>(1 << (c + 1))), 1);
        const __mmask64 high = _mm512_test_epi8_mask(_mm512_broadcast_i64x4(hmask), bits);
        u = _mm512_mask_add_epi8(u, high, u, _mm512_set1_epi8(4));
      }
      const __m512i sc = _mm512_permutexvar_epi16(scale_index(static_cast<short>(2 * c)), sc16);
      if constexpr (!kQ3 && NA > 1) {
        // Several activation rows: fold the scale once, then one vpdpbusd per row. The integer
        // sums are the same, so batch 1 and batch n agree bit for bit.
        const __m512i us = q2_k_fold_scale(u, sc);
        for (int i = 0; i < NA; ++i) {
          const size_t ab = (a0 + i) * a.blocks + b;
          sum[i] = _mm512_dpbusd_epi32(sum[i], us, load512(a.qs + 256 * ab + 32 * c));
        }
        continue;
      }
      for (int i = 0; i < NA; ++i) {
        const size_t ab = (a0 + i) * a.blocks + b;
        const __m512i p16 = _mm512_maddubs_epi16(u, load512(a.qs + 256 * ab + 32 * c));
        sum[i] = _mm512_dpwssd_epi32(sum[i], p16, sc);
      }
    }
  }
}

// Q2_K at batch >= kInterleaveMinRows, on the 16-row interleaved activations (one activation
// row per int32 lane): 4 weight rows at a time, each block's codes decoded once with the
// sub-block scale folded in (u * sc <= 45), then one vpdpbusd per 4 codes of a weight row
// serves 16 activation rows. The min term is 8 vpdpwssd on the interleaved bsums. Per weight
// row and activation row the blocks are added in order, as the row kernel does.
template <int NR>
K3_512 void q2_k_rows16(const MatrixView& w, size_t r0, const ActView& a, float* y, size_t ldy) {
  const size_t nb = a.blocks, nb32 = a.cols / 32;
  const uint8_t* rows[NR];
  for (int r = 0; r < NR; ++r) rows[r] = block_row<kBlockK, layout::kQ2KBytes>(w, r0 + r);
  const __m512i m3 = _mm512_set1_epi8(3);
  for (size_t g = 0; g < a.groups16; ++g) {
    __m512 acc[NR], accm[NR];
    for (int r = 0; r < NR; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
      alignas(64) uint8_t folded[NR][256];
      std::int32_t min_pairs[NR][8];
      float d[NR], dmin[NR];
      for (int r = 0; r < NR; ++r) {
        const uint8_t* blk = rows[r] + layout::kQ2KBytes * b;
        const auto [sc16, mins] = q2_k_scales(blk);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(min_pairs[r]), mins);
        d[r] = _cvtsh_ss(load_u16(blk + layout::kQ2KD));
        dmin[r] = _cvtsh_ss(load_u16(blk + layout::kQ2KDmin));
        for (int h = 0; h < 2; ++h) {
          const __m256i q32 = load256(blk + layout::kQ2KQs + 32 * h);
          const __m512i z02 =
              _mm512_inserti64x4(_mm512_castsi256_si512(q32), _mm256_srli_epi16(q32, 2), 1);
          const __m512i z46 = _mm512_srli_epi16(z02, 4);
          for (int s = 0; s < 4; s += 2) {
            const int c = 4 * h + s;
            const __m512i u = _mm512_and_si512(s == 0 ? z02 : z46, m3);
            const __m512i sc =
                _mm512_permutexvar_epi16(scale_index(static_cast<short>(2 * c)), sc16);
            _mm512_store_si512(folded[r] + 32 * c, q2_k_fold_scale(u, sc));
          }
        }
      }
      const std::int8_t* xq = a.qs16 + (g * nb32 + 8 * b) * 512;
      __m512i even[NR], odd[NR];
      for (int r = 0; r < NR; ++r) even[r] = odd[r] = _mm512_setzero_si512();
      for (int q = 0; q < 64; q += 2) {  // quads of codes 4q .. 4q + 7
        const __m512i x0 = load512(xq + 64 * q), x1 = load512(xq + 64 * (q + 1));
        for (int r = 0; r < NR; ++r) {
          std::int32_t w0, w1;
          std::memcpy(&w0, folded[r] + 4 * q, 4);
          std::memcpy(&w1, folded[r] + 4 * q + 4, 4);
          even[r] = _mm512_dpbusd_epi32(even[r], _mm512_set1_epi32(w0), x0);
          odd[r] = _mm512_dpbusd_epi32(odd[r], _mm512_set1_epi32(w1), x1);
        }
      }
      const std::int16_t* bs = a.bsums16 + (g * nb + b) * 8 * 32;
      const __m512 dx = _mm512_loadu_ps(a.d16 + (g * nb + b) * 16);
      for (int r = 0; r < NR; ++r) {
        __m512i msum = _mm512_setzero_si512();
        for (int p = 0; p < 8; ++p)
          msum =
              _mm512_dpwssd_epi32(msum, load512(bs + 32 * p), _mm512_set1_epi32(min_pairs[r][p]));
        const __m512i sum = _mm512_add_epi32(even[r], odd[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_set1_ps(d[r]), dx),
                                 acc[r]);
        accm[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum),
                                  _mm512_mul_ps(_mm512_set1_ps(dmin[r]), dx), accm[r]);
      }
    }
    const size_t lanes = std::min<size_t>(16, a.rows - 16 * g);
    for (int r = 0; r < NR; ++r) {
      alignas(64) float out[16];
      _mm512_store_ps(out, _mm512_sub_ps(acc[r], accm[r]));
      for (size_t l = 0; l < lanes; ++l) y[(16 * g + l) * ldy + r0 + r] = out[l];
    }
  }
}

K3_512 void q2_k_tile(const MatrixView& w, size_t u0, size_t nu, const ActView& a, float* y,
                      size_t ldy) {
  size_t r = u0;
  if (a.bsums16 != nullptr) {
    for (; r + 4 <= u0 + nu; r += 4) q2_k_rows16<4>(w, r, a, y, ldy);
    for (; r < u0 + nu; ++r) q2_k_rows16<1>(w, r, a, y, ldy);
    return;
  }
  // Fewer than kInterleaveMinRows activation rows: the row kernel, as without a tile kernel.
  const RowKernel row = avx512_kernels().row[static_cast<size_t>(Type::kQ2_K)];
  for (size_t a0 = 0; a0 < a.rows; a0 += kMaxActs) {
    const size_t na = std::min(kMaxActs, a.rows - a0);
    for (size_t u = u0; u < u0 + nu; ++u) row(w, u, a, a0, na, y, ldy);
  }
}

K3_512_INLINE __m256i fold_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// The four int32 lane sums of a, b, c and d: 19 operations where four reduce_add_epi32 take 32.
K3_512_INLINE __m128i reduce4_epi32(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(fold_halves(a), fold_halves(b)),
                                         _mm256_hadd_epi32(fold_halves(c), fold_halves(d)));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

}  // namespace

template <int NA>
K3_512 void row_q2_k_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                       size_t ldy) {
  const uint8_t* p = block_row<kBlockK, layout::kQ2KBytes>(w, row);
  const size_t nb = a.blocks;
  // The block order of q2_k_rows16 (batch invariance): per block the exact integer sums S_b
  // (codes x scales . activations) and M_b (mins . activation sums), added in block order as
  // acc = fma(S_b, d dx, acc) and accm = fma(M_b, dmin dx, accm); the row is acc - accm.
  __m128 acc[NA], accm[NA];
  for (int i = 0; i < NA; ++i) acc[i] = accm[i] = _mm_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = p + layout::kQ2KBytes * b;
    prefetch(blk);
    prefetch(blk + 64);
    const auto [sc16, mins] = q2_k_scales(blk);
    const float d = _cvtsh_ss(load_u16(blk + layout::kQ2KD));
    const float dmin = _cvtsh_ss(load_u16(blk + layout::kQ2KDmin));
    __m512i sum[NA];
    for (int i = 0; i < NA; ++i) sum[i] = _mm512_setzero_si512();
    kquant_block<false, NA>(blk + layout::kQ2KQs, _mm256_setzero_si256(), sc16, a, a0, b, sum);
    for (int i = 0; i < NA; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      const __m128 dx = _mm_set_ss(a.d[ab]);
      const std::int32_t s = _mm512_reduce_add_epi32(sum[i]);
      const std::int32_t m = _mm512_reduce_add_epi32(
          _mm512_zextsi256_si512(_mm256_madd_epi16(mins, load256(a.bsums + 16 * ab))));
      acc[i] =
          _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), s), _mm_mul_ss(_mm_set_ss(d), dx), acc[i]);
      accm[i] = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), m), _mm_mul_ss(_mm_set_ss(dmin), dx),
                             accm[i]);
    }
  }
  for (int i = 0; i < NA; ++i) y[(a0 + i) * ldy + row] = _mm_cvtss_f32(_mm_sub_ss(acc[i], accm[i]));
}

// Q3_K: per block the exact integer sum T_b = sum_j sc_j ((u - 4) . x)_j (the 4 taken off
// with the activation sums: T_b = S_b - 4 sum_j sc_j bsum_j), added in block order as
// acc = fma(T_b, d dx, acc). The VNNI-order kernel adds the same integers in the same order, so
// both layouts give the same bits at every batch size. The lane sums of four blocks are reduced
// together (per-block reductions made this kernel 1.4x slower).
template <int NA>
K3_512 void row_q3_k_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                       size_t ldy) {
  const uint8_t* p = block_row<kBlockK, layout::kQ3KBytes>(w, row);
  const size_t nb = a.blocks;
  __m128 acc[NA];
  __m512i lanes[NA][4];  // T_b in int32 lanes, blocks b0 .. b0 + 3
  for (int i = 0; i < NA; ++i) acc[i] = _mm_setzero_ps();
  float d[4];
  for (size_t b0 = 0; b0 < nb; b0 += 4) {
    const size_t n = std::min<size_t>(4, nb - b0);
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      if (k >= n) {  // a tail of 1-3 blocks: zero lanes, never added
        for (int i = 0; i < NA; ++i) lanes[i][k] = _mm512_setzero_si512();
        continue;
      }
      const size_t b = b0 + k;
      const uint8_t* blk = p + layout::kQ3KBytes * b;
      prefetch(blk);
      prefetch(blk + 64);
      const __m256i sc16y = _mm256_cvtepi8_epi16(q3_k_scales(blk + layout::kQ3KScales));
      d[k] = _cvtsh_ss(load_u16(blk + layout::kQ3KD));
      __m512i sum[NA];
      for (int i = 0; i < NA; ++i) sum[i] = _mm512_setzero_si512();
      kquant_block<true, NA>(blk + layout::kQ3KQs, load256(blk + layout::kQ3KHmask),
                             _mm512_castsi256_si512(sc16y), a, a0, b, sum);
      for (int i = 0; i < NA; ++i) {
        const __m256i c = _mm256_madd_epi16(sc16y, load256(a.bsums + 16 * ((a0 + i) * nb + b)));
        lanes[i][k] = _mm512_sub_epi32(sum[i], _mm512_zextsi256_si512(_mm256_slli_epi32(c, 2)));
      }
    }
    for (int i = 0; i < NA; ++i) {
      alignas(16) std::int32_t t[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(t),
                      reduce4_epi32(lanes[i][0], lanes[i][1], lanes[i][2], lanes[i][3]));
#pragma GCC unroll 4
      for (size_t k = 0; k < n; ++k) {
        const float dx = a.d[(a0 + i) * nb + b0 + k];
        acc[i] = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), t[k]),
                              _mm_mul_ss(_mm_set_ss(d[k]), _mm_set_ss(dx)), acc[i]);
      }
    }
  }
  for (int i = 0; i < NA; ++i) y[(a0 + i) * ldy + row] = _mm_cvtss_f32(acc[i]);
}

K3_AVX512_ROWS(row_q2_k_n);
K3_AVX512_ROWS(row_q3_k_n);

void add_k_quant_tiles(KernelTable& t) { t.tile[static_cast<size_t>(Type::kQ2_K)] = q2_k_tile; }

}  // namespace k3::quant::detail::avx512

#endif
