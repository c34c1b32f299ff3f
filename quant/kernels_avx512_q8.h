// Internal: the AVX-512 kernels of the int8 family (32-element weight blocks against int8
// activation blocks), shared by kernels_avx512_q8.cpp (the checkpoint layouts) and
// kernels_avx512_repacked.cpp (rows repacked by 4): the block decoders' helpers, the family's
// block order, the row kernel and the GEMM tile, written against a decoder D.
//
// Integer formats decode two 32-weight blocks into one zmm of unsigned bytes (weight + C) and
// multiply with vpdpbusd against the int8 activations (64 bytes of a row, blocks b and b+1).
// Lanes 0-7 of the int32 result belong to block b, lanes 8-15 to block b+1; they are summed
// into each block's exact integer dot, the offset C removed with the activation block sums
// (C * isum), and the blocks are added in one fixed order per row that every path of a type
// shares (block_sums4), so results do not depend on the batch.
//
// A decoder D for row `row` of a view (most of them a BlockCodec over one layout's addressing):
// D(w, row); kShift (C = 8 << kShift); kGemv4 (whether
// q8_gemv4 serves batch 1); fetch(b) (prefetch); decode2(b) (blocks b, b+1 as unsigned bytes
// in activation order), decode1(b) (block b); scale4(b) (the scales of blocks b .. b+3),
// scale1(b); and finish(w, row, a, act, v), the row's value from its block sum v.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/fp.h"
#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

namespace k3::quant::detail::avx512 {

// Four f16 scales at p + k * stride -> [d0, d1, d2, d3]: one conversion for four blocks.
K3_512_INLINE __m128 half4(const uint8_t* p, size_t stride) {
  const std::uint64_t bits = static_cast<std::uint64_t>(load_u16(p)) |
                             (static_cast<std::uint64_t>(load_u16(p + stride)) << 16) |
                             (static_cast<std::uint64_t>(load_u16(p + 2 * stride)) << 32) |
                             (static_cast<std::uint64_t>(load_u16(p + 3 * stride)) << 48);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(bits)));
}

constexpr std::array<float, 256> make_e8m0_table() {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) {
    const std::uint32_t bits =
        e < 2 ? (0x00200000u << e) : (static_cast<std::uint32_t>(e) - 1u) << 23;
    t[e] = std::bit_cast<float>(bits);
  }
  return t;
}
constexpr std::array<float, 256> kE8m0Half = make_e8m0_table();  // == e8m0_half(e)

// 2^(e - 128) for four E8M0 bytes packed in a u32: vscalefps is exact, subnormals included.
K3_512_INLINE __m128 e8m0_4(std::uint32_t packed) {
  const __m128 e = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(packed))));
  return _mm_scalef_ps(_mm_set1_ps(1.0f), _mm_sub_ps(e, _mm_set1_ps(128.0f)));
}

// Words of 128-bit lanes 1 and 3: the lanes that take the high nibbles.
inline constexpr __mmask32 kOddLanes = 0xff00ff00u;

// [A, A, B, B] -> [A lo, A hi, B lo, B hi] as 0..15 (a masked shift: vpsrlvw is two uops).
K3_512_INLINE __m512i split_nibbles(__m512i aabb) {
  return _mm512_and_si512(_mm512_mask_srli_epi16(aabb, kOddLanes, aabb, 4), _mm512_set1_epi8(0x0f));
}

