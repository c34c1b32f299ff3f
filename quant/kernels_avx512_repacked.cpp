// AVX-512 kernels of Q8_0, Q4_0 and MXFP4 repacked by 4 rows (quant/repack.h): decoders of a
// repacked row for the int8 family's row kernel and GEMM tile (kernels_avx512_q8.h), and the
// batch-1 GEMV that reads a group of 4 rows as one stream.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quant/kernels_avx512_q8.h"

#if defined(__x86_64__)

namespace k3::quant::detail::avx512 {
namespace {

// Row `row` of a view repacked by kRepackRows (4): block b's scale at s + kStride * b, its
// codes at q + kStride * b. The decoder interface of kernels_avx512_q8.h, so row_q8_n and the
// GEMM tile run on it unchanged.
template <Type T>
struct RepackedD {
  using C = BlockCodec<T>;
  static constexpr size_t kR = 4;
  static constexpr size_t kStride = kR * (C::kScaleBytes + C::kCodeBytes);
  static constexpr bool kGemv4 = false;
  static constexpr int kShift = C::kShift;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  const uint8_t* s;
  const uint8_t* q;
  RepackedD(const MatrixView& w, size_t row) {
    const uint8_t* g = w.data.data() + (row - row % kR) * (w.cols / 32 * (kStride / kR));
    s = g + (row % kR) * C::kScaleBytes;
    q = g + kR * C::kScaleBytes + (row % kR) * C::kCodeBytes;
  }
  K3_512_INLINE void fetch(size_t b) const { prefetch(s + kStride * b); }
  K3_512_INLINE __m512i decode2(size_t b) const {
    return C::decode2(q + kStride * b, q + kStride * (b + 1));
  }
  K3_512_INLINE __m256i decode1(size_t b) const { return C::decode1(q + kStride * b); }
  K3_512_INLINE __m128 scale4(size_t b) const { return C::scale4(s + kStride * b, kStride); }
  K3_512_INLINE float scale1(size_t b) const { return C::scale1(s + kStride * b); }
};

// Batch-1 GEMV on one group of 4 repacked rows: the group is one sequential stream of
// super-blocks (4 scales, then the 4 payloads). The int32 lanes of a row (a 128-bit lane for
// nibble formats, a 256-bit half for Q8_0) are summed into its exact block dot, the offset C of
// the unsigned codes removed by seeding one lane per row with -C * isum.

// 4 scales of a super-block times the activation scale.
template <Type T>
K3_512_INLINE __m128 group_scales(const uint8_t* p, float dx) {
  if constexpr (T == Type::kMXFP4) {
    std::uint32_t packed;
    std::memcpy(&packed, p, sizeof packed);
    return _mm_mul_ps(e8m0_4(packed), _mm_set1_ps(dx));
  } else {
    return _mm_mul_ps(_mm_cvtph_ps(load64(p)), _mm_set1_ps(dx));
  }
}

// Q4_0 / MXFP4: 64 payload bytes = 4 rows x 16 nibble bytes, one row per 128-bit lane. Returns
// the four rows' exact block dots S_b (the offset seeded into one lane per row).
template <Type T>
K3_512_INLINE __m128i nib_group_block(const uint8_t* p, const ActView& a, size_t b) {
  constexpr size_t kSb = T == Type::kMXFP4 ? 1 : 2;
  constexpr int kLog2C = T == Type::kMXFP4 ? 4 : 3;  // C = 16 (MXFP4 table) or 8
  prefetch_block(p, 4 * (kSb + 16));
  const __m512i v = load512(p + 4 * kSb);
  const __m512i m = _mm512_set1_epi8(0x0f);
  __m512i lo = _mm512_and_si512(v, m);
  __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
  if constexpr (T == Type::kMXFP4) {
    const __m512i table = _mm512_broadcast_i32x4(mxfp4_table());
    lo = _mm512_shuffle_epi8(table, lo);
    hi = _mm512_shuffle_epi8(table, hi);
  }
  const __m512i xlo = _mm512_broadcast_i32x4(load128(a.qs + 32 * b));
  const __m512i xhi = _mm512_broadcast_i32x4(load128(a.qs + 32 * b + 16));
  const __m512i init = _mm512_maskz_set1_epi32(0x1111, a.nisum[b] * (1 << kLog2C));
  return lane_sums(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo, xlo), hi, xhi));
}

