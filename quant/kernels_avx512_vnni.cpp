// AVX-512 kernels of the 16-row VNNI order (quant/repack.h): Q8_0 and Q4_0, the K-quants Q2_K
// and Q3_K, and the tile driver that serves them all. One int32 lane per weight row, so no
// horizontal sums, and per row and activation row the integers and float steps of the plain
// layout's kernels (kernels_avx512_q8.cpp, kernels_avx512_kquant.cpp): a loader may repack a
// matrix without changing an output bit.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quant/fp.h"
#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

namespace k3::quant::detail::avx512 {
namespace {

// A super-block in the VNNI order: the 16 rows' codes, then their 16 f16 scales.
template <Type T>
inline constexpr size_t kVnniSuper =
    T == Type::kQ4_0 ? 16 * layout::kQ4_0Bytes : 16 * layout::kQ8_0Bytes;
template <Type T>
inline constexpr int kVnniOffset = T == Type::kQ4_0 ? 8 : 128;  // stored code = value + offset

// Batch 1 streams 8 16-row groups side by side, each a sequential stream of its own,
// prefetched into L2 about 7 super-blocks ahead (2 KiB for Q4_0, 4 KiB for Q8_0). Measured
// against ggml's AMX buffer on the development host (docs/PERFORMANCE.md, "Tried and dropped"):
// 8 streams beat 4; for Q8_0, 4 KiB beat 2 KiB and no prefetch.
inline constexpr size_t kVnniStreams = 8;
template <Type T>
inline constexpr size_t kVnniPrefetch = T == Type::kQ4_0 ? 2048 : 4096;

// The 32 bits at p (four int8 codes, or two int16 sums) in every lane.
K3_512_INLINE __m512i broadcast_quad(const void* p) {
  std::int32_t quad;
  std::memcpy(&quad, p, sizeof quad);
  return _mm512_set1_epi32(quad);
}

// The prefetch of S side-by-side streams (groups gstride apart), kDist bytes ahead into L2.
// Near a stream's end it goes to the start of the stream that continues it in the next tile
// (S groups further on) rather than to the next group, which another stream already reads:
// each tile then starts warm (measured: up to 10 % on 4096x4096 Q8_0). stream_jump is that
// extra offset at block b, prefetch_super the prefetch of one super-block p.
template <size_t kSuper, size_t kDist>
K3_512_INLINE size_t stream_jump(size_t b, size_t gstride, size_t streams) {
  return b * kSuper + kDist >= gstride ? (streams - 1) * gstride : 0;
}
template <size_t kSuper, size_t kDist>
K3_512_INLINE void prefetch_super(const uint8_t* p, size_t jump) {
  const char* pf = reinterpret_cast<const char*>(p) + kDist + jump;
  for (size_t o = 0; o < kSuper; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
}

// The 16 rows' integer dot products with one activation block (x: its 8 broadcast quads),
// added to acc. Exact: |sum| <= 32 * 255 * 128 per block.
template <Type T>
K3_512_INLINE __m512i vnni_block(const uint8_t* p, const __m512i* x, __m512i acc) {
  if constexpr (T == Type::kQ4_0) {
    const __m512i m = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = load512(p + 64 * c);
      acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(v, m), x[2 * c]);
      acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(v, 4), m), x[2 * c + 1]);
    }
  } else {
    for (int k = 0; k < 8; ++k) acc = _mm512_dpbusd_epi32(acc, load512(p + 64 * k), x[k]);
  }
  return acc;
}

// One block's contribution to the 16 accumulators: acc + float(isum) * (d_w * d_x). The
// integer sum starts from -offset * isum(x), so the stored offset cancels exactly.
template <Type T>
K3_512_INLINE __m512 vnni_accumulate(const uint8_t* p, const __m512i* x, std::int32_t nisum,
                                     float dx, __m512 acc) {
  const __m512i isum = vnni_block<T>(p, x, _mm512_set1_epi32(nisum * kVnniOffset<T>));
  const __m512 d =
      _mm512_mul_ps(_mm512_cvtph_ps(load256(p + kVnniSuper<T> - 32)), _mm512_set1_ps(dx));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc);
}

