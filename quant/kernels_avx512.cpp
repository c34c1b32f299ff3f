// AVX-512 (F, BW, VL, DQ, VNNI) kernels. As in kernels_avx2.cpp, the ISA is enabled per
// function with a target attribute, never for the whole file.
//
// Integer formats decode two 32-weight blocks into one zmm of unsigned bytes (weight + C) and
// multiply with vpdpbusd against the int8 activations (64 bytes of a row, blocks b and b+1).
// Lanes 0-7 of the int32 result belong to block b, lanes 8-15 to block b+1; they are summed
// into each block's exact integer dot, the offset C removed with the activation block sums
// (C * isum), and the blocks are added in one fixed order per row that every path of a type
// shares (block_sums4; q2_k_rows16), so results do not depend on the batch.
#include <cstdint>
#include <cstring>

#include "quant/fp.h"
#include "quant/kernel_table.h"
#include "quant/reference.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers pass _mm512_undefined_*() as the merge source of several intrinsics
// (permutexvar, cvtepi32_ps, inserti64x4, ...) and then warn about it once inlined (GCC PR
// 105593, fixed in GCC 13). The values are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <vector>

#define K3_TARGET_512 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define K3_512 __attribute__((target(K3_TARGET_512)))
#define K3_512_INLINE __attribute__((target(K3_TARGET_512), always_inline)) inline

namespace k3::quant::detail {
namespace {

using std::size_t;
using std::uint8_t;

inline constexpr size_t kPrefetchBytes = 4096;  // see kernels_avx2.cpp

K3_512_INLINE void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1);
}

K3_512_INLINE __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
K3_512_INLINE __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
K3_512_INLINE __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
K3_512_INLINE __m128i load64(const void* p) {
  return _mm_loadl_epi64(static_cast<const __m128i*>(p));
}

// [v0 x8, v1 x8] from the two low lanes of an xmm.
K3_512_INLINE __m512i pair_index() {
  return _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
}

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

// ------------------------------------------------------------------ fp32 activations

template <Type T>
K3_512_INLINE __m512 load_w16(const uint8_t* p) {
  if constexpr (T == Type::kF32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == Type::kF16) {
    return _mm512_cvtph_ps(load256(p));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
  }
}
template <Type T>
K3_512_INLINE __m512 load_w16_masked(const uint8_t* p, __mmask16 m) {
  if constexpr (T == Type::kF32) {
    return _mm512_maskz_loadu_ps(m, p);
  } else if constexpr (T == Type::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  } else {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
}

template <Type T, int NA>
K3_512 void row_float_n(const MatrixView& w, size_t row, const ActView& a, size_t a0, float* y,
                        size_t ldy) {
  constexpr size_t kEs = T == Type::kF32 ? 4 : 2;
  const uint8_t* p = block_row<1, kEs>(w, row);
  const size_t n = w.cols;
  const float* x[NA];
  for (int i = 0; i < NA; ++i) x[i] = a.f32 + (a0 + i) * a.cols;
  __m512 acc0[NA], acc1[NA];
  for (int i = 0; i < NA; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 32 <= n; k += 32) {
    prefetch(p + kEs * k);
    const __m512 w0 = load_w16<T>(p + kEs * k);
    const __m512 w1 = load_w16<T>(p + kEs * (k + 16));
    for (int i = 0; i < NA; ++i) {
      acc0[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[i] + k), acc0[i]);
      acc1[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[i] + k + 16), acc1[i]);
    }
  }
  for (; k < n; k += 16) {
    const size_t left = n - k;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 w0 = load_w16_masked<T>(p + kEs * k, m);
    for (int i = 0; i < NA; ++i)
      acc0[i] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x[i] + k), acc0[i]);
  }
  for (int i = 0; i < NA; ++i)
    y[(a0 + i) * ldy + row] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

