// AVX2 + FMA + F16C kernels. Every function carries a target attribute instead of the whole file
// being compiled with -mavx2: inline functions from shared headers then stay baseline x86-64,
// so nothing AVX2 can leak into code that runs before the cpuid check.
#include <cstdint>
#include <cstring>

#include "quant/fp.h"
#include "quant/kernel_table.h"
#include "quant/kernels_x86.h"
#include "quant/reference.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

namespace k3::quant::detail {
namespace {

using std::size_t;
using std::uint8_t;

K3_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

K3_AVX2_INLINE float half(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// Sum over pairs then quads of u8 * s8 products: 8 int32 lanes (|pair| <= 2*255*127 would
// saturate int16, so callers keep u8 <= 128 or the activation magnitude <= 127 with u8 <= 128).
K3_AVX2_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Signed x signed through |w| and sign(x, w).
K3_AVX2_INLINE __m256i dot_s8s8(__m256i w, __m256i x) {
  return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

// ------------------------------------------------------------------ fp32 activations

using Floats = __m256;
constexpr size_t kLanes = 8;

K3_AVX2_INLINE Floats fload(const float* p) { return _mm256_loadu_ps(p); }
K3_AVX2_INLINE Floats fmadd(Floats a, Floats b, Floats c) { return _mm256_fmadd_ps(a, b, c); }

template <Type T>
K3_AVX2_INLINE Floats load_w(const uint8_t* p) {
  if constexpr (T == Type::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == Type::kF16) {
    return _mm256_cvtph_ps(load128(p));
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
}

template <Type T>
float load_w1(const uint8_t* p) {
  if constexpr (T == Type::kF32) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else if constexpr (T == Type::kF16) {
    return fp16_to_f32(load_u16(p));
  } else {
    return bf16_to_f32(load_u16(p));
  }
}

// The horizontal sum, then the last elements one by one.
template <Type T>
K3_AVX2_INLINE float finish_row(Floats acc0, Floats acc1, const uint8_t* p, const float* x,
                                size_t left) {
  constexpr size_t kEs = T == Type::kF32 ? 4 : 2;
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (size_t t = 0; t < left; ++t) s += load_w1<T>(p + kEs * t) * x[t];
  return s;
}

#define K3_SIMD K3_AVX2
#include "quant/kernels_float.inc"
#undef K3_SIMD

// ------------------------------------------------------------------ int8 blocks of 32

// Weight decoders: 32 weights of block b as int8 in activation order, plus the block scale.
// kSigned: the bytes are signed weights (dot via sign trick). Otherwise they are u8 = weight + 8
// and the kernel subtracts 8 * sum(x) (one isum per int32 lane: 8 lanes * isum).
struct Q8_0D {
  static constexpr bool kSigned = true;
  static const uint8_t* row(const MatrixView& w, size_t r) {
    return block_row<kBlock32, layout::kQ8_0Bytes>(w, r);
  }
  static const uint8_t* block(const MatrixView&, const uint8_t* row, size_t, size_t b) {
    return row + layout::kQ8_0Bytes * b;
  }
  K3_AVX2_INLINE static __m256i decode(const uint8_t* blk) { return load256(blk + 2); }
  K3_AVX2_INLINE static float scale(const MatrixView&, size_t, const uint8_t* blk, size_t) {
    return half(blk);
  }
};

struct Q4_0D {
  static constexpr bool kSigned = false;
  static const uint8_t* row(const MatrixView& w, size_t r) {
    return block_row<kBlock32, layout::kQ4_0Bytes>(w, r);
  }
  static const uint8_t* block(const MatrixView&, const uint8_t* row, size_t, size_t b) {
    return row + layout::kQ4_0Bytes * b;
  }
  K3_AVX2_INLINE static __m256i decode(const uint8_t* blk) {
    const __m128i q = load128(blk + 2);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
  }
  K3_AVX2_INLINE static float scale(const MatrixView&, size_t, const uint8_t* blk, size_t) {
    return half(blk);
  }
};

K3_AVX2_INLINE __m256i mxfp4_lookup(__m128i q) {
  const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m));
  return _mm256_set_m128i(hi, lo);
}

struct Mxfp4D {
  static constexpr bool kSigned = true;
  static const uint8_t* row(const MatrixView& w, size_t r) {
    return block_row<kBlock32, layout::kMxfp4Bytes>(w, r);
  }
  static const uint8_t* block(const MatrixView&, const uint8_t* row, size_t, size_t b) {
    return row + layout::kMxfp4Bytes * b;
  }
  K3_AVX2_INLINE static __m256i decode(const uint8_t* blk) {
    return mxfp4_lookup(load128(blk + 1));
  }
  K3_AVX2_INLINE static float scale(const MatrixView&, size_t, const uint8_t* blk, size_t) {
    return e8m0_half(blk[0]);
  }
};

// compressed-tensors: nibbles [row, cols/2], E8M0 [row, cols/32]; activations are even/odd.
struct Mxfp4PackedD {
  static constexpr bool kSigned = true;
  static const uint8_t* row(const MatrixView&, size_t) { return nullptr; }  // see block()
  static const uint8_t* block(const MatrixView& w, const uint8_t*, size_t row, size_t b) {
    return w.data.data() + row * (w.cols / 2) + 16 * b;
  }
  K3_AVX2_INLINE static __m256i decode(const uint8_t* blk) { return mxfp4_lookup(load128(blk)); }
  K3_AVX2_INLINE static float scale(const MatrixView& w, size_t row, const uint8_t*, size_t b) {
    return e8m0_half(w.e8m0[row * (w.cols / 32) + b]);
  }
};

// The int32 lanes of one block's dot (lane l: elements 4l .. 4l+3), the offset of unsigned
// codes taken out per lane. row_q8_n and the repacked GEMV both form a block's lanes here, so
// they give a row the same bits.
template <class D>
K3_AVX2_INLINE __m256i block_lanes(__m256i q, __m256i x, std::int32_t isum) {
  if constexpr (D::kSigned) {
    return dot_s8s8(q, x);
  } else {
    return _mm256_sub_epi32(dot_u8s8(q, x), _mm256_set1_epi32(isum));
  }
}

template <class D, int NA>
K3_AVX2_INLINE void q8_block(const MatrixView& w, const uint8_t* p, size_t row, const ActView& a,
                             size_t a0, size_t b, __m256* acc) {
  const size_t nb = a.blocks;
  const uint8_t* blk = D::block(w, p, row, b);
  prefetch(blk);
  const __m256i q = D::decode(blk);
  const float dw = D::scale(w, row, blk, b);
  for (int i = 0; i < NA; ++i) {
    const size_t ab = (a0 + i) * nb + b;
    const __m256i s = block_lanes<D>(q, load256(a.qs + 32 * ab), a.isum[ab]);
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * a.d[ab]), acc[i]);
  }
}

// Even and odd blocks accumulate separately: one FMA chain per block would bound the loop by
// the FMA latency.
template <class D, int NA>
K3_AVX2 void row_q8_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                      size_t ldy) {
  const uint8_t* p = D::row(w, row);
  const size_t nb = a.blocks;
  __m256 acc0[NA], acc1[NA];
  for (int i = 0; i < NA; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    q8_block<D, NA>(w, p, row, a, a0, b, acc0);
    q8_block<D, NA>(w, p, row, a, a0, b + 1, acc1);
  }
  if (b < nb) q8_block<D, NA>(w, p, row, a, a0, b, acc0);
  for (int i = 0; i < NA; ++i) y[(a0 + i) * ldy + row] = hsum(_mm256_add_ps(acc0[i], acc1[i]));
}

