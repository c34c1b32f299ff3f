// AVX-512 (F, BW, VL, DQ, VNNI) kernel table: the row kernels of kernel_rows.inc and the tile
// kernels of every block family (kernels_avx512.h lists the files), and the activation
// quantizers, which give the scalar quantizers' bits (activations.cpp).
#include <cstdint>
#include <cstring>

#include "quant/fp.h"
#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

namespace k3::quant::detail {
namespace avx512 {
namespace {

// Int8 codes of v * inv as code_of (activations.cpp): round to nearest even, NaN to 0, +-127.
K3_512_INLINE __m512i q8_codes(__m512 v, float inv) {
  const __m512 limit = _mm512_set1_ps(127.0f);
  const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(inv)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q),
                                       _mm512_max_ps(_mm512_min_ps(r, limit), -limit));
  return _mm512_cvtps_epi32(c);
}

// The largest |x| of a 32-element block held in x0, x1, NaN skipped (as std::max(amax, |x|)
// does in the scalar quantizers).
K3_512_INLINE float block32_amax(__m512 x0, __m512 x1) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 a0 = _mm512_mask_abs_ps(zero, _mm512_cmp_ps_mask(x0, x0, _CMP_ORD_Q), x0);
  const __m512 a1 = _mm512_mask_abs_ps(zero, _mm512_cmp_ps_mask(x1, x1, _CMP_ORD_Q), x1);
  return _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
}

// quantize_q8_32 (activations.cpp) with the same bits: amax over the non-NaN |x|, the float sum
// in element order (kept scalar: a vector sum would reorder it), codes by vrndscaleps (round to
// nearest even, as nearbyint), NaN to 0, clamped to +-127.
K3_512 void q8_block32_row(const float* x, size_t cols, bool even_odd, std::int8_t* qs, float* d,
                           std::int32_t* isum, float* xsum, float* row_xsum) {
  // Even/odd order (compressed-tensors MXFP4): codes of the even elements, then the odd ones.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  float rx = 0.0f;
  for (size_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const float amax = block32_amax(x0, x1);
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    if (even_odd) {
      const __m512 e = _mm512_permutex2var_ps(x0, even, x1);
      x1 = _mm512_permutex2var_ps(x0, odd, x1);
      x0 = e;
    }
    const __m512i c0 = q8_codes(x0, inv), c1 = q8_codes(x1, inv);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 32 * b), _mm512_cvtepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 32 * b + 16), _mm512_cvtepi32_epi8(c1));
    const std::int32_t s = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
    d[b] = scale;
    isum[b] = s;
    if (xsum != nullptr) {  // element order, as the scalar quantizer
      float sum = 0.0f;
      for (int j = 0; j < 32; ++j) sum += xb[j];
      xsum[b] = sum;
      rx += sum;
    }
  }
  if (row_xsum != nullptr) *row_xsum = rx;
}

// quantize_q8_k (activations.cpp) with the same bits: the scale from the first element of the
// largest non-NaN |x| (the scalar loop's strict > keeps the first and skips NaN), codes by
// ggml's nearest_int trick done on the vector (1.5 * 2^23 added, the low mantissa bits taken),
// clamped to +-127; one bsum per 16 codes, one vector each.
K3_512 void q8_k_row(const float* x, size_t cols, std::int8_t* qs, float* d, std::int16_t* bsums) {
  const __m512 zero = _mm512_setzero_ps();
  for (size_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    std::int8_t* q = qs + 256 * b;
    std::int16_t* bs = bsums + 16 * b;
    __m512 amax_v = zero;
    for (int c = 0; c < 16; ++c) {
      const __m512 v = _mm512_loadu_ps(xb + 16 * c);
      amax_v =
          _mm512_max_ps(amax_v, _mm512_mask_abs_ps(zero, _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v));
    }
    const float amax = _mm512_reduce_max_ps(amax_v);
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(q, 0, 256);
      std::memset(bs, 0, 16 * sizeof(std::int16_t));
      continue;
    }
    float max = 0.0f;
    for (int c = 0; c < 16; ++c) {
      const __m512 v = _mm512_loadu_ps(xb + 16 * c);
      const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (at != 0) {
        max = xb[16 * c + static_cast<int>(__builtin_ctz(at))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m512 scale = _mm512_set1_ps(iscale), shifter = _mm512_set1_ps(12582912.f);
    const __m512i mantissa = _mm512_set1_epi32(0x007fffff), bias = _mm512_set1_epi32(0x00400000);
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    for (int c = 0; c < 16; ++c) {
      const __m512 shifted =
          _mm512_add_ps(_mm512_mul_ps(scale, _mm512_loadu_ps(xb + 16 * c)), shifter);
      __m512i code =
          _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(shifted), mantissa), bias);
      code = _mm512_max_epi32(_mm512_min_epi32(code, hi), lo);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * c), _mm512_cvtepi32_epi8(code));
      bs[c] = static_cast<std::int16_t>(_mm512_reduce_add_epi32(code));
    }
    d[b] = 1 / iscale;
  }
}