// R weight rows x NA activation rows of fp32 work: R*NA accumulators, each weight vector
// loaded once per NA activations and each activation vector once per R rows.
template <Type T, int R, int NA>
K3_512 void float_block(const MatrixView& w, size_t r0, const ActView& a, size_t a0, float* y,
                        size_t ldy) {
  constexpr size_t kEs = T == Type::kF32 ? 4 : 2;
  const size_t n = w.cols;
  const uint8_t* p[R];
  const float* x[NA];
  for (int r = 0; r < R; ++r) p[r] = block_row<1, kEs>(w, r0 + r);
  for (int i = 0; i < NA; ++i) x[i] = a.f32 + (a0 + i) * a.cols;
  __m512 acc[R][NA];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NA; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  // The next R rows at the same offsets (rows are short next to a prefetch distance), on the
  // first activation pass only, and not past the matrix.
  const size_t next = r0 + 2 * R <= w.rows && a0 == 0 ? R * n * kEs : 0;
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) {
      if (next != 0 && k % (64 / kEs) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(p[r] + kEs * k + next), _MM_HINT_T1);
      wv[r] = load_w16<T>(p[r] + kEs * k);
    }
    for (int i = 0; i < NA; ++i) {
      const __m512 xv = _mm512_loadu_ps(x[i] + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  if (k < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1u);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_w16_masked<T>(p[r] + kEs * k, m);
    for (int i = 0; i < NA; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[i] + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int i = 0; i < NA; ++i) {
    for (int r = 0; r < R; ++r) y[(a0 + i) * ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][i]);
  }
}

// Batch 1 on R rows read as R streams, one 64-byte line per row per step with one prefetch
// each (kFloatPrefetch ahead); one accumulator per row added in the order of float_block, so
// the bits do not depend on the path.
inline constexpr size_t kFloatPrefetch = 2048;

template <Type T, int R>
K3_512 void float_gemv(const MatrixView& w, size_t r0, const ActView& a, float* y) {
  constexpr size_t kEs = T == Type::kF32 ? 4 : 2;
  constexpr size_t kStep = 64 / kEs;  // elements per line
  const size_t n = w.cols;
  const uint8_t* p[R];
  for (int r = 0; r < R; ++r) p[r] = block_row<1, kEs>(w, r0 + r);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + kStep <= n; k += kStep) {
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(p[r] + kEs * k) + kFloatPrefetch, _MM_HINT_T1);
      for (size_t h = 0; h < kStep; h += 16)
        acc[r] = _mm512_fmadd_ps(load_w16<T>(p[r] + kEs * (k + h)), _mm512_loadu_ps(a.f32 + k + h),
                                 acc[r]);
    }
  }
  for (; k < n; k += 16) {
    const size_t left = n - k;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(m, a.f32 + k);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(load_w16_masked<T>(p[r] + kEs * k, m), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) y[r0 + r] = _mm512_reduce_add_ps(acc[r]);
}

// Rows in groups of 4 (then 1), activations in groups of 4 (then 1..3).
template <Type T, int R>
K3_512 void float_rows(const MatrixView& w, size_t r0, const ActView& a, float* y, size_t ldy) {
  size_t a0 = 0;
  for (; a0 + 4 <= a.rows; a0 += 4) float_block<T, R, 4>(w, r0, a, a0, y, ldy);
  switch (a.rows - a0) {
    case 1:
      float_block<T, R, 1>(w, r0, a, a0, y, ldy);
      break;
    case 2:
      float_block<T, R, 2>(w, r0, a, a0, y, ldy);
      break;
    case 3:
      float_block<T, R, 3>(w, r0, a, a0, y, ldy);
      break;
    default:
      break;
  }
}

template <Type T>
K3_512 void float_tile(const MatrixView& w, size_t u0, size_t nu, const ActView& a, float* y,
                       size_t ldy) {
  size_t r = u0;
  if (a.rows == 1) {
    for (; r + 8 <= u0 + nu; r += 8) float_gemv<T, 8>(w, r, a, y);
  }
  for (; r + 4 <= u0 + nu; r += 4) float_rows<T, 4>(w, r, a, y, ldy);
  for (; r < u0 + nu; ++r) float_rows<T, 1>(w, r, a, y, ldy);
}

// ------------------------------------------------------------------ int8 blocks of 32