// The int8 family's block order (kernels_avx512_q8.h), which every path of the plain layout keeps
// as well: block b goes into accumulator b mod 4, and a row ends as (acc0 + acc1) + (acc2 + acc3).
// So the VNNI order gives the plain layout's results bit for bit, at every batch size, and a
// loader may repack a matrix without changing a single output.
K3_512_INLINE __m512 vnni_finish(const __m512* acc) {
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
}

// Batch 1 on S consecutive groups starting at g (group stride gstride bytes): rows 16 S.
template <Type T, size_t S>
K3_512_NOINLINE void vnni_gemv_groups(const uint8_t* g, size_t gstride, const ActView& a,
                                      float* y) {
  constexpr size_t kSuper = kVnniSuper<T>;
  __m512 acc[S][4];
  for (size_t s = 0; s < S; ++s)
    for (int k = 0; k < 4; ++k) acc[s][k] = _mm512_setzero_ps();
  for (size_t b0 = 0; b0 < a.blocks; b0 += 4) {
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = b0 + k;
      if (b >= a.blocks) break;
      __m512i x[8];
      for (int q = 0; q < 8; ++q) x[q] = broadcast_quad(a.qs + 32 * b + 4 * q);
      const size_t jump = stream_jump<kSuper, kVnniPrefetch<T>>(b, gstride, S);
      for (size_t s = 0; s < S; ++s) {
        const uint8_t* p = g + s * gstride + b * kSuper;
        prefetch_super<kSuper, kVnniPrefetch<T>>(p, jump);
        acc[s][k] = vnni_accumulate<T>(p, x, a.nisum[b], a.d[b], acc[s][k]);
      }
    }
  }
  for (size_t s = 0; s < S; ++s) _mm512_storeu_ps(y + 16 * s, vnni_finish(acc[s]));
}

// NA (<= 4) activation rows from a0 on S groups side by side, each block's codes loaded once
// per activation row. With S > 1 (up to kVnniStreamedRows rows) the groups are read as the
// streams of vnni_gemv_groups, prefetched on the first pass (`stream`; later passes find them in
// L2): one group at a time read one stream and left the memory bus a third idle (bench_quant
// Q8_0 7168x3584 batch 4: 2.81 ms against 1.71 ms at batch 1). With S = 1 (more rows: compute-
// bound) the group stays in L2 across the activation chunks and its accumulators in registers.
// kRepeatLast: only the first `live` (< NA) rows are real; the last of them stands in for the
// rest, whose outputs are not stored (VnniFamily::kStreamsAsFour).
template <Type T, size_t S, int NA, bool kRepeatLast = false>
K3_512_NOINLINE void vnni_gemm_groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                                      bool stream, float* y, size_t ldy, int live = NA) {
  constexpr size_t kSuper = kVnniSuper<T>;
  const size_t nb = a.blocks;
  const int stored = kRepeatLast ? live : NA;
  __m512 acc[S][NA][4];
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < NA; ++i)
      for (int k = 0; k < 4; ++k) acc[s][i][k] = _mm512_setzero_ps();
  for (size_t b0 = 0; b0 < nb; b0 += 4) {
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = b0 + k;
      if (b >= nb) break;
      const size_t jump = stream_jump<kSuper, kVnniPrefetch<T>>(b, gstride, S);
      for (size_t s = 0; s < S; ++s) {
        const uint8_t* p = g + s * gstride + b * kSuper;
        if (stream) prefetch_super<kSuper, kVnniPrefetch<T>>(p, jump);
        for (int i = 0; i < NA; ++i) {
          const size_t ab = (a0 + (kRepeatLast ? std::min(i, stored - 1) : i)) * nb + b;
          __m512i x[8];
          for (int q = 0; q < 8; ++q) x[q] = broadcast_quad(a.qs + 32 * ab + 4 * q);
          acc[s][i][k] = vnni_accumulate<T>(p, x, a.nisum[ab], a.d[ab], acc[s][i][k]);
        }
      }
    }
  }
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < stored; ++i)
      _mm512_storeu_ps(y + (a0 + i) * ldy + 16 * s, vnni_finish(acc[s][i]));
}