// ModelSlim int8: y = scale * (sum_b dx_b (q . qx)_b - offset * sum(x)).
template <int NA>
K3_AVX2 void row_ms_int8_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                           size_t ldy) {
  const uint8_t* p = w.data.data() + row * w.cols;
  const size_t nb = a.blocks;
  __m256 acc[2][NA];
  float xs[NA] = {};
  for (int i = 0; i < NA; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    prefetch(p + 32 * b);
    const __m256i q = load256(p + 32 * b);
    for (int i = 0; i < NA; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      const __m256i s = dot_s8s8(q, load256(a.qs + 32 * ab));
      acc[b & 1][i] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(a.d[ab]), acc[b & 1][i]);
      xs[i] += a.xsum[ab];
    }
  }
  const float off = ms_offset(w, row);
  for (int i = 0; i < NA; ++i) {
    y[(a0 + i) * ldy + row] =
        w.scale[row] * (hsum(_mm256_add_ps(acc[0][i], acc[1][i])) - off * xs[i]);
  }
}

// ModelSlim int4: packed row `unit` feeds rows 2u (low nibbles) and 2u+1 (high nibbles).
template <int NA>
K3_AVX2 void row_ms_int4_n(const MatrixView& w, size_t unit, const ActView& a, size_t a0, float* y,
                           size_t ldy) {
  const size_t nb = a.blocks;
  const auto [p, r0, r1, bpg, groups] = MsInt4Unit(w, unit, nb);
  const __m256i m = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
  float out0[NA] = {}, out1[NA] = {};
  for (size_t g = 0; g < groups; ++g) {
    __m256 g0[NA], g1[NA];
    float xs[NA] = {};
    for (int i = 0; i < NA; ++i) g0[i] = g1[i] = _mm256_setzero_ps();
    for (size_t b = g * bpg; b < (g + 1) * bpg; ++b) {
      prefetch(p + 32 * b);
      const __m256i v = load256(p + 32 * b);
      const __m256i lo = _mm256_xor_si256(_mm256_and_si256(v, m), eight);  // weight + 8
      const __m256i hi = _mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m), eight);
      for (int i = 0; i < NA; ++i) {
        const size_t ab = (a0 + i) * nb + b;
        const __m256i x = load256(a.qs + 32 * ab);
        const __m256i corr = _mm256_set1_epi32(a.isum[ab]);
        const __m256 dx = _mm256_set1_ps(a.d[ab]);
        g0[i] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot_u8s8(lo, x), corr)), dx, g0[i]);
        g1[i] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot_u8s8(hi, x), corr)), dx, g1[i]);
        xs[i] += a.xsum[ab];
      }
    }
    for (int i = 0; i < NA; ++i) {
      const float s0 = hsum(g0[i]), s1 = hsum(g1[i]);
      if (w.group_size == 0) {
        const float o0 = ms_offset(w, r0);
        const float o1 = ms_offset(w, r1);
        out0[i] += s0 - o0 * xs[i];
        out1[i] += s1 - o1 * xs[i];
      } else {
        const size_t i0 = r0 * groups + g, i1 = r1 * groups + g;
        const float o0 = ms_group_offset(w, i0);
        const float o1 = ms_group_offset(w, i1);
        out0[i] += w.group_scale[i0] * (s0 - o0 * xs[i]);
        out1[i] += w.group_scale[i1] * (s1 - o1 * xs[i]);
      }
    }
  }
  for (int i = 0; i < NA; ++i) {
    y[(a0 + i) * ldy + r0] = w.scale[r0] * out0[i];
    y[(a0 + i) * ldy + r1] = w.scale[r1] * out1[i];
  }
}