// Decoders: unsigned weight bytes (weight + C, C = 8 << kShift) for blocks b, b+1 (decode2)
// or b (decode1), in activation order, and the weight scales.
struct Q8_0D {
  static constexpr bool kGemv4 = true;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  static constexpr int kShift = 4;  // xor 0x80: C = 128
  const uint8_t* p;
  Q8_0D(const MatrixView& w, size_t row) : p(block_row<kBlock32, layout::kQ8_0Bytes>(w, row)) {}
  const uint8_t* at(size_t b) const { return p + layout::kQ8_0Bytes * b; }
  K3_512_INLINE void fetch(size_t b) const { prefetch(at(b)); }
  K3_512_INLINE __m512i decode2(size_t b) const {
    const __m512i z =
        _mm512_mask_blend_epi64(0xf0, _mm512_broadcast_i64x4(load256(at(b) + layout::kQ8_0Qs)),
                                _mm512_broadcast_i64x4(load256(at(b + 1) + layout::kQ8_0Qs)));
    return _mm512_xor_si512(z, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE __m256i decode1(size_t b) const {
    return _mm256_xor_si256(load256(at(b) + layout::kQ8_0Qs),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE __m128 scale4(size_t b) const {
    return half4(at(b) + layout::kQ8_0D, layout::kQ8_0Bytes);
  }
  K3_512_INLINE float scale1(size_t b) const { return _cvtsh_ss(load_u16(at(b) + layout::kQ8_0D)); }
};

struct Q4_0D {
  static constexpr bool kGemv4 = true;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  static constexpr int kShift = 0;  // nibble = weight + 8
  const uint8_t* p;
  Q4_0D(const MatrixView& w, size_t row) : p(block_row<kBlock32, layout::kQ4_0Bytes>(w, row)) {}
  const uint8_t* at(size_t b) const { return p + layout::kQ4_0Bytes * b; }
  K3_512_INLINE void fetch(size_t b) const { prefetch(at(b)); }
  K3_512_INLINE __m512i decode2(size_t b) const {
    return nibbles2(at(b) + layout::kQ4_0Qs, at(b + 1) + layout::kQ4_0Qs);
  }
  K3_512_INLINE __m256i decode1(size_t b) const { return nibbles1(at(b) + layout::kQ4_0Qs); }
  K3_512_INLINE __m128 scale4(size_t b) const {
    return half4(at(b) + layout::kQ4_0D, layout::kQ4_0Bytes);
  }
  K3_512_INLINE float scale1(size_t b) const { return _cvtsh_ss(load_u16(at(b) + layout::kQ4_0D)); }
};

struct Mxfp4D {
  static constexpr bool kGemv4 = true;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  static constexpr int kShift = 1;  // table + 16
  const uint8_t* p;
  Mxfp4D(const MatrixView& w, size_t row) : p(block_row<kBlock32, layout::kMxfp4Bytes>(w, row)) {}
  const uint8_t* at(size_t b) const { return p + layout::kMxfp4Bytes * b; }
  K3_512_INLINE void fetch(size_t b) const { prefetch(at(b)); }
  K3_512_INLINE __m512i decode2(size_t b) const {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(mxfp4_table()),
                               nibbles2(at(b) + layout::kMxfp4Qs, at(b + 1) + layout::kMxfp4Qs));
  }
  K3_512_INLINE __m256i decode1(size_t b) const {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mxfp4_table()),
                               nibbles1(at(b) + layout::kMxfp4Qs));
  }
  K3_512_INLINE __m128 scale4(size_t b) const {
    const uint8_t* e = at(b) + layout::kMxfp4E;
    return e8m0_4(e[0] | (static_cast<std::uint32_t>(e[layout::kMxfp4Bytes]) << 8) |
                  (static_cast<std::uint32_t>(e[2 * layout::kMxfp4Bytes]) << 16) |
                  (static_cast<std::uint32_t>(e[3 * layout::kMxfp4Bytes]) << 24));
  }
  K3_512_INLINE float scale1(size_t b) const {
    return kE8m0Half[p[layout::kMxfp4Bytes * b + layout::kMxfp4E]];
  }
};

// compressed-tensors: consecutive blocks are 32 contiguous bytes; scales in their own array.
struct Mxfp4PackedD {
  static constexpr bool kGemv4 = true;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  static constexpr int kShift = 1;
  const uint8_t* p;
  const uint8_t* e;
  Mxfp4PackedD(const MatrixView& w, size_t row)
      : p(w.data.data() + row * (w.cols / 2)), e(w.e8m0.data() + row * (w.cols / 32)) {}
  const uint8_t* at(size_t b) const { return p + 16 * b; }
  K3_512_INLINE void fetch(size_t b) const { prefetch(p + 16 * b); }
  K3_512_INLINE __m512i decode2(size_t b) const {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(mxfp4_table()),
                               nibbles2(p + 16 * b, p + 16 * b + 16));
  }
  K3_512_INLINE __m256i decode1(size_t b) const {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mxfp4_table()), nibbles1(p + 16 * b));
  }
  K3_512_INLINE __m128 scale4(size_t b) const {
    std::uint32_t packed;
    std::memcpy(&packed, e + b, sizeof packed);
    return e8m0_4(packed);
  }
  K3_512_INLINE float scale1(size_t b) const { return kE8m0Half[e[b]]; }
};

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
    const float off = w.offset.empty() ? 0.0f : w.offset[row];
    return w.scale[row] * (v - off * a.row_xsum[act]);
  }
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
K3_512 void q8_tile_gemm(const MatrixView& w, size_t u0, size_t nu, const ActView& a, float* y,
                         size_t ldy);

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