// ------------------------------------------------------------------ K-quants in the VNNI order

// One lane per weight row (quant/repack.h): a super-block's codes and scales are decoded once
// for 16 rows, where the row kernels (kernels_avx512_kquant.cpp) decode them once per row and then
// reduce across lanes. Per row and activation row the integers and the float steps are the row
// kernels' (row_q2_k_n, row_q3_k_n), so a loader may repack without changing a bit.
template <bool kQ3>
inline constexpr size_t kKVnniSuper = 16 * (kQ3 ? layout::kQ3KBytes : layout::kQ2KBytes);

// (m ? a : b) bit by bit.
K3_512_INLINE __m512i select_bits(__m512i m, __m512i a, __m512i b) {
  return _mm512_ternarylogic_epi32(a, b, m, 0xE4);
}

// The 8 pair words of a super-block: lane r, word w of pair p is sub-block 2p + w of row r.
// Q2_K: the scales (sc) and the mins (mn); Q3_K: the signed scales (code - 32) in sc.
template <bool kQ3>
K3_512_INLINE void k_vnni_pairs(const uint8_t* sup, __m512i* sc, __m512i* mn) {
  if constexpr (!kQ3) {
    const __m512i m = _mm512_set1_epi32(0x000F000F);
    for (int k = 0; k < 4; ++k) {
      const __m512i z = load512(sup + layout::kQ2KVnniScales + 64 * k);
      sc[2 * k] = _mm512_and_si512(z, m);
      sc[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi32(z, 8), m);
      mn[2 * k] = _mm512_and_si512(_mm512_srli_epi32(z, 4), m);
      mn[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi32(z, 12), m);
    }
  } else {
    const __m512i a = load512(sup + layout::kQ3KVnniScales);
    const __m512i b = load512(sup + layout::kQ3KVnniScales + 64);
    const __m512i c = load512(sup + layout::kQ3KVnniScales + 128);
    const __m512i m = _mm512_set1_epi8(0x0f);
    // S_k: byte i = the 6-bit v of sub-block 4k + {0, 2, 1, 3}[i] (bits 6-7 unused).
    const __m512i s[4] = {
        select_bits(m, a, _mm512_slli_epi16(c, 4)),
        select_bits(m, _mm512_srli_epi16(a, 4), _mm512_slli_epi16(c, 2)),
        select_bits(m, b, c),
        select_bits(m, _mm512_srli_epi16(b, 4), _mm512_srli_epi16(c, 2)),
    };
    for (int k = 0; k < 4; ++k) {  // sign-extended 6-bit fields: v = code ^ 32 reads as code - 32
      sc[2 * k] = _mm512_srai_epi16(_mm512_slli_epi16(s[k], 10), 10);
      sc[2 * k + 1] = _mm512_srai_epi16(_mm512_slli_epi16(s[k], 2), 10);
    }
  }
}