// ------------------------------------------------------------------ K-quants x Q8_K

// Shuffle masks that turn 16 scale bytes (both lanes) into int16 [s_j x8 | s_j+1 x8].
K3_AVX2_INLINE __m256i pair_scale_mask(int j) {
  const char z = static_cast<char>(0x80);
  const auto a = static_cast<char>(j), b = static_cast<char>(j + 1);
  return _mm256_setr_epi8(a, z, a, z, a, z, a, z, a, z, a, z, a, z, a, z, b, z, b, z, b, z, b, z, b,
                          z, b, z, b, z, b, z);
}

template <int NA>
K3_AVX2 void row_q2_k_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                        size_t ldy) {
  const uint8_t* p = block_row<kBlockK, layout::kQ2KBytes>(w, row);
  const size_t nb = a.blocks;
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc[NA];
  for (int i = 0; i < NA; ++i) acc[i] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = p + layout::kQ2KBytes * b;
    prefetch(blk);
    prefetch(blk + 64);
    const __m128i sc8 = load128(blk + layout::kQ2KScales);
    const __m256i scales = _mm256_broadcastsi128_si256(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
    const __m256i mins =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
    const float d = half(blk + layout::kQ2KD), dmin = half(blk + layout::kQ2KDmin);
    __m256i sum[NA];
    for (int i = 0; i < NA; ++i) sum[i] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q32 = load256(blk + layout::kQ2KQs + 32 * h);
      for (int s = 0; s < 4; ++s) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(q32, 2 * s), m3);
        const __m256i sc = _mm256_shuffle_epi8(scales, pair_scale_mask(8 * h + 2 * s));
        for (int i = 0; i < NA; ++i) {
          const size_t ab = (a0 + i) * nb + b;
          const __m256i x = load256(a.qs + 256 * ab + 128 * h + 32 * s);
          sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), sc));
        }
      }
    }
    for (int i = 0; i < NA; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      const __m256i msum = _mm256_madd_epi16(mins, load256(a.bsums + 16 * ab));
      const float dx = a.d[ab];
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(d * dx), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * dx), acc[i]);
    }
  }
  for (int i = 0; i < NA; ++i) y[(a0 + i) * ldy + row] = hsum(acc[i]);
}