// 16 nibble bytes of two blocks -> [A lo, A hi, B lo, B hi] as 0..15. Two broadcast loads and
// a blend (ports 0/5) instead of an insert (port 5 only, the busiest port here).
K3_512_INLINE __m512i nibbles2(const uint8_t* a, const uint8_t* b) {
  const __m512i z = _mm512_mask_blend_epi64(0xf0, _mm512_broadcast_i32x4(load128(a)),
                                            _mm512_broadcast_i32x4(load128(b)));
  return split_nibbles(z);
}
K3_512_INLINE __m256i nibbles1(const uint8_t* a) {
  const __m128i q = load128(a), m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// E2M1 doubled values + 16 (4..28): C = 16.
K3_512_INLINE __m128i mxfp4_table() {
  return _mm_setr_epi8(16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4);
}

// The fields of one 32-element block of Q8_0, Q4_0 or MXFP4 as the kernels read them, wherever
// a layout keeps the block's scale (s) and codes (q, kCodeBytes): decode2 gives blocks a and b
// as unsigned bytes (weight + C, C = 8 << kShift) in activation order in one zmm, decode1 one
// block; scale4 the scales of four blocks `stride` bytes apart, scale1 one block's scale.
template <Type T>
struct BlockCodec;

struct HalfScales {  // f16 scales
  K3_512_INLINE static __m128 scale4(const uint8_t* s, size_t stride) { return half4(s, stride); }
  K3_512_INLINE static float scale1(const uint8_t* s) { return _cvtsh_ss(load_u16(s)); }
};

template <>
struct BlockCodec<Type::kQ8_0> : HalfScales {
  static constexpr int kShift = 4;  // xor 0x80: C = 128
  static constexpr size_t kScaleBytes = 2, kCodeBytes = 32;
  K3_512_INLINE static __m512i decode2(const uint8_t* a, const uint8_t* b) {
    const __m512i z = _mm512_mask_blend_epi64(0xf0, _mm512_broadcast_i64x4(load256(a)),
                                              _mm512_broadcast_i64x4(load256(b)));
    return _mm512_xor_si512(z, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE static __m256i decode1(const uint8_t* a) {
    return _mm256_xor_si256(load256(a), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};

template <>
struct BlockCodec<Type::kQ4_0> : HalfScales {
  static constexpr int kShift = 0;  // nibble = weight + 8
  static constexpr size_t kScaleBytes = 2, kCodeBytes = 16;
  K3_512_INLINE static __m512i decode2(const uint8_t* a, const uint8_t* b) {
    return nibbles2(a, b);
  }
  K3_512_INLINE static __m256i decode1(const uint8_t* a) { return nibbles1(a); }
};

template <>
struct BlockCodec<Type::kMXFP4> {
  static constexpr int kShift = 1;  // table + 16
  static constexpr size_t kScaleBytes = 1, kCodeBytes = 16;
  K3_512_INLINE static __m512i decode2(const uint8_t* a, const uint8_t* b) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(mxfp4_table()), nibbles2(a, b));
  }
  K3_512_INLINE static __m256i decode1(const uint8_t* a) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mxfp4_table()), nibbles1(a));
  }
  K3_512_INLINE static __m128 scale4(const uint8_t* s, size_t stride) {
    return e8m0_4(s[0] | (static_cast<std::uint32_t>(s[stride]) << 8) |
                  (static_cast<std::uint32_t>(s[2 * stride]) << 16) |
                  (static_cast<std::uint32_t>(s[3 * stride]) << 24));
  }
  K3_512_INLINE static float scale1(const uint8_t* s) { return kE8m0Half[*s]; }
};

// The order every kernel of this family adds a row's blocks in (batch invariance):
// per weight row and activation row, S_b, the exact int32 dot of block b with the weights as
// signed values (the offset C removed in integers), goes into one of four accumulators,
//   acc[b mod 4] = fma(float(S_b), dw_b * dx_b, acc[b mod 4]),   b = 0, 1, 2, ...
// and the row's value is (acc[0] + acc[1]) + (acc[2] + acc[3]). The row kernels (the four
// accumulators as the lanes of an xmm), the GEMV over 4 rows and the GEMM tile (lanes =
// activation rows, four zmm accumulators) compute exactly this, so a row's output is the same
// bits whatever the batch size and its place in the batch.