// The exact integers of super-block b for 16 weight rows and activation rows a0 .. a0 + NA - 1:
// Q2_K s = S_b and m = M_b (row_q2_k_n), Q3_K s = T_b (row_q3_k_n; m unused).
template <bool kQ3, int NA>
K3_512_INLINE void k_vnni_sums(const uint8_t* sup, const ActView& a, size_t a0, size_t b,
                               __m512i* s, __m512i* m) {
  __m512i sc[8], mn[8];
  k_vnni_pairs<kQ3>(sup, sc, mn);
  const std::int8_t* x[NA];
  for (int i = 0; i < NA; ++i) {
    const size_t ab = (a0 + i) * a.blocks + b;
    x[i] = a.qs + 256 * ab;
    const std::int16_t* bs = a.bsums + 16 * ab;
    m[i] = s[i] = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p)
      m[i] = _mm512_dpwssd_epi32(m[i], kQ3 ? sc[p] : mn[p], broadcast_quad(bs + 2 * p));
  }
  const __m512i m3 = _mm512_set1_epi8(3);
  __m512i even[NA];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    const __m512i q = load512(sup + layout::kKVnniCodes + 64 * t);
    __m512i u[4];
    for (int j = 0; j < 4; ++j) u[j] = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), m3);
    if constexpr (kQ3) {
      for (int j = 0; j < 4; ++j) {
        std::uint64_t bits;
        std::memcpy(&bits, sup + layout::kQ3KVnniHigh + 8 * (4 * t + j), sizeof bits);
        u[j] = _mm512_mask_add_epi8(u[j], _cvtu64_mask64(bits), u[j], _mm512_set1_epi8(4));
      }
    }
    for (int i = 0; i < NA; ++i) {
      __m512i part = _mm512_setzero_si512();  // (u . x) of sub-block t, |part| <= 16 * 7 * 128
      for (int j = 0; j < 4; ++j)
        part = _mm512_dpbusd_epi32(part, u[j], broadcast_quad(x[i] + 16 * t + 4 * j));
      if (t % 2 == 0) {
        even[i] = part;
        continue;
      }
      const __m512i pair =
          _mm512_mask_blend_epi16(0xAAAAAAAA, even[i], _mm512_slli_epi32(part, 16));
      s[i] = _mm512_dpwssd_epi32(s[i], pair, sc[t / 2]);
    }
  }
  if constexpr (kQ3) {
    for (int i = 0; i < NA; ++i) s[i] = _mm512_sub_epi32(s[i], _mm512_slli_epi32(m[i], 2));
  }
}

// Block b of 16 rows for activation rows a0 .. a0 + NA - 1 into the float accumulators (acc,
// and accm for Q2_K's mins), as the row kernels do.
template <bool kQ3, int NA>
K3_512_INLINE void k_vnni_accumulate(const uint8_t* sup, const ActView& a, size_t a0, size_t b,
                                     __m512* acc, __m512* accm) {
  __m512i s[NA], m[NA];
  k_vnni_sums<kQ3, NA>(sup, a, a0, b, s, m);
  const __m512 d = _mm512_cvtph_ps(load256(sup + (kQ3 ? layout::kQ3KVnniD : layout::kQ2KVnniD)));
  const __m512 dmin = kQ3 ? d : _mm512_cvtph_ps(load256(sup + layout::kQ2KVnniDmin));
  for (int i = 0; i < NA; ++i) {
    const __m512 dx = _mm512_set1_ps(a.d[(a0 + i) * a.blocks + b]);
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(d, dx), acc[i]);
    if constexpr (!kQ3) {
      accm[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m[i]), _mm512_mul_ps(dmin, dx), accm[i]);
    }
  }
}

template <bool kQ3>
K3_512_INLINE __m512 k_vnni_finish(__m512 acc, __m512 accm) {
  return kQ3 ? acc : _mm512_sub_ps(acc, accm);
}

// Prefetch distance of each batch-1 stream (bench_quant 7168x3584, one thread, ms for Q2_K /
// Q3_K: none 1.01 / 1.51, 2 KiB 0.74 / 0.96, 4 KiB 0.73 / 1.01, 8 KiB 0.75 / 1.05).
inline constexpr size_t kKVnniPrefetch = 4096;

// NA (<= 4) activation rows on S groups side by side, as vnni_gemm_groups; at batch 1 (NA = 1,
// a0 = 0, `stream`) the S streams of vnni_gemv_groups.
template <bool kQ3, size_t S, int NA>
K3_512_NOINLINE void k_vnni_gemm_groups(const uint8_t* g, size_t gstride, const ActView& a,
                                        size_t a0, bool stream, float* y, size_t ldy) {
  constexpr size_t kSuper = kKVnniSuper<kQ3>;
  __m512 acc[S][NA], accm[S][NA];
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < NA; ++i) acc[s][i] = accm[s][i] = _mm512_setzero_ps();
  for (size_t b = 0; b < a.blocks; ++b) {
    const size_t jump = stream_jump<kSuper, kKVnniPrefetch>(b, gstride, S);
    for (size_t s = 0; s < S; ++s) {
      const uint8_t* p = g + s * gstride + b * kSuper;
      if (stream) prefetch_super<kSuper, kKVnniPrefetch>(p, jump);
      k_vnni_accumulate<kQ3, NA>(p, a, a0, b, acc[s], accm[s]);
    }
  }
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < NA; ++i)
      _mm512_storeu_ps(y + (a0 + i) * ldy + 16 * s, k_vnni_finish<kQ3>(acc[s][i], accm[s][i]));
}