// ggml's nearest_int (fp.h) on 16 lanes: 1.5 * 2^23 added, the low mantissa bits taken.
K3_512_INLINE __m512i nearest_ints(__m512 v) {
  const __m512 shifted = _mm512_add_ps(v, _mm512_set1_ps(12582912.f));
  return _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(shifted),
                                           _mm512_set1_epi32(0x007fffff)),
                          _mm512_set1_epi32(0x00400000));
}

// A Q2_K code: nearest_int(iscale * (x - lo)) clamped to [0, 3].
K3_512_INLINE __m512i q2_code(__m512 iscale, __m512 lo, __m512 x) {
  const __m512i l = nearest_ints(_mm512_mul_ps(iscale, _mm512_sub_ps(x, lo)));
  return _mm512_max_epi32(_mm512_setzero_si512(), _mm512_min_epi32(_mm512_set1_epi32(3), l));
}

// Q8_0 codes of x * inv as quant_q8_0 (reference.cpp): roundf (half away from zero), NaN to 0,
// clamped to [-128, 127]. roundf as truncation plus one step where the remainder, exact in
// float, is at least a half; clamping to [-129, 128] first keeps an infinite product (a denormal
// scale) in the conversion's range and changes no code.
K3_512_INLINE __m512i q8_0_codes(__m512 x, __m512 inv) {
  const __m512i one = _mm512_set1_epi32(1);
  __m512 v = _mm512_mul_ps(x, inv);
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
  v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-129.0f)), _mm512_set1_ps(128.0f));
  __m512i t = _mm512_cvttps_epi32(v);
  const __m512 r = _mm512_sub_ps(v, _mm512_cvtepi32_ps(t));
  t = _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask(r, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t, one);
  t = _mm512_mask_sub_epi32(t, _mm512_cmp_ps_mask(r, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), t, one);
  return _mm512_max_epi32(_mm512_min_epi32(t, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
}

// quant_q8_0 (reference.cpp) with the same bits: the scale and its inverse in scalar float as
// there. Re-encoding a drafter's BF16
// matrices as Q8_0 at load was mostly the scalar block's roundf calls.
K3_512 void q8_0_block(const float* x, std::uint8_t* b) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const float d = block32_amax(x0, x1) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b + layout::kQ8_0D, f32_to_fp16(d));
  const __m512 inv = _mm512_set1_ps(id);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b + layout::kQ8_0Qs),
                   _mm512_cvtepi32_epi8(q8_0_codes(x0, inv)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b + layout::kQ8_0Qs + 16),
                   _mm512_cvtepi32_epi8(q8_0_codes(x1, inv)));
}