// ------------------------------------------------------------------ repacked (quant/repack.h)

// Row `row` of a view repacked by kRepackRows (4): block b's scale at s + kStride * b, its
// payload at q + kStride * b. The same decoder interface as above, so row_q8_n and the GEMM
// tile run on it unchanged.
template <size_t kSb, size_t kQb>
struct RepackedRow {
  static constexpr size_t kR = 4;
  static constexpr size_t kStride = kR * (kSb + kQb);
  static constexpr bool kGemv4 = false;
  static float finish(const MatrixView&, size_t, const ActView&, size_t, float v) { return v; }
  const uint8_t* s;
  const uint8_t* q;
  RepackedRow(const MatrixView& w, size_t row) {
    const uint8_t* g = w.data.data() + (row - row % kR) * (w.cols / 32 * (kSb + kQb));
    s = g + (row % kR) * kSb;
    q = g + kR * kSb + (row % kR) * kQb;
  }
  K3_512_INLINE void fetch(size_t b) const { prefetch(s + kStride * b); }
};

struct RQ8_0D : RepackedRow<2, 32> {
  static constexpr int kShift = 4;
  using RepackedRow::RepackedRow;
  K3_512_INLINE __m512i decode2(size_t b) const {
    const __m512i z =
        _mm512_mask_blend_epi64(0xf0, _mm512_broadcast_i64x4(load256(q + kStride * b)),
                                _mm512_broadcast_i64x4(load256(q + kStride * (b + 1))));
    return _mm512_xor_si512(z, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE __m256i decode1(size_t b) const {
    return _mm256_xor_si256(load256(q + kStride * b), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  K3_512_INLINE __m128 scale4(size_t b) const { return half4(s + kStride * b, kStride); }
  K3_512_INLINE float scale1(size_t b) const { return _cvtsh_ss(load_u16(s + kStride * b)); }
};

struct RQ4_0D : RepackedRow<2, 16> {
  static constexpr int kShift = 0;
  using RepackedRow::RepackedRow;
  K3_512_INLINE __m512i decode2(size_t b) const {
    return nibbles2(q + kStride * b, q + kStride * (b + 1));
  }
  K3_512_INLINE __m256i decode1(size_t b) const { return nibbles1(q + kStride * b); }
  K3_512_INLINE __m128 scale4(size_t b) const { return half4(s + kStride * b, kStride); }
  K3_512_INLINE float scale1(size_t b) const { return _cvtsh_ss(load_u16(s + kStride * b)); }
};

struct RMxfp4D : RepackedRow<1, 16> {
  static constexpr int kShift = 1;
  using RepackedRow::RepackedRow;
  K3_512_INLINE __m512i decode2(size_t b) const {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(mxfp4_table()),
                               nibbles2(q + kStride * b, q + kStride * (b + 1)));
  }
  K3_512_INLINE __m256i decode1(size_t b) const {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mxfp4_table()),
                               nibbles1(q + kStride * b));
  }
  K3_512_INLINE __m128 scale4(size_t b) const {
    const uint8_t* e = s + kStride * b;
    return e8m0_4(e[0] | (static_cast<std::uint32_t>(e[kStride]) << 8) |
                  (static_cast<std::uint32_t>(e[2 * kStride]) << 16) |
                  (static_cast<std::uint32_t>(e[3 * kStride]) << 24));
  }
  K3_512_INLINE float scale1(size_t b) const { return kE8m0Half[s[kStride * b]]; }
};

// Batch-1 GEMV on one group of 4 repacked rows: the group is one sequential stream of
// super-blocks (4 scales, then the 4 payloads). The int32 lanes of a row (a 128-bit lane for
// nibble formats, a 256-bit half for Q8_0) are summed into its exact block dot, the offset C of
// the unsigned codes removed by seeding one lane per row with -C * isum.
// Measured on the development host (1 GiB rotation): 4 KiB ahead into L2 is best; 2 KiB,
// 8-16 KiB, or L1 (T0) prefetch were 5-15 % slower, and no software prefetch ~25 % slower.
inline constexpr size_t kRepackPrefetch = 4096;

K3_512_INLINE void prefetch_block(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p) + kRepackPrefetch + o, _MM_HINT_T1);
}

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