// Q2_K in the VNNI order from kInterleaveMinRows activation rows on, on the interleaved
// activations (one activation row per lane) as q2_k_rows16: per block the 16 weight rows' codes
// are decoded once with their sub-block scale folded in (u * sc <= 45; one word multiply per 4
// codes of 16 rows) and kept in the VNNI order, so a weight quad is one broadcast; then 4 weight
// rows at a time against 16 activation rows. The integers and float steps are q2_k_rows16's.
K3_512 void k_vnni_q2_rows16(const uint8_t* grp, const ActView& a, float* y, size_t ldy) {
  constexpr size_t kSuper = kKVnniSuper<false>;
  const size_t nb = a.blocks, nb32 = a.cols / 32;
  const __m512i m3 = _mm512_set1_epi8(3), low_word = _mm512_set1_epi32(0xFFFF);
  for (size_t g = 0; g < a.groups16; ++g) {
    __m512 acc[16], accm[16];
    for (int r = 0; r < 16; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* sup = grp + b * kSuper;
      alignas(64) uint8_t folded[64 * 64];  // quad q of row r at 64 q + 4 r
      alignas(64) std::int32_t min_pairs[8][16];
      __m512i sc[8], mn[8];
      k_vnni_pairs<false>(sup, sc, mn);
      for (int p = 0; p < 8; ++p) _mm512_store_si512(min_pairs[p], mn[p]);
      for (int t = 0; t < 16; ++t) {
        const __m512i q = load512(sup + layout::kKVnniCodes + 64 * t);
        // sub-block t's scale in both words of each row's lane
        const __m512i s1 =
            t % 2 == 0 ? _mm512_and_si512(sc[t / 2], low_word) : _mm512_srli_epi32(sc[t / 2], 16);
        const __m512i sw = _mm512_or_si512(s1, _mm512_slli_epi32(s1, 16));
        for (int j = 0; j < 4; ++j) {
          const __m512i u = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), m3);
          _mm512_store_si512(folded + 64 * (4 * t + j), _mm512_mullo_epi16(u, sw));
        }
      }
      const std::int8_t* xq = a.qs16 + (g * nb32 + 8 * b) * 512;
      const std::int16_t* bs = a.bsums16 + (g * nb + b) * 8 * 32;
      const __m512 dx = _mm512_loadu_ps(a.d16 + (g * nb + b) * 16);
      for (int r0 = 0; r0 < 16; r0 += 4) {
        __m512i even[4], odd[4];
        for (int r = 0; r < 4; ++r) even[r] = odd[r] = _mm512_setzero_si512();
        for (int q = 0; q < 64; q += 2) {  // quads of codes 4q .. 4q + 7
          const __m512i x0 = load512(xq + 64 * q), x1 = load512(xq + 64 * (q + 1));
          for (int r = 0; r < 4; ++r) {
            const uint8_t* w = folded + 4 * (r0 + r);
            even[r] = _mm512_dpbusd_epi32(even[r], broadcast_quad(w + 64 * q), x0);
            odd[r] = _mm512_dpbusd_epi32(odd[r], broadcast_quad(w + 64 * (q + 1)), x1);
          }
        }
        for (int r = 0; r < 4; ++r) {
          const int row = r0 + r;
          __m512i msum = _mm512_setzero_si512();
          for (int p = 0; p < 8; ++p)
            msum = _mm512_dpwssd_epi32(msum, load512(bs + 32 * p),
                                       _mm512_set1_epi32(min_pairs[p][row]));
          const float d = _cvtsh_ss(load_u16(sup + layout::kQ2KVnniD + 2 * row));
          const float dmin = _cvtsh_ss(load_u16(sup + layout::kQ2KVnniDmin + 2 * row));
          const __m512i sum = _mm512_add_epi32(even[r], odd[r]);
          acc[row] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_set1_ps(d), dx),
                                     acc[row]);
          accm[row] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum),
                                      _mm512_mul_ps(_mm512_set1_ps(dmin), dx), accm[row]);
        }
      }
    }
    const size_t lanes = std::min<size_t>(16, a.rows - 16 * g);
    for (int r = 0; r < 16; ++r) {
      alignas(64) float out[16];
      _mm512_store_ps(out, _mm512_sub_ps(acc[r], accm[r]));
      for (size_t l = 0; l < lanes; ++l) y[(16 * g + l) * ldy + r] = out[l];
    }
  }
}