// q2_k_fit (reference.cpp) with the same bits: lane j fits sub-block j, every step of fit_affine
// (make_qkx2_quants with weights |x|, nmax 3, rmin -0.5, rdelta 0.1, 15 steps, absolute error)
// in its order, a branch becoming a per-lane blend. Vector i holds element i of every sub-block.
K3_512 void q2_k_fit_row(const float* x, std::uint8_t* L, float* scales, float* neg_mins) {
  constexpr int kNmax = 3, kSteps = 15;
  const __m512i column = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(16));
  const __m512 zero = _mm512_setzero_ps();
  const __m512i code_lo = _mm512_setzero_si512();
  __m512 xv[16], wv[16];
  for (int i = 0; i < 16; ++i) {
    xv[i] = _mm512_i32gather_ps(_mm512_add_epi32(column, _mm512_set1_epi32(i)), x, 4);
    wv[i] = _mm512_abs_ps(xv[i]);
  }
  __m512 lo = xv[0], hi = xv[0], sum_w = wv[0];
  __m512 sum_x = _mm512_mul_ps(sum_w, xv[0]);
  for (int i = 1; i < 16; ++i) {
    lo = _mm512_min_ps(xv[i], lo);  // x < lo ? x : lo, as the scalar branch
    hi = _mm512_max_ps(xv[i], hi);
    sum_w = _mm512_add_ps(sum_w, wv[i]);
    sum_x = _mm512_add_ps(sum_x, _mm512_mul_ps(wv[i], xv[i]));
  }
  lo = _mm512_mask_mov_ps(lo, _mm512_cmp_ps_mask(lo, zero, _CMP_GT_OQ), zero);
  const __mmask16 flat = _mm512_cmp_ps_mask(hi, lo, _CMP_EQ_OQ);
  const __m512 flat_lo = lo;
  __m512 iscale = _mm512_div_ps(_mm512_set1_ps(static_cast<float>(kNmax)), _mm512_sub_ps(hi, lo));
  __m512 scale = _mm512_div_ps(_mm512_set1_ps(1.0f), iscale);
  __m512 best_error = zero;
  __m512i codes[16];
  for (int i = 0; i < 16; ++i) {
    codes[i] = q2_code(iscale, lo, xv[i]);
    const __m512 diff = _mm512_sub_ps(
        _mm512_add_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(codes[i])), lo), xv[i]);
    best_error = _mm512_add_ps(best_error, _mm512_mul_ps(wv[i], _mm512_abs_ps(diff)));
  }
  for (int is = 0; is <= kSteps; ++is) {
    const float grid = -0.5f + 0.1f * static_cast<float>(is) + static_cast<float>(kNmax);
    iscale = _mm512_div_ps(_mm512_set1_ps(grid), _mm512_sub_ps(hi, lo));
    __m512 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    __m512i trial[16];
    for (int i = 0; i < 16; ++i) {
      trial[i] = q2_code(iscale, lo, xv[i]);
      const __m512 fl = _mm512_cvtepi32_ps(trial[i]);
      const __m512 wl = _mm512_mul_ps(wv[i], fl);
      sum_l = _mm512_add_ps(sum_l, wl);
      sum_l2 = _mm512_add_ps(sum_l2, _mm512_mul_ps(wl, fl));
      sum_xl = _mm512_add_ps(sum_xl, _mm512_mul_ps(wl, xv[i]));
    }
    const __m512 det = _mm512_sub_ps(_mm512_mul_ps(sum_w, sum_l2), _mm512_mul_ps(sum_l, sum_l));
    const __mmask16 solvable = _mm512_cmp_ps_mask(det, zero, _CMP_GT_OQ);
    if (solvable == 0) continue;
    __m512 this_scale = _mm512_div_ps(
        _mm512_sub_ps(_mm512_mul_ps(sum_w, sum_xl), _mm512_mul_ps(sum_x, sum_l)), det);
    __m512 this_min = _mm512_div_ps(
        _mm512_sub_ps(_mm512_mul_ps(sum_l2, sum_x), _mm512_mul_ps(sum_l, sum_xl)), det);
    const __mmask16 positive = _mm512_cmp_ps_mask(this_min, zero, _CMP_GT_OQ);
    this_min = _mm512_mask_mov_ps(this_min, positive, zero);
    this_scale = _mm512_mask_mov_ps(this_scale, positive, _mm512_div_ps(sum_xl, sum_l2));
    __m512 cur_error = zero;
    for (int i = 0; i < 16; ++i) {
      const __m512 diff = _mm512_sub_ps(
          _mm512_add_ps(_mm512_mul_ps(this_scale, _mm512_cvtepi32_ps(trial[i])), this_min), xv[i]);
      cur_error = _mm512_add_ps(cur_error, _mm512_mul_ps(wv[i], _mm512_abs_ps(diff)));
    }
    const __mmask16 better = solvable & _mm512_cmp_ps_mask(cur_error, best_error, _CMP_LT_OQ);
    for (int i = 0; i < 16; ++i) codes[i] = _mm512_mask_mov_epi32(codes[i], better, trial[i]);
    best_error = _mm512_mask_mov_ps(best_error, better, cur_error);
    scale = _mm512_mask_mov_ps(scale, better, this_scale);
    lo = _mm512_mask_mov_ps(lo, better, this_min);
  }
  // A flat sub-block (hi == lo after lo was clamped to <= 0): codes 0, scale 0, -min = -lo.
  _mm512_storeu_ps(scales, _mm512_mask_mov_ps(scale, flat, zero));
  const __m512 min = _mm512_mask_mov_ps(lo, flat, flat_lo);
  _mm512_storeu_ps(neg_mins, _mm512_castsi512_ps(_mm512_xor_si512(  // -min: the sign flipped
                                 _mm512_castps_si512(min), _mm512_set1_epi32(INT32_MIN))));
  alignas(64) std::uint8_t by_element[16][16];  // [i][j]
  for (int i = 0; i < 16; ++i) {
    _mm_store_si128(reinterpret_cast<__m128i*>(by_element[i]),
                    _mm512_cvtepi32_epi8(_mm512_mask_mov_epi32(codes[i], flat, code_lo)));
  }
  for (int j = 0; j < 16; ++j)
    for (int i = 0; i < 16; ++i) L[16 * j + i] = by_element[i][j];
}

}  // namespace
}  // namespace avx512

namespace {

KernelTable make_table() {
  using namespace avx512;
  KernelTable t;
  auto set = [&t](Type type, RowKernel k) { t.row[static_cast<size_t>(type)] = k; };
#include "quant/kernel_rows.inc"
  add_float_tiles(t);
  add_q8_tiles(t);
  add_repacked_tiles(t);
  add_k_quant_tiles(t);
  add_vnni_tiles(t);
  t.q8_block32 = q8_block32_row;
  t.q8_k = q8_k_row;
  t.q2_k_fit = q2_k_fit_row;
  t.q8_0_block = q8_0_block;
  return t;
}

}  // namespace

const KernelTable& avx512_kernels() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace k3::quant::detail

#else  // not x86-64

namespace k3::quant::detail {
const KernelTable& avx512_kernels() {
  static const KernelTable table{};
  return table;
}
}  // namespace k3::quant::detail

#endif