// Signed int16 scales: permute the 16 x int16 vector so both lanes hold the half with s_j,
// then pick s_j (low lane) and s_j+1 (high lane).
K3_AVX2_INLINE __m256i pair_scale16(__m256i sc16, int j) {
  const __m256i half_lanes = j < 8 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                   : _mm256_permute2x128_si256(sc16, sc16, 0x11);
  const auto a = static_cast<char>(2 * (j % 8)), b = static_cast<char>(2 * (j % 8) + 2);
  const auto a1 = static_cast<char>(a + 1), b1 = static_cast<char>(b + 1);
  const __m256i mask = _mm256_setr_epi8(a, a1, a, a1, a, a1, a, a1, a, a1, a, a1, a, a1, a, a1, b,
                                        b1, b, b1, b, b1, b, b1, b, b1, b, b1, b, b1, b, b1);
  return _mm256_shuffle_epi8(half_lanes, mask);
}

template <int NA>
K3_AVX2 void row_q3_k_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                        size_t ldy) {
  const uint8_t* p = block_row<kBlockK, layout::kQ3KBytes>(w, row);
  const size_t nb = a.blocks;
  const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  __m256 acc[NA];
  for (int i = 0; i < NA; ++i) acc[i] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = p + layout::kQ3KBytes * b;
    prefetch(blk);
    prefetch(blk + 64);
    const __m256i sc16 = _mm256_cvtepi8_epi16(q3_k_scales(blk + layout::kQ3KScales));
    const __m256i hm = load256(blk + layout::kQ3KHmask);
    const float d = half(blk + layout::kQ3KD);
    __m256i sum[NA];
    for (int i = 0; i < NA; ++i) sum[i] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q32 = load256(blk + layout::kQ3KQs + 32 * h);
      for (int s = 0; s < 4; ++s) {
        const int c = 4 * h + s;  // 32-element chunk: its high bits are bit c of hmask
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
        const __m256i high =
            _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), four);
        const __m256i u =
            _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q32, 2 * s), m3), high);
        const __m256i scp = pair_scale16(sc16, 2 * c);
        for (int i = 0; i < NA; ++i) {
          const size_t ab = (a0 + i) * nb + b;
          const __m256i x = load256(a.qs + 256 * ab + 32 * c);
          sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scp));
        }
      }
    }
    for (int i = 0; i < NA; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      // u = weight + 4: subtract 4 * sum_j sc_j * bsum_j.
      const __m256i corr =
          _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(a.bsums + 16 * ab)), 2);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum[i], corr)),
                               _mm256_set1_ps(d * a.d[ab]), acc[i]);
    }
  }
  for (int i = 0; i < NA; ++i) y[(a0 + i) * ldy + row] = hsum(acc[i]);
}

// ------------------------------------------------------------------ repacked (quant/repack.h)