// ------------------------------------------------------------------ VNNI-order tiles

// A VNNI-order family for the tile driver below: its super-block bytes, the batch-1 kernel on
// S groups side by side (gemv), the batch-n kernel on S groups (groups: NA activation rows per
// pass) and, where there is one, a path for the 16-row interleaved activations (group16).
template <Type T>
struct VnniFamily {
  static constexpr size_t kSuper = kVnniSuper<T>;
  template <size_t S>
  K3_512_INLINE static void gemv(const uint8_t* g, size_t gstride, const ActView& a, float* y) {
    vnni_gemv_groups<T, S>(g, gstride, a, y);
  }
  template <size_t S, int NA>
  K3_512_INLINE static void groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                                   bool stream, float* y, size_t ldy) {
    vnni_gemm_groups<T, S, NA>(g, gstride, a, a0, stream, y, ldy);
  }
  template <size_t S, int NA>
  K3_512_INLINE static void groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                                   bool stream, float* y, size_t ldy, int live) {
    vnni_gemm_groups<T, S, NA, true>(g, gstride, a, a0, stream, y, ldy, live);
  }
  // Streamed from memory, Q8_0's 2 and 3 rows took longer than 4 (bench_quant 4096x4096, cold:
  // 0.76-0.90 and 0.76-0.97 ms against 0.66-0.71; 7 rows 1.00-1.26 against 8 at 0.94-1.21; the
  // other families grow with the rows): the last 2 or 3 rows of a streamed product run as 4, the
  // last row repeated and its outputs not stored.
  static constexpr bool kStreamsAsFour = T == Type::kQ8_0;
  static bool interleaved(const ActView&) { return false; }
  static void group16(const uint8_t*, const ActView&, float*, size_t) {}
};

// The K-quants: batch 1 is their batch-n kernel on one activation row.
template <bool kQ3>
struct KVnniFamily {
  static constexpr size_t kSuper = kKVnniSuper<kQ3>;
  template <size_t S>
  K3_512_INLINE static void gemv(const uint8_t* g, size_t gstride, const ActView& a, float* y) {
    k_vnni_gemm_groups<kQ3, S, 1>(g, gstride, a, 0, true, y, 0);
  }
  template <size_t S, int NA>
  K3_512_INLINE static void groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                                   bool stream, float* y, size_t ldy) {
    k_vnni_gemm_groups<kQ3, S, NA>(g, gstride, a, a0, stream, y, ldy);
  }
  static constexpr bool kStreamsAsFour = false;
  static bool interleaved(const ActView& a) { return !kQ3 && a.bsums16 != nullptr; }
  K3_512_INLINE static void group16(const uint8_t* g, const ActView& a, float* y, size_t ldy) {
    if constexpr (!kQ3) k_vnni_q2_rows16(g, a, y, ldy);
  }
};

template <class F, size_t S = kVnniStreams>
K3_512_INLINE void vnni_gemv_dispatch(const uint8_t* g, size_t gstride, size_t groups,
                                      const ActView& a, float* y) {
  if constexpr (S > 1) {
    if (groups < S) return vnni_gemv_dispatch<F, S - 1>(g, gstride, groups, a, y);
  }
  F::template gemv<S>(g, gstride, a, y);
}