template <class D, Type T>
K3_512 void repacked_tile(const MatrixView& w, size_t r0, size_t nr, const ActView& a, float* y,
                          size_t ldy) {
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

// ------------------------------------------------------------------ VNNI order (quant/repack.h)

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

// The family's block order (see block_sums4), which every path of the plain layout keeps as
// well: block b goes into accumulator b mod 4, and a row ends as (acc0 + acc1) + (acc2 + acc3).
// So the VNNI order gives the plain layout's results bit for bit, at every batch size, and a
// loader may repack a matrix without changing a single output.
K3_512_INLINE __m512 vnni_finish(const __m512* acc) {
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
}

// Batch 1 on S consecutive groups starting at g (group stride gstride bytes): rows 16 S.
template <Type T, size_t S>
K3_512 void vnni_gemv_groups(const uint8_t* g, size_t gstride, const ActView& a, float* y) {
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
      // Near a stream's end, prefetch the start of the stream that continues it in the next
      // tile (S groups further on) rather than the next group, which another stream already
      // reads: each tile then starts warm (measured: up to 10 % on 4096x4096 Q8_0).
      const size_t ahead = b * kSuper + kVnniPrefetch<T>;
      const size_t jump = ahead >= gstride ? (S - 1) * gstride : 0;
      for (size_t s = 0; s < S; ++s) {
        const uint8_t* p = g + s * gstride + b * kSuper;
        const char* pf = reinterpret_cast<const char*>(p) + kVnniPrefetch<T> + jump;
        for (size_t o = 0; o < kSuper; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
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
template <Type T, size_t S, int NA>
K3_512 void vnni_gemm_groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                             bool stream, float* y, size_t ldy) {
  constexpr size_t kSuper = kVnniSuper<T>;
  const size_t nb = a.blocks;
  __m512 acc[S][NA][4];
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < NA; ++i)
      for (int k = 0; k < 4; ++k) acc[s][i][k] = _mm512_setzero_ps();
  for (size_t b0 = 0; b0 < nb; b0 += 4) {
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = b0 + k;
      if (b >= nb) break;
      const size_t ahead = b * kSuper + kVnniPrefetch<T>;
      const size_t jump = ahead >= gstride ? (S - 1) * gstride : 0;
      for (size_t s = 0; s < S; ++s) {
        const uint8_t* p = g + s * gstride + b * kSuper;
        if (stream) {
          const char* pf = reinterpret_cast<const char*>(p) + kVnniPrefetch<T> + jump;
          for (size_t o = 0; o < kSuper; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
        }
        for (int i = 0; i < NA; ++i) {
          const size_t ab = (a0 + i) * nb + b;
          __m512i x[8];
          for (int q = 0; q < 8; ++q) x[q] = broadcast_quad(a.qs + 32 * ab + 4 * q);
          acc[s][i][k] = vnni_accumulate<T>(p, x, a.nisum[ab], a.d[ab], acc[s][i][k]);
        }
      }
    }
  }
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < NA; ++i)
      _mm512_storeu_ps(y + (a0 + i) * ldy + 16 * s, vnni_finish(acc[s][i]));
}

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
  const uint8_t* p = w.data.data() + unit * w.cols;
  const size_t nb = a.blocks;
  const size_t bpg = w.group_size == 0 ? nb : w.group_size / 32;
  const size_t groups = nb / bpg;
  const size_t r0 = 2 * unit, r1 = 2 * unit + 1;
  const __m512i m = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  const __m512i idx = pair_index();
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
        fix0[i] -= (w.offset.empty() ? 0.0f : w.offset[r0]) * xs[i];
        fix1[i] -= (w.offset.empty() ? 0.0f : w.offset[r1]) * xs[i];
      } else {
        const size_t i0 = r0 * groups + g, i1 = r1 * groups + g;
        const float s0 = w.group_scale[i0], s1 = w.group_scale[i1];
        out0[i] = _mm512_fmadd_ps(g0[i], _mm512_set1_ps(s0), out0[i]);
        out1[i] = _mm512_fmadd_ps(g1[i], _mm512_set1_ps(s1), out1[i]);
        fix0[i] -= s0 * (w.group_offset.empty() ? 0.0f : w.group_offset[i0]) * xs[i];
        fix1[i] -= s1 * (w.group_offset.empty() ? 0.0f : w.group_offset[i1]) * xs[i];
      }
    }
  }
  for (int i = 0; i < NA; ++i) {
    y[(a0 + i) * ldy + r0] = w.scale[r0] * (_mm512_reduce_add_ps(out0[i]) + fix0[i]);
    y[(a0 + i) * ldy + r1] = w.scale[r1] * (_mm512_reduce_add_ps(out1[i]) + fix1[i]);
  }
}