// S_b .. S_b+3 as the int32 lanes of an xmm, from the vpdpbusd results of blocks (b, b+1) and
// (b+2, b+3) (lanes 0-7 and 8-15 of each) and the blocks' activation code sums (C = 8 << kShift).
// The four int32 sums of each 128-bit lane of t, in order.
K3_512_INLINE __m128i lane_sums(__m512i t) {
  t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
  t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

// The sums of the four 8-lane halves of s01 and s23: [s01 lanes 0-7, 8-15, s23 0-7, 8-15].
K3_512_INLINE __m128i half_sums(__m512i s01, __m512i s23) {
  // 128-bit lanes [A.0, A.1, B.0, B.1] and [C.0, C.1, D.0, D.1] -> [A, B, C, D] by lane.
  const __m512i even = _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i odd = _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1));
  return lane_sums(_mm512_add_epi32(even, odd));
}

template <int kShift>
K3_512_INLINE __m128i block_sums4(__m512i s01, __m512i s23, const std::int32_t* isum) {
  return _mm_sub_epi32(
      half_sums(s01, s23),
      _mm_slli_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(isum)), 3 + kShift));
}

// S_b of one block from its vpdpbusd lanes (8 int32).
template <int kShift>
K3_512_INLINE std::int32_t block_sum1(__m256i s, std::int32_t isum) {
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(t) - (isum << (3 + kShift));
}

// Blocks b .. b+3 for NA activation rows: acc[i] lane k takes block b + k.
template <class D, int NA>
K3_512_INLINE void q8_quad(const D& dec, const ActView& a, size_t a0, size_t b, __m128* acc) {
  dec.fetch(b);
  dec.fetch(b + 2);
  const __m512i u0 = dec.decode2(b);
  const __m512i u1 = dec.decode2(b + 2);
  const __m128 dw = dec.scale4(b);
  for (int i = 0; i < NA; ++i) {
    const size_t ab = (a0 + i) * a.blocks + b;
    const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0, load512(a.qs + 32 * ab));
    const __m512i s1 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), u1, load512(a.qs + 32 * ab + 64));
    const __m128i sums = block_sums4<D::kShift>(s0, s1, a.isum + ab);
    acc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_loadu_ps(a.d + ab)), acc[i]);
  }
}

// The last nb - b < 4 blocks (b a multiple of 4): block b + k into lane k; the other lanes add
// 0 * 0, which leaves an accumulator's value as it is.
template <class D, int NA>
K3_512_INLINE void q8_tail(const D& dec, const ActView& a, size_t a0, size_t b, __m128* acc) {
  const size_t left = a.blocks - b;
  alignas(16) float dw[4] = {};
  __m256i u[3];
  for (size_t k = 0; k < left; ++k) {
    u[k] = dec.decode1(b + k);
    dw[k] = dec.scale1(b + k);
  }
  for (int i = 0; i < NA; ++i) {
    const size_t ab = (a0 + i) * a.blocks + b;
    alignas(16) float sums[4] = {}, sc[4] = {};
    for (size_t k = 0; k < left; ++k) {
      const __m256i s =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[k], load256(a.qs + 32 * (ab + k)));
      sums[k] = static_cast<float>(block_sum1<D::kShift>(s, a.isum[ab + k]));
      sc[k] = dw[k] * a.d[ab + k];
    }
    acc[i] = _mm_fmadd_ps(_mm_load_ps(sums), _mm_load_ps(sc), acc[i]);
  }
}

// (acc0 + acc1) + (acc2 + acc3) of the four lanes.
K3_512_INLINE float sum_of_4(__m128 acc) {
  const __m128 pairs = _mm_add_ps(acc, _mm_shuffle_ps(acc, acc, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehl_ps(pairs, pairs)));
}

template <class D, int NA>
K3_512 void row_q8_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                     size_t ldy) {
  const D dec(w, row);
  const size_t nb = a.blocks;
  __m128 acc[NA];
  for (int i = 0; i < NA; ++i) acc[i] = _mm_setzero_ps();
  size_t b = 0;
  for (; b + 4 <= nb; b += 4) q8_quad<D, NA>(dec, a, a0, b, acc);
  if (b < nb) q8_tail<D, NA>(dec, a, a0, b, acc);
  for (int i = 0; i < NA; ++i)
    y[(a0 + i) * ldy + row] = D::finish(w, row, a, a0 + i, sum_of_4(acc[i]));
}

