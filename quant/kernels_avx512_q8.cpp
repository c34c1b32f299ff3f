// AVX-512 kernels of the int8 family on the checkpoint layouts: the decoders of Q8_0, Q4_0,
// MXFP4 (ggml blocks and compressed-tensors), the batch-1 GEMV over 4 rows, the tile kernel
// (row kernels below 12 activation rows, the GEMM tile from there), and ModelSlim int8 (the
// family's kernels with an integer offset correction) and int4 (two rows per packed byte).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quant/fp.h"
#include "quant/kernels_avx512_q8.h"

#if defined(__x86_64__)

namespace k3::quant::detail::avx512 {

// Row `row` of a view in ggml's block layout: block b at p + kBytes * b, its scale at kScale
// and its codes at kCodes within.
template <Type T>
struct PlainD {
  using C = BlockCodec<T>;
  static constexpr bool kGemv4 = true;
  static constexpr int kShift = C::kShift;
  static constexpr size_t kBytes = T == Type::kQ8_0   ? layout::kQ8_0Bytes
                                   : T == Type::kQ4_0 ? layout::kQ4_0Bytes
                                                      : layout::kMxfp4Bytes;
  static constexpr size_t kScale = T == Type::kQ8_0   ? layout::kQ8_0D
                                   : T == Type::kQ4_0 ? layout::kQ4_0D
                                                      : layout::kMxfp4E;
  static constexpr size_t kCodes = T == Type::kQ8_0   ? layout::kQ8_0Qs
                                   : T == Type::kQ4_0 ? layout::kQ4_0Qs
                                                      : layout::kMxfp4Qs;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  const uint8_t* p;
  PlainD(const MatrixView& w, size_t row) : p(block_row<kBlock32, kBytes>(w, row)) {}
  const uint8_t* at(size_t b) const { return p + kBytes * b; }
  K3_512_INLINE void fetch(size_t b) const { prefetch(at(b)); }
  K3_512_INLINE __m512i decode2(size_t b) const {
    return C::decode2(at(b) + kCodes, at(b + 1) + kCodes);
  }
  K3_512_INLINE __m256i decode1(size_t b) const { return C::decode1(at(b) + kCodes); }
  K3_512_INLINE __m128 scale4(size_t b) const { return C::scale4(at(b) + kScale, kBytes); }
  K3_512_INLINE float scale1(size_t b) const { return C::scale1(at(b) + kScale); }
};

// compressed-tensors: consecutive blocks are 32 contiguous bytes; scales in their own array
// (four of them one 32-bit load).
struct Mxfp4PackedD {
  using C = BlockCodec<Type::kMXFP4>;
  static constexpr bool kGemv4 = true;
  static constexpr int kShift = C::kShift;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  const uint8_t* p;
  const uint8_t* e;
  Mxfp4PackedD(const MatrixView& w, size_t row)
      : p(w.data.data() + row * (w.cols / 2)), e(w.e8m0.data() + row * (w.cols / 32)) {}
  const uint8_t* at(size_t b) const { return p + 16 * b; }
  K3_512_INLINE void fetch(size_t b) const { prefetch(p + 16 * b); }
  K3_512_INLINE __m512i decode2(size_t b) const { return C::decode2(p + 16 * b, p + 16 * b + 16); }
  K3_512_INLINE __m256i decode1(size_t b) const { return C::decode1(p + 16 * b); }
  K3_512_INLINE __m128 scale4(size_t b) const {
    std::uint32_t packed;
    std::memcpy(&packed, e + b, sizeof packed);
    return e8m0_4(packed);
  }
  K3_512_INLINE float scale1(size_t b) const { return C::scale1(e + b); }
};

namespace {

// ModelSlim int8 for the GEMM tile: u = q + 128, no block scale, the row scale and offset term
// applied at the end.
struct MsInt8D {
  static constexpr bool kGemv4 = false;  // its row kernel already streams at ~90% of read bandwidth
  static constexpr int kShift = 4;
  const uint8_t* p;
  MsInt8D(const MatrixView& w, size_t row) : p(w.data.data() + row * w.cols) {}
  K3_512_INLINE void fetch(size_t b) const { prefetch(p + 32 * b); }
  K3_512_INLINE __m256i decode1(size_t b) const {
    return _mm256_xor_si256(load256(p + 32 * b), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE __m512i decode2(size_t b) const {
    return _mm512_xor_si512(load512(p + 32 * b), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE float scale1(size_t) const { return 1.0f; }
  K3_512_INLINE __m128 scale4(size_t) const { return _mm_set1_ps(1.0f); }
  static float finish(const MatrixView& w, size_t row, const ActView& a, size_t act, float v) {
    const float off = ms_offset(w, row);
    return w.scale[row] * (v - off * a.row_xsum[act]);
  }
};

// GEMV over 4 rows at once: activation loads shared, four independent accumulator chains, in
// the family's block order.
template <class D>
K3_512 void q8_gemv4(const MatrixView& w, size_t r0, const ActView& a, float* y) {
  const size_t nb = a.blocks;
  const D dec[4] = {D(w, r0), D(w, r0 + 1), D(w, r0 + 2), D(w, r0 + 3)};
  // The four rows are adjacent in memory: prefetch the same position eight rows ahead (two
  // groups on), at least kPrefetchBytes away. A fixed 4 KiB distance lands inside this group
  // (measured: Q4_0 GEMV fell from ~80% to ~58% of read bandwidth).
  const size_t ahead =
      std::max<size_t>(8 * static_cast<size_t>(dec[1].at(0) - dec[0].at(0)), kPrefetchBytes);
  __m128 acc[4];  // per row, the family's four accumulators (see block_sums4)
  for (int r = 0; r < 4; ++r) acc[r] = _mm_setzero_ps();
  size_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const __m512i x0 = load512(a.qs + 32 * b);
    const __m512i x1 = load512(a.qs + 32 * b + 64);
    const __m128 dx = _mm_loadu_ps(a.d + b);
    for (int r = 0; r < 4; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(dec[r].at(b)) + ahead, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(dec[r].at(b + 2)) + ahead, _MM_HINT_T1);
      const __m128 sc = _mm_mul_ps(dec[r].scale4(b), dx);
      const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), dec[r].decode2(b), x0);
      const __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), dec[r].decode2(b + 2), x1);
      acc[r] =
          _mm_fmadd_ps(_mm_cvtepi32_ps(block_sums4<D::kShift>(s0, s1, a.isum + b)), sc, acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    if (b < nb) q8_tail<D, 1>(dec[r], a, 0, b, &acc[r]);
    y[r0 + r] = D::finish(w, r0 + r, a, 0, sum_of_4(acc[r]));
  }
}

template <class D>
K3_512 void q8_tile(const MatrixView& w, size_t u0, size_t nu, const ActView& a, float* y,
                    size_t ldy) {
  if (a.qs16 == nullptr) {  // small batch: no interleaved copy
    size_t r = u0;
    if constexpr (D::kGemv4) {
      if (a.rows == 1) {
        for (; r + 4 <= u0 + nu; r += 4) q8_gemv4<D>(w, r, a, y);
      }
    }
    const RowKernel row = avx512_kernels().row[static_cast<size_t>(w.type)];
    for (; r < u0 + nu; ++r) {
      for (size_t a0 = 0; a0 < a.rows; a0 += kMaxActs)
        row(w, r, a, a0, std::min(kMaxActs, a.rows - a0), y, ldy);
    }
    return;
  }
  q8_tile_gemm<D>(w, u0, nu, a, y, ldy);
}

// [v0 x8, v1 x8] from the two low lanes of an xmm.
K3_512_INLINE __m512i pair_index() {
  return _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
}

}  // namespace

// ModelSlim int8: y = scale * (sum_b dx_b ((q + 128) . qx - 128 isum)_b - offset * sum(x)), the
// 128 * isum correction in integers (block_sums4): with per-channel scales most codes are
// small, and a float correction would cancel badly. MsInt8D::finish applies scale and offset.
template <int NA>
K3_512 void row_ms_int8_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                          size_t ldy) {
  row_q8_n<MsInt8D, NA>(w, row, a, a0, y, ldy);
}