// ------------------------------------------------------------------ K-quants x Q8_K

// The 16 signed 6-bit Q3_K scales (minus 32) from their 12 packed bytes: low nibbles are
// p[j] & 15 (j < 8) and p[j-8] >> 4 (j >= 8); the top two bits of scale j sit in
// p[8 + j % 4] at bit 2 * (j / 4).
K3_512_INLINE __m128i q3_k_scales(const uint8_t* p) {
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

// ------------------------------------------------------------------ K-quants in the VNNI order

// One lane per weight row (quant/repack.h): a super-block's codes and scales are decoded once
// for 16 rows, where the row kernels above decode them once per row and then reduce across
// lanes. Per row and activation row the integers and the float steps are the row kernels'
// (row_q2_k_n, row_q3_k_n), so a loader may repack without changing a bit.
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

// Batch 1 on S consecutive groups from g (stride gstride), S streams as vnni_gemv_groups.
template <bool kQ3, size_t S>
K3_512 void k_vnni_gemv_groups(const uint8_t* g, size_t gstride, const ActView& a, float* y) {
  constexpr size_t kSuper = kKVnniSuper<kQ3>;
  __m512 acc[S], accm[S];
  for (size_t s = 0; s < S; ++s) acc[s] = accm[s] = _mm512_setzero_ps();
  for (size_t b = 0; b < a.blocks; ++b) {
    const size_t ahead = b * kSuper + kKVnniPrefetch;
    const size_t jump = ahead >= gstride ? (S - 1) * gstride : 0;
    for (size_t s = 0; s < S; ++s) {
      const uint8_t* p = g + s * gstride + b * kSuper;
      const char* pf = reinterpret_cast<const char*>(p) + kKVnniPrefetch + jump;
      for (size_t o = 0; o < kSuper; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
      k_vnni_accumulate<kQ3, 1>(p, a, 0, b, &acc[s], &accm[s]);
    }
  }
  for (size_t s = 0; s < S; ++s) _mm512_storeu_ps(y + 16 * s, k_vnni_finish<kQ3>(acc[s], accm[s]));
}

// NA (<= 4) activation rows on S groups side by side, as vnni_gemm_groups.
template <bool kQ3, size_t S, int NA>
K3_512 void k_vnni_gemm_groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                               bool stream, float* y, size_t ldy) {
  constexpr size_t kSuper = kKVnniSuper<kQ3>;
  __m512 acc[S][NA], accm[S][NA];
  for (size_t s = 0; s < S; ++s)
    for (int i = 0; i < NA; ++i) acc[s][i] = accm[s][i] = _mm512_setzero_ps();
  for (size_t b = 0; b < a.blocks; ++b) {
    const size_t ahead = b * kSuper + kKVnniPrefetch;
    const size_t jump = ahead >= gstride ? (S - 1) * gstride : 0;
    for (size_t s = 0; s < S; ++s) {
      const uint8_t* p = g + s * gstride + b * kSuper;
      if (stream) {
        const char* pf = reinterpret_cast<const char*>(p) + kKVnniPrefetch + jump;
        for (size_t o = 0; o < kSuper; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
      }
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

// One VNNI-order family for the tile driver below: its super-block bytes, the batch-1 kernel on
// S groups side by side, the batch-n kernel on S groups (NA activation rows per pass) and,
// where there is one, a path for the 16-row interleaved activations (Q2_K).
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
  static bool interleaved(const ActView&) { return false; }
  static void group16(const uint8_t*, const ActView&, float*, size_t) {}
};

template <bool kQ3>
struct KVnniFamily {
  static constexpr size_t kSuper = kKVnniSuper<kQ3>;
  template <size_t S>
  K3_512_INLINE static void gemv(const uint8_t* g, size_t gstride, const ActView& a, float* y) {
    k_vnni_gemv_groups<kQ3, S>(g, gstride, a, y);
  }
  template <size_t S, int NA>
  K3_512_INLINE static void groups(const uint8_t* g, size_t gstride, const ActView& a, size_t a0,
                                   bool stream, float* y, size_t ldy) {
    k_vnni_gemm_groups<kQ3, S, NA>(g, gstride, a, a0, stream, y, ldy);
  }
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

template <class F, int NA, size_t S = kVnniStreams>
K3_512_INLINE void vnni_gemm_dispatch(const uint8_t* g, size_t gstride, size_t groups,
                                      const ActView& a, size_t a0, float* y, size_t ldy) {
  if constexpr (S > 1) {
    if (groups < S) return vnni_gemm_dispatch<F, NA, S - 1>(g, gstride, groups, a, a0, y, ldy);
  }
  F::template groups<S, NA>(g, gstride, a, a0, a0 == 0, y, ldy);
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
    // Passes of 4 activation rows over all groups of the tile (at most kVnniTileGroups, which
    // stay in L2 for the second pass), then the last 1-3 rows in one pass.
    size_t a0 = 0;
    for (; a0 + 4 <= a.rows; a0 += 4)
      vnni_gemm_dispatch<F, 4>(g0, gstride, groups, a, a0, y + r0, ldy);
    if (a.rows - a0 == 3) vnni_gemm_dispatch<F, 3>(g0, gstride, groups, a, a0, y + r0, ldy);
    if (a.rows - a0 == 2) vnni_gemm_dispatch<F, 2>(g0, gstride, groups, a, a0, y + r0, ldy);
    if (a.rows - a0 == 1) vnni_gemm_dispatch<F, 1>(g0, gstride, groups, a, a0, y + r0, ldy);
    return;
  }
  for (size_t s = 0; s < groups; ++s) {
    const uint8_t* g = g0 + s * gstride;
    float* out = y + r0 + 16 * s;
    if (F::interleaved(a)) {
      F::group16(g, a, out, ldy);
      continue;
    }
    size_t a0 = 0;
    for (; a0 + 4 <= a.rows; a0 += 4) F::template groups<1, 4>(g, gstride, a, a0, false, out, ldy);
    // The last 1-3 rows in one pass over the group's codes.
    if (a.rows - a0 == 3) F::template groups<1, 3>(g, gstride, a, a0, false, out, ldy);
    if (a.rows - a0 == 2) F::template groups<1, 2>(g, gstride, a, a0, false, out, ldy);
    if (a.rows - a0 == 1) F::template groups<1, 1>(g, gstride, a, a0, false, out, ldy);
  }
}

// ------------------------------------------------------------------ activations

// Int8 codes of v * inv as code_of (activations.cpp): round to nearest even, NaN to 0, +-127.
K3_512_INLINE __m512i q8_codes(__m512 v, float inv) {
  const __m512 limit = _mm512_set1_ps(127.0f);
  const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(inv)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q),
                                       _mm512_max_ps(_mm512_min_ps(r, limit), -limit));
  return _mm512_cvtps_epi32(c);
}

// quantize_q8_32 (activations.cpp) with the same bits: amax over the non-NaN |x| (std::max skips
// a NaN there), the float sum in element order (kept scalar: a vector sum would reorder it),
// codes by vrndscaleps (round to nearest even, as nearbyint), NaN to 0, clamped to +-127.
K3_512 void q8_block32_row(const float* x, size_t cols, bool even_odd, std::int8_t* qs, float* d,
                           std::int32_t* isum, float* xsum, float* row_xsum) {
  // Even/odd order (compressed-tensors MXFP4): codes of the even elements, then the odd ones.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  float rx = 0.0f;
  for (size_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const __m512 zero = _mm512_setzero_ps();
    const __m512 a0 = _mm512_mask_abs_ps(zero, _mm512_cmp_ps_mask(x0, x0, _CMP_ORD_Q), x0);
    const __m512 a1 = _mm512_mask_abs_ps(zero, _mm512_cmp_ps_mask(x1, x1, _CMP_ORD_Q), x1);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
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

// ------------------------------------------------------------------ the table

KernelTable make_table() {
  KernelTable t;
  auto set = [&t](Type type, RowKernel k) { t.row[static_cast<size_t>(type)] = k; };
#include "quant/kernel_rows.inc"
  t.tile[static_cast<size_t>(Type::kF32)] = float_tile<Type::kF32>;
  t.tile[static_cast<size_t>(Type::kF16)] = float_tile<Type::kF16>;
  t.tile[static_cast<size_t>(Type::kBF16)] = float_tile<Type::kBF16>;
  t.tile[static_cast<size_t>(Type::kQ8_0)] = q8_tile<Q8_0D>;
  t.tile[static_cast<size_t>(Type::kQ4_0)] = q8_tile<Q4_0D>;
  t.tile[static_cast<size_t>(Type::kMXFP4)] = q8_tile<Mxfp4D>;
  t.tile[static_cast<size_t>(Type::kMXFP4Packed)] = q8_tile<Mxfp4PackedD>;
  t.tile[static_cast<size_t>(Type::kModelSlimInt8)] = q8_tile<MsInt8D>;
  t.tile[static_cast<size_t>(Type::kQ2_K)] = q2_k_tile;
  t.repacked[static_cast<size_t>(Type::kQ8_0)] = repacked_tile<RQ8_0D, Type::kQ8_0>;
  t.repacked[static_cast<size_t>(Type::kQ4_0)] = repacked_tile<RQ4_0D, Type::kQ4_0>;
  t.repacked[static_cast<size_t>(Type::kMXFP4)] = repacked_tile<RMxfp4D, Type::kMXFP4>;
  t.vnni[static_cast<size_t>(Type::kQ8_0)] = vnni_tile<VnniFamily<Type::kQ8_0>>;
  t.vnni[static_cast<size_t>(Type::kQ4_0)] = vnni_tile<VnniFamily<Type::kQ4_0>>;
  t.vnni[static_cast<size_t>(Type::kQ2_K)] = vnni_tile<KVnniFamily<false>>;
  t.vnni[static_cast<size_t>(Type::kQ3_K)] = vnni_tile<KVnniFamily<true>>;
  t.q8_block32 = q8_block32_row;
  t.q8_k = q8_k_row;
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