// ---------------------------------------------------------------- GEMM tile (>= 12 activations)

// R weight rows x 16 activation rows (one group of the interleaved copy): int32 lane l of the
// vpdpbusd result is activation row 16g + l, so the 32-element block dot needs no horizontal
// sum. Weight bytes come pre-decoded (u, one row after the other) with their block scales.
template <class D, int R>
K3_512_INLINE void q8_tile_rows(const MatrixView& w, size_t row0, const uint8_t* u, const float* sc,
                                const ActView& a, size_t g, float* y, size_t ldy) {
  const size_t nb = a.blocks, cols = w.cols;
  __m512 acc[R][4];  // acc[r][b mod 4], the family's block order (see block_sums4)
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < 4; ++k) acc[r][k] = _mm512_setzero_ps();
  for (size_t b0 = 0; b0 < nb; b0 += 4) {
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = b0 + k;
      if (b >= nb) break;
      const size_t gb = g * nb + b;
      const std::int8_t* xq = a.qs16 + gb * 512;
      const __m512i init =
          _mm512_slli_epi32(_mm512_loadu_si512(a.nisum16 + gb * 16), 3 + D::kShift);
      __m512i s[R];
      for (int r = 0; r < R; ++r) s[r] = init;
      for (int j = 0; j < 8; ++j) {
        const __m512i x = load512(xq + 64 * j);
        for (int r = 0; r < R; ++r) {
          std::int32_t quad;
          std::memcpy(&quad, u + r * cols + 32 * b + 4 * j, sizeof quad);
          s[r] = _mm512_dpbusd_epi32(s[r], _mm512_set1_epi32(quad), x);
        }
      }
      const __m512 dx = _mm512_loadu_ps(a.d16 + gb * 16);
      for (int r = 0; r < R; ++r) {
        acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r]),
                                    _mm512_mul_ps(_mm512_set1_ps(sc[r * nb + b]), dx), acc[r][k]);
      }
    }
  }
  const size_t lanes = std::min<size_t>(16, a.rows - 16 * g);
  for (int r = 0; r < R; ++r) {
    alignas(64) float out[16];
    _mm512_store_ps(out, _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]),
                                       _mm512_add_ps(acc[r][2], acc[r][3])));
    for (size_t l = 0; l < lanes; ++l) {
      y[(16 * g + l) * ldy + row0 + r] = D::finish(w, row0 + r, a, 16 * g + l, out[l]);
    }
  }
}

// The GEMM path of q8_tile (activations interleaved by 16 rows).
template <class D>
K3_512 void q8_tile_gemm(const MatrixView& w, size_t u0, size_t nu, const ActView& a, float* y,
                         size_t ldy) {
  const size_t nb = a.blocks, cols = w.cols;
  std::vector<uint8_t> u(nu * cols);
  std::vector<float> sc(nu * nb);
  for (size_t r = 0; r < nu; ++r) {  // decode the tile once, reuse it for every group
    const D dec(w, u0 + r);
    for (size_t b = 0; b < nb; ++b) {
      dec.fetch(b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u.data() + r * cols + 32 * b), dec.decode1(b));
      sc[r * nb + b] = dec.scale1(b);
    }
  }
  for (size_t g = 0; g < a.groups16; ++g) {
    size_t r = 0;
    for (; r + 4 <= nu; r += 4)
      q8_tile_rows<D, 4>(w, u0 + r, u.data() + r * cols, sc.data() + r * nb, a, g, y, ldy);
    for (; r < nu; ++r)
      q8_tile_rows<D, 1>(w, u0 + r, u.data() + r * cols, sc.data() + r * nb, a, g, y, ldy);
  }
}

}  // namespace k3::quant::detail::avx512

#endif