// Q8_0: 128 payload bytes = rows 0,1 in the first zmm, rows 2,3 in the second (32 B each).
K3_512_INLINE __m128i q8_group_block(const uint8_t* p, const ActView& a, size_t b) {
  prefetch_block(p, 136);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i u0 = _mm512_xor_si512(load512(p + 8), flip);
  const __m512i u1 = _mm512_xor_si512(load512(p + 72), flip);
  const __m512i x = _mm512_broadcast_i64x4(load256(a.qs + 32 * b));
  const __m512i init = _mm512_maskz_set1_epi32(0x0101, a.nisum[b] * 128);
  return half_sums(_mm512_dpbusd_epi32(init, u0, x), _mm512_dpbusd_epi32(init, u1, x));
}

// Batch 1 over one group of 4 repacked rows, in the family's block order: the four rows are the
// lanes of four xmm accumulators, one per block mod 4.
template <Type T>
K3_512 void gemv_group(const MatrixView& w, size_t r0, const ActView& a, float* y) {
  constexpr size_t kSuper = T == Type::kQ8_0 ? 136 : 4 * ((T == Type::kMXFP4 ? 1 : 2) + 16);
  const size_t nb = a.blocks;
  const uint8_t* g = w.data.data() + r0 * (nb * kSuper / 4);
  __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (size_t b0 = 0; b0 < nb; b0 += 4) {
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = b0 + k;
      if (b >= nb) break;
      const uint8_t* p = g + kSuper * b;
      __m128i sums;
      if constexpr (T == Type::kQ8_0) {
        sums = q8_group_block(p, a, b);
      } else {
        sums = nib_group_block<T>(p, a, b);
      }
      acc[k] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), group_scales<T>(p, a.d[b]), acc[k]);
    }
  }
  _mm_storeu_ps(y + r0, _mm_add_ps(_mm_add_ps(acc[0], acc[1]), _mm_add_ps(acc[2], acc[3])));
}

// All activation rows for one row, through the decoder D.
template <class D>
K3_512 void rows_q8(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na,
                    float* y, size_t ldy) {
  switch (na) {
    case 1:
      row_q8_n<D, 1>(w, row, a, a0, y, ldy);
      break;
    case 2:
      row_q8_n<D, 2>(w, row, a, a0, y, ldy);
      break;
    case 3:
      row_q8_n<D, 3>(w, row, a, a0, y, ldy);
      break;
    default:
      row_q8_n<D, 4>(w, row, a, a0, y, ldy);
      break;
  }
}

template <Type T>
K3_512 void repacked_tile(const MatrixView& w, size_t r0, size_t nr, const ActView& a, float* y,
                          size_t ldy) {
  using D = RepackedD<T>;
  if (a.qs16 != nullptr) {
    q8_tile_gemm<D>(w, r0, nr, a, y, ldy);
    return;
  }
  if (a.rows == 1) {
    for (size_t r = r0; r < r0 + nr; r += 4) gemv_group<T>(w, r, a, y);
    return;
  }
  for (size_t a0 = 0; a0 < a.rows; a0 += kMaxActs) {
    for (size_t r = r0; r < r0 + nr; ++r)
      rows_q8<D>(w, r, a, a0, std::min(kMaxActs, a.rows - a0), y, ldy);
  }
}

}  // namespace

void add_repacked_tiles(KernelTable& t) {
  t.repacked[static_cast<size_t>(Type::kQ8_0)] = repacked_tile<Type::kQ8_0>;
  t.repacked[static_cast<size_t>(Type::kQ4_0)] = repacked_tile<Type::kQ4_0>;
  t.repacked[static_cast<size_t>(Type::kMXFP4)] = repacked_tile<Type::kMXFP4>;
}

}  // namespace k3::quant::detail::avx512

#endif