template <class F, int NA, size_t S = kVnniStreams, class... Live>
K3_512_INLINE void vnni_gemm_dispatch(const uint8_t* g, size_t gstride, size_t groups,
                                      const ActView& a, size_t a0, bool stream, float* y,
                                      size_t ldy, Live... live) {
  if constexpr (S > 1) {
    if (groups < S)
      return vnni_gemm_dispatch<F, NA, S - 1>(g, gstride, groups, a, a0, stream, y, ldy, live...);
  }
  F::template groups<S, NA>(g, gstride, a, a0, stream, y, ldy, live...);
}

// Every activation row on `groups` groups from g (side by side): passes of 4 rows, then the
// last 1-3 rows in one pass (as 4 where F::kStreamsAsFour and `stream`); the first pass
// prefetches the groups' streams if `stream`.
template <class F>
K3_512_INLINE void vnni_passes(const uint8_t* g, size_t gstride, size_t groups, const ActView& a,
                               bool stream, float* y, size_t ldy) {
  size_t a0 = 0;
  for (; a0 + 4 <= a.rows; a0 += 4)
    vnni_gemm_dispatch<F, 4>(g, gstride, groups, a, a0, stream && a0 == 0, y, ldy);
  const bool first = stream && a0 == 0;
  if constexpr (F::kStreamsAsFour) {
    if (stream && a.rows - a0 >= 2)
      return vnni_gemm_dispatch<F, 4>(g, gstride, groups, a, a0, first, y, ldy,
                                      static_cast<int>(a.rows - a0));
  }
  if (a.rows - a0 == 3) vnni_gemm_dispatch<F, 3>(g, gstride, groups, a, a0, first, y, ldy);
  if (a.rows - a0 == 2) vnni_gemm_dispatch<F, 2>(g, gstride, groups, a, a0, first, y, ldy);
  if (a.rows - a0 == 1) vnni_gemm_dispatch<F, 1>(g, gstride, groups, a, a0, first, y, ldy);
}

// Up to this many activation rows the groups are read as streams side by side (a speculative
// verify step has 8, a draft block 7); from there on the products are compute-bound and one
// group at a time, its accumulators in registers, is faster.
inline constexpr size_t kVnniStreamedRows = 8;

// Rows [r0, r0 + nr) of a VNNI-order view: whole groups, nr <= 16 * kVnniTileGroups.
template <class F>
K3_512 void vnni_tile(const MatrixView& w, size_t r0, size_t nr, const ActView& a, float* y,
                      size_t ldy) {
  const size_t gstride = a.blocks * F::kSuper;
  const uint8_t* g0 = w.data.data() + r0 / 16 * gstride;
  const size_t groups = nr / 16;
  if (a.rows == 1) {
    for (size_t s = 0; s < groups; s += kVnniStreams)
      vnni_gemv_dispatch<F>(g0 + s * gstride, gstride, std::min(kVnniStreams, groups - s), a,
                            y + r0 + 16 * s);
    return;
  }
  if (a.rows <= kVnniStreamedRows && !F::interleaved(a)) {
    // All groups of the tile in every pass (at most kVnniTileGroups, which stay in L2 for the
    // second pass).
    vnni_passes<F>(g0, gstride, groups, a, true, y + r0, ldy);
    return;
  }
  for (size_t s = 0; s < groups; ++s) {
    const uint8_t* g = g0 + s * gstride;
    float* out = y + r0 + 16 * s;
    if (F::interleaved(a)) {
      F::group16(g, a, out, ldy);
    } else {
      vnni_passes<F>(g, gstride, 1, a, false, out, ldy);
    }
  }
}

}  // namespace

void add_vnni_tiles(KernelTable& t) {
  t.vnni[static_cast<size_t>(Type::kQ8_0)] = vnni_tile<VnniFamily<Type::kQ8_0>>;
  t.vnni[static_cast<size_t>(Type::kQ4_0)] = vnni_tile<VnniFamily<Type::kQ4_0>>;
  t.vnni[static_cast<size_t>(Type::kQ2_K)] = vnni_tile<KVnniFamily<false>>;
  t.vnni[static_cast<size_t>(Type::kQ3_K)] = vnni_tile<KVnniFamily<true>>;
}

}  // namespace k3::quant::detail::avx512

#endif