// Batch-1 GEMV on one group of 4 repacked rows, read as one sequential stream of super-blocks
// (4 scales, then the 4 payloads). Offsets of unsigned codes are removed exactly by seeding
// one int32 lane per row with -C * isum.
template <Type T>
K3_AVX2_INLINE __m128 group_scales(const uint8_t* p, float dx) {
  if constexpr (T == Type::kMXFP4) {
    return _mm_mul_ps(
        _mm_setr_ps(e8m0_half(p[0]), e8m0_half(p[1]), e8m0_half(p[2]), e8m0_half(p[3])),
        _mm_set1_ps(dx));
  } else {
    return _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
                      _mm_set1_ps(dx));
  }
}

// Batch 1 over one group of 4 repacked rows, each row computed exactly as row_q8_n computes it
// (same decoder, same int32 lanes, even and odd blocks in their own accumulators, the same
// final sum), so a row's value does not depend on the layout path or the batch: the group's
// stream is read once, the activation block loaded once for the four rows.
template <Type T>
K3_AVX2 void gemv_group(const MatrixView& w, size_t r0, const ActView& a, float* y) {
  constexpr size_t kSb = T == Type::kMXFP4 ? 1 : 2;   // scale bytes per row
  constexpr size_t kQb = T == Type::kQ8_0 ? 32 : 16;  // payload bytes per row
  constexpr size_t kSuper = 4 * (kSb + kQb);
  using D = std::conditional_t<T == Type::kQ8_0, Q8_0D,
                               std::conditional_t<T == Type::kQ4_0, Q4_0D, Mxfp4D>>;
  const size_t nb = a.blocks;
  const uint8_t* g = w.data.data() + r0 * (nb * kSuper / 4);
  __m256 acc[2][4];
  for (auto& parity : acc)
    for (auto& r : parity) r = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* p = g + kSuper * b;
    prefetch_block(p, kSuper);
    const __m256i x = load256(a.qs + 32 * b);
    const __m128 sc = group_scales<T>(p, a.d[b]);
    alignas(16) float dw_dx[4];
    _mm_store_ps(dw_dx, sc);
    for (int r = 0; r < 4; ++r) {
      // The row decoders read a block as [scale][payload]: point kSb bytes before the payload.
      const __m256i s = block_lanes<D>(D::decode(p + 4 * kSb + kQb * r - kSb), x, a.isum[b]);
      acc[b & 1][r] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw_dx[r]), acc[b & 1][r]);
    }
  }
  for (int r = 0; r < 4; ++r) y[r0 + r] = hsum(_mm256_add_ps(acc[0][r], acc[1][r]));
}

// Batch 1 on the repacked stream; larger batches unpack the tile and run the row kernels.
template <Type T>
K3_AVX2 void repacked_tile(const MatrixView& w, size_t r0, size_t nr, const ActView& a, float* y,
                           size_t ldy) {
  if (a.rows == 1) {
    for (size_t r = r0; r < r0 + nr; r += 4) gemv_group<T>(w, r, a, y);
    return;
  }
  run_unpacked(w, r0, nr, a, y, ldy, avx2_kernels().row[static_cast<size_t>(T)], nullptr);
}

// ------------------------------------------------------------------ the table

KernelTable make_table() {
  KernelTable t;
  auto set = [&t](Type type, RowKernel k) { t.row[static_cast<size_t>(type)] = k; };
#include "quant/kernel_rows.inc"
  t.repacked[static_cast<size_t>(Type::kQ8_0)] = repacked_tile<Type::kQ8_0>;
  t.repacked[static_cast<size_t>(Type::kQ4_0)] = repacked_tile<Type::kQ4_0>;
  t.repacked[static_cast<size_t>(Type::kMXFP4)] = repacked_tile<Type::kMXFP4>;
  return t;
}

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace k3::quant::detail

#else  // not x86-64: no AVX2 kernels, the scalar table is used.

namespace k3::quant::detail {
const KernelTable& avx2_kernels() {
  static const KernelTable table{};
  return table;
}
}  // namespace k3::quant::detail

#endif