// ModelSlim int4 (version 1.0.0): packed row `unit` gives rows 2u (low nibbles) and 2u+1
// (high nibbles), both in natural column order. Codes are used as u = weight + 8 and vpdpbusd
// starts from -isum per lane, so the integer dot is exact. Per group g:
// out += scale2_g * (dot - off2_g * sum_g(x)).
template <int NA>
K3_512 void row_ms_int4_n(const MatrixView& w, size_t unit, const ActView& a, size_t a0, float* y,
                          size_t ldy) {
  // Plain locals rather than a structured binding of MsInt4Unit: GCC then keeps them in
  // registers across the group loop (the binding's version ran 25 % slower).
  const __m512i idx = pair_index();
  const size_t nb = a.blocks;
  const MsInt4Unit u(w, unit, nb);
  const uint8_t* const p = u.p;
  const size_t r0 = u.r0, r1 = u.r1, bpg = u.bpg, groups = u.groups;
  const __m512i m = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  __m512 out0[NA], out1[NA];
  float fix0[NA] = {}, fix1[NA] = {};  // the offset terms
  for (int i = 0; i < NA; ++i) out0[i] = out1[i] = _mm512_setzero_ps();
  for (size_t g = 0; g < groups; ++g) {
    __m512 g0[NA], g1[NA];
    float xs[NA] = {};
    for (int i = 0; i < NA; ++i) g0[i] = g1[i] = _mm512_setzero_ps();
    const size_t bend = (g + 1) * bpg;
    size_t b = g * bpg;
    for (; b + 2 <= bend; b += 2) {
      prefetch(p + 32 * b);
      const __m512i v = load512(p + 32 * b);
      const __m512i lo = _mm512_xor_si512(_mm512_and_si512(v, m), eight);
      const __m512i hi = _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m), eight);
      for (int i = 0; i < NA; ++i) {
        const size_t ab = (a0 + i) * nb + b;
        const __m512i x = load512(a.qs + 32 * ab);
        const __m512 dx =
            _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castsi128_ps(load64(a.d + ab))));
        const __m512i n =
            _mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(load64(a.nisum + ab)));
        g0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(n, lo, x)), dx, g0[i]);
        g1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(n, hi, x)), dx, g1[i]);
        xs[i] += a.xsum[ab] + a.xsum[ab + 1];
      }
    }
    if (b < bend) {  // odd number of blocks in the group: one 32-block in the low half
      const __m512i v = _mm512_zextsi256_si512(load256(p + 32 * b));
      const __m512i lo = _mm512_xor_si512(_mm512_and_si512(v, m), eight);
      const __m512i hi = _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m), eight);
      for (int i = 0; i < NA; ++i) {
        const size_t ab = (a0 + i) * nb + b;
        const __m512i x = _mm512_zextsi256_si512(load256(a.qs + 32 * ab));  // upper lanes: dot 0
        const __m512 dx = _mm512_set1_ps(a.d[ab]);
        const __m512i n = _mm512_maskz_set1_epi32(0x00ff, a.nisum[ab]);  // and no correction
        g0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(n, lo, x)), dx, g0[i]);
        g1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(n, hi, x)), dx, g1[i]);
        xs[i] += a.xsum[ab];
      }
    }
    for (int i = 0; i < NA; ++i) {
      if (w.group_size == 0) {
        out0[i] = _mm512_add_ps(out0[i], g0[i]);
        out1[i] = _mm512_add_ps(out1[i], g1[i]);
        fix0[i] -= ms_offset(w, r0) * xs[i];
        fix1[i] -= ms_offset(w, r1) * xs[i];
      } else {
        const size_t i0 = r0 * groups + g, i1 = r1 * groups + g;
        const float s0 = w.group_scale[i0], s1 = w.group_scale[i1];
        out0[i] = _mm512_fmadd_ps(g0[i], _mm512_set1_ps(s0), out0[i]);
        out1[i] = _mm512_fmadd_ps(g1[i], _mm512_set1_ps(s1), out1[i]);
        fix0[i] -= s0 * ms_group_offset(w, i0) * xs[i];
        fix1[i] -= s1 * ms_group_offset(w, i1) * xs[i];
      }
    }
  }
  for (int i = 0; i < NA; ++i) {
    y[(a0 + i) * ldy + r0] = w.scale[r0] * (_mm512_reduce_add_ps(out0[i]) + fix0[i]);
    y[(a0 + i) * ldy + r1] = w.scale[r1] * (_mm512_reduce_add_ps(out1[i]) + fix1[i]);
  }
}

K3_AVX512_ROWS(row_q8_n, Q8_0D);
K3_AVX512_ROWS(row_q8_n, Q4_0D);
K3_AVX512_ROWS(row_q8_n, Mxfp4D);
K3_AVX512_ROWS(row_q8_n, Mxfp4PackedD);
K3_AVX512_ROWS(row_ms_int8_n);
K3_AVX512_ROWS(row_ms_int4_n);

void add_q8_tiles(KernelTable& t) {
  t.tile[static_cast<size_t>(Type::kQ8_0)] = q8_tile<Q8_0D>;
  t.tile[static_cast<size_t>(Type::kQ4_0)] = q8_tile<Q4_0D>;
  t.tile[static_cast<size_t>(Type::kMXFP4)] = q8_tile<Mxfp4D>;
  t.tile[static_cast<size_t>(Type::kMXFP4Packed)] = q8_tile<Mxfp4PackedD>;
  t.tile[static_cast<size_t>(Type::kModelSlimInt8)] = q8_tile<MsInt8D>;
}

}  // namespace k3::quant::detail::avx512

#endif
