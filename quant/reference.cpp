// Scalar reference. This file is compiled with -ffp-contract=off (see CMakeLists.txt): the
// quantizers must round exactly like ggml's C reference built without FMA contraction.
#include "quant/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/fp.h"
#include "quant/isa.h"
#include "quant/kernel_table.h"
#include "quant/repack.h"

namespace k3::quant {
namespace {

using std::size_t;
using std::uint8_t;

// ---------------------------------------------------------------- dequantizers (one block)

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b + layout::kQ8_0D));
  for (int j = 0; j < 32; ++j)
    y[j] = static_cast<float>(static_cast<std::int8_t>(b[layout::kQ8_0Qs + j])) * d;
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b + layout::kQ4_0D));
  const uint8_t* qs = b + layout::kQ4_0Qs;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequant_mxfp4(const uint8_t* b, float* y) {
  const float d = e8m0_half(b[layout::kMxfp4E]);
  const uint8_t* qs = b + layout::kMxfp4Qs;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kMxfp4Doubled[qs[j] & 0x0f]) * d;
    y[j + 16] = static_cast<float>(kMxfp4Doubled[qs[j] >> 4]) * d;
  }
}

// Element e of a 256-block: 2-bit code in qs[32*(e/128) + e%32] at bits 2*((e%128)/32).
int q2_code(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void dequant_q2_k(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b + layout::kQ2KD));
  const float dmin = fp16_to_f32(load_u16(b + layout::kQ2KDmin));
  const uint8_t* scales = b + layout::kQ2KScales;
  const uint8_t* qs = b + layout::kQ2KQs;
  for (int e = 0; e < 256; ++e) {
    const uint8_t sc = scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0x0f);
    const float ml = dmin * static_cast<float>(sc >> 4);
    y[e] = dl * static_cast<float>(q2_code(qs, e)) - ml;
  }
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b + layout::kQ3KD));
  std::int8_t sc[16];
  unpack_q3_k_scales(b + layout::kQ3KScales, sc);
  const uint8_t* hmask = b + layout::kQ3KHmask;
  const uint8_t* qs = b + layout::kQ3KQs;
  for (int e = 0; e < 256; ++e) {
    const float dl = d * static_cast<float>(sc[e / 16]);
    const bool high = (hmask[e % 32] >> (e / 32)) & 1;
    y[e] = dl * static_cast<float>(q2_code(qs, e) - (high ? 0 : 4));
  }
}

// ---------------------------------------------------------------- quantizers (one block)

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b + layout::kQ8_0D, f32_to_fp16(d));
  for (int j = 0; j < 32; ++j) {
    const float v = std::round(x[j] * id);  // half away from zero, like roundf
    const float c = std::isnan(v) ? 0.0f : std::clamp(v, -128.0f, 127.0f);
    b[layout::kQ8_0Qs + j] = static_cast<uint8_t>(static_cast<std::int8_t>(c));
  }
}

void quant_q4_0(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest magnitude
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b + layout::kQ4_0D, f32_to_fp16(d));
  // ggml truncates (x*id + 8.5) toward zero and clips at 15; values are in [0.5, 16.5] for
  // finite input, the clamp at 0 only guards NaN/Inf.
  auto code = [](float v) {
    float t = v + 8.5f;
    if (!(t >= 0.0f)) t = 0.0f;
    if (t > 15.0f) t = 15.0f;
    return static_cast<uint8_t>(t);
  };
  for (int j = 0; j < 16; ++j) {
    b[layout::kQ4_0Qs + j] = static_cast<uint8_t>(code(x[j] * id) | (code(x[j + 16] * id) << 4));
  }
}

// The first table entry closest to x / d (ties keep the lower index), as ggml.
uint8_t mxfp4_code(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Doubled[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Doubled[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// Shared exponent: floor(log2(amax)) - 2 + 127, 0 for an all-zero block. ggml converts the
// float straight to uint8 (undefined outside [0, 255]); we clamp, which changes nothing for
// 2^-125 <= amax < 2^129.
uint8_t mxfp4_exponent(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  }
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  return static_cast<uint8_t>(std::clamp(e, 0.0f, 255.0f));
}

void quant_mxfp4(const float* x, uint8_t* b) {
  const uint8_t e = mxfp4_exponent(x);
  const float d = e8m0_half(e);
  b[layout::kMxfp4E] = e;
  for (int j = 0; j < 16; ++j) {
    b[1 + j] = static_cast<uint8_t>(mxfp4_code(x[j], d) | (mxfp4_code(x[j + 16], d) << 4));
  }
}

// Weighted affine fit x ~ scale * L + min with L in [0, nmax] and min <= 0: the
// make_qkx2_quants rule of ggml (grid search over nstep+1 inverse scales, least squares per
// step). Returns the scale; *neg_min receives -min. Float operations are in ggml's order.
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                 uint8_t* trial, float rmin, float rdelta, int nstep, bool use_mad) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -lo;
    return 0.0f;
  }
  auto err_of = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - lo));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    best_error += w[i] * err_of(scale * static_cast<float>(L[i]) + lo - x[i]);
  }
  if (nstep < 1) {
    *neg_min = -lo;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - lo));
      l = std::max(0, std::min(nmax, l));
      trial[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        cur_error += w[i] * err_of(this_scale * static_cast<float>(trial[i]) + this_min - x[i]);
      }
      if (cur_error < best_error) {
        std::memcpy(L, trial, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *neg_min = -lo;
  return scale;
}

// Packs 256 2-bit codes: byte 32*h + l holds elements 128h + l + {0, 32, 64, 96}.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* l = L + 128 * h;
    for (int i = 0; i < 32; ++i) {
      qs[32 * h + i] =
          static_cast<uint8_t>(l[i] | (l[i + 32] << 2) | (l[i + 64] << 4) | (l[i + 96] << 6));
    }
  }
}

void quant_q2_k(const float* x, uint8_t* b) {
  constexpr float kQ4Scale = 15.f;
  uint8_t L[256];
  float mins[16], scales[16];
  // The fits are most of the work of writing a GGUF: the AVX-512 one fits the 16 sub-blocks in
  // 16 lanes, each lane in the scalar order, and gives the same bits.
  detail::Q2KFit fit = detail::q2_k_fit;
  if (active_isa() >= Isa::kAvx512 && detail::avx512_kernels().q2_k_fit != nullptr) {
    fit = detail::avx512_kernels().q2_k_fit;
  }
  fit(x, L, scales, mins);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* sc = b + layout::kQ2KScales;
  if (max_scale > 0) {
    const float iscale = kQ4Scale / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    store_u16(b + layout::kQ2KD, f32_to_fp16(max_scale / kQ4Scale));
  } else {
    for (int j = 0; j < 16; ++j) sc[j] = 0;
    store_u16(b + layout::kQ2KD, f32_to_fp16(0.f));
  }
  if (max_min > 0) {
    const float iscale = kQ4Scale / max_min;
    for (int j = 0; j < 16; ++j) {
      const int l = nearest_int(iscale * mins[j]);
      sc[j] = static_cast<uint8_t>(sc[j] | static_cast<uint8_t>(static_cast<unsigned>(l) << 4));
    }
    store_u16(b + layout::kQ2KDmin, f32_to_fp16(max_min / kQ4Scale));
  } else {
    store_u16(b + layout::kQ2KDmin, f32_to_fp16(0.f));
  }
  // Re-derive the codes from the rounded scales (sub-blocks with a zero scale keep the fit).
  const float d_all = fp16_to_f32(load_u16(b + layout::kQ2KD));
  const float dmin_all = fp16_to_f32(load_u16(b + layout::kQ2KDmin));
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * static_cast<float>(sc[j] & 0x0f);
    if (d == 0.0f) continue;
    const float dm = dmin_all * static_cast<float>(sc[j] >> 4);
    for (int i = 0; i < 16; ++i) {
      const int l = nearest_int((x[16 * j + i] + dm) / d);
      L[16 * j + i] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  pack_2bit(L, b + layout::kQ2KQs);
}

// Symmetric fit x ~ scale * L, L in [-nmax, nmax-1], refined by coordinate descent with
// weights x^2: ggml's make_q3_quants(do_rmse = true). Returns the scale; L is left in
// [0, 2*nmax).
float fit_symmetric(int n, int nmax, const float* x, std::int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int nl = nearest_int(x[i] * sl2 / slx);
        nl = std::max(-nmax, std::min(nmax - 1, nl));
        if (nl != L[i]) {
          slx += w * x[i] * static_cast<float>(nl);
          sl2 += w * static_cast<float>(nl) * static_cast<float>(nl);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::int8_t>(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void quant_q3_k(const float* x, uint8_t* b) {
  std::int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  uint8_t* sc = b + layout::kQ3KScales;
  std::memset(sc, 0, 12);
  if (max_scale != 0.0f) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const int l = std::max(-32, std::min(31, nearest_int(iscale * scales[j]))) + 32;  // 0..63
      if (j < 8) {
        sc[j] = static_cast<uint8_t>(l & 0x0f);
      } else {
        sc[j - 8] = static_cast<uint8_t>(sc[j - 8] | ((l & 0x0f) << 4));
      }
      sc[8 + j % 4] = static_cast<uint8_t>(sc[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
    }
    store_u16(b + layout::kQ3KD, f32_to_fp16(1 / iscale));
  } else {
    store_u16(b + layout::kQ3KD, f32_to_fp16(0.f));
  }
  std::int8_t isc[16];
  unpack_q3_k_scales(sc, isc);
  const float d_all = fp16_to_f32(load_u16(b + layout::kQ3KD));
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * static_cast<float>(isc[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) {
      const int l = nearest_int(x[16 * j + i] / d);
      L[16 * j + i] = static_cast<std::int8_t>(std::max(-4, std::min(3, l)) + 4);
    }
  }
  // High bit of element e goes to hmask[e % 32], bit e / 32; the low two bits pack as Q2_K.
  uint8_t* hmask = b + layout::kQ3KHmask;
  std::memset(hmask, 0, 32);
  uint8_t low[256];
  for (int e = 0; e < 256; ++e) {
    int l = L[e];
    if (l > 3) {
      hmask[e % 32] = static_cast<uint8_t>(hmask[e % 32] | (1 << (e / 32)));
      l -= 4;
    }
    low[e] = static_cast<uint8_t>(l & 3);
  }
  pack_2bit(low, b + layout::kQ3KQs);
}

void check_multiple(Type type, std::size_t n, std::size_t block) {
  if (n % block != 0) {
    throw InputError("quant: " + std::string(name(type)) + " row of " + std::to_string(n) +
                     " elements is not a multiple of " + std::to_string(block));
  }
}

// Every block of a row through a one-block function.
template <class Block, std::size_t kElems>
void blocks_to_float(void (*block)(const uint8_t*, float*), const uint8_t* src, float* dst,
                     size_t n) {
  for (size_t i = 0; i < n / kElems; ++i) block(src + sizeof(Block) * i, dst + kElems * i);
}

template <class Block, std::size_t kElems>
void blocks_from_float(void (*block)(const float*, uint8_t*), const float* src, uint8_t* dst,
                       size_t n) {
  for (size_t i = 0; i < n / kElems; ++i) block(src + kElems * i, dst + sizeof(Block) * i);
}

}  // namespace

namespace detail {

void q2_k_fit(const float* x, uint8_t* L, float* scales, float* neg_mins) {
  uint8_t trial[16];
  float w[16];
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
    scales[j] =
        fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &neg_mins[j], trial, -0.5f, 0.1f, 15, true);
  }
}

template <Type T>
void to_float_row(const uint8_t* src, float* dst, size_t n) {
  if constexpr (T == Type::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if constexpr (T == Type::kF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(load_u16(src + 2 * i));
  } else if constexpr (T == Type::kBF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
  } else if constexpr (T == Type::kQ8_0) {
    blocks_to_float<BlockQ8_0, kBlock32>(dequant_q8_0, src, dst, n);
  } else if constexpr (T == Type::kQ4_0) {
    blocks_to_float<BlockQ4_0, kBlock32>(dequant_q4_0, src, dst, n);
  } else if constexpr (T == Type::kMXFP4) {
    blocks_to_float<BlockMXFP4, kBlock32>(dequant_mxfp4, src, dst, n);
  } else if constexpr (T == Type::kQ2_K) {
    blocks_to_float<BlockQ2_K, kBlockK>(dequant_q2_k, src, dst, n);
  } else {
    static_assert(T == Type::kQ3_K, "not a self-contained block type");
    blocks_to_float<BlockQ3_K, kBlockK>(dequant_q3_k, src, dst, n);
  }
}

template <Type T>
void from_float_row(const float* src, uint8_t* dst, size_t n) {
  if constexpr (T == Type::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if constexpr (T == Type::kF16) {
    for (size_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_fp16(src[i]));
  } else if constexpr (T == Type::kBF16) {
    for (size_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_bf16(src[i]));
  } else if constexpr (T == Type::kQ8_0) {
    // Float matrices re-encoded at load (a drafter's): the AVX-512 block gives the same bits.
    void (*block)(const float*, uint8_t*) = quant_q8_0;
    if (active_isa() >= Isa::kAvx512 && detail::avx512_kernels().q8_0_block != nullptr) {
      block = detail::avx512_kernels().q8_0_block;
    }
    blocks_from_float<BlockQ8_0, kBlock32>(block, src, dst, n);
  } else if constexpr (T == Type::kQ4_0) {
    blocks_from_float<BlockQ4_0, kBlock32>(quant_q4_0, src, dst, n);
  } else if constexpr (T == Type::kMXFP4) {
    blocks_from_float<BlockMXFP4, kBlock32>(quant_mxfp4, src, dst, n);
  } else if constexpr (T == Type::kQ2_K) {
    blocks_from_float<BlockQ2_K, kBlockK>(quant_q2_k, src, dst, n);
  } else {
    static_assert(T == Type::kQ3_K, "not a self-contained block type");
    blocks_from_float<BlockQ3_K, kBlockK>(quant_q3_k, src, dst, n);
  }
}

// The instantiations the traits table (types.cpp) points at.
#define K3_ROW_CODECS(T)                                                   \
  template void to_float_row<T>(const uint8_t* src, float* dst, size_t n); \
  template void from_float_row<T>(const float* src, uint8_t* dst, size_t n)
K3_ROW_CODECS(Type::kF32);
K3_ROW_CODECS(Type::kF16);
K3_ROW_CODECS(Type::kBF16);
K3_ROW_CODECS(Type::kQ8_0);
K3_ROW_CODECS(Type::kQ4_0);
K3_ROW_CODECS(Type::kMXFP4);
K3_ROW_CODECS(Type::kQ2_K);
K3_ROW_CODECS(Type::kQ3_K);
#undef K3_ROW_CODECS

}  // namespace detail

void unpack_q3_k_scales(const std::uint8_t* p, std::int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (p[j] & 0x0f) : (p[j - 8] >> 4);
    const int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<std::int8_t>((low | (high << 4)) - 32);
  }
}

void dequantize_row(Type type, const std::uint8_t* src, float* dst, std::size_t n) {
  const TypeTraits& t = traits(type);
  if (t.to_float == nullptr) {
    throw InternalError("quant: dequantize_row(" + std::string(t.name) +
                        ") needs the matrix view (side arrays)");
  }
  check_multiple(type, n, t.block_elems);
  if (n == 0) return;  // empty spans may carry null pointers
  t.to_float(src, dst, n);
}

void dequantize_row_mxfp4_packed(const std::uint8_t* packed, const std::uint8_t* e8m0, float* dst,
                                 std::size_t n) {
  check_multiple(Type::kMXFP4Packed, n, 32);
  for (std::size_t i = 0; i < n / 2; ++i) {
    const float d = e8m0_half(e8m0[i / 16]);
    dst[2 * i] = static_cast<float>(kMxfp4Doubled[packed[i] & 0x0f]) * d;
    dst[2 * i + 1] = static_cast<float>(kMxfp4Doubled[packed[i] >> 4]) * d;
  }
}

void dequantize_row(const MatrixView& v, std::size_t row, std::span<float> dst) {
  if (row >= v.rows || dst.size() != v.cols) {
    throw InternalError("quant: dequantize_row(" + describe(v) + ", row " + std::to_string(row) +
                        ") with an output of " + std::to_string(dst.size()) + " floats");
  }
  const std::size_t cols = v.cols;
  if (v.interleave != 0) {  // repacked: gather the row's blocks first
    std::vector<std::uint8_t> plain(row_bytes(v.type, cols));
    unpack_rows(v, row, 1, plain.data());
    dequantize_row(v.type, plain.data(), dst.data(), cols);
    return;
  }
  switch (v.type) {
    case Type::kMXFP4Packed:
      dequantize_row_mxfp4_packed(v.data.data() + row * (cols / 2),
                                  v.e8m0.data() + row * (cols / 32), dst.data(), cols);
      return;
    case Type::kModelSlimInt8: {
      const auto* q = v.data.data() + row * cols;
      const float s = v.scale[row];
      const float off = v.offset.empty() ? 0.0f : v.offset[row];
      for (std::size_t k = 0; k < cols; ++k) {
        dst[k] = (static_cast<float>(static_cast<std::int8_t>(q[k])) - off) * s;
      }
      return;
    }
    case Type::kModelSlimInt4: {
      const auto* q = v.data.data() + (row / 2) * cols;
      const int shift = (row % 2) * 4;
      const float s = v.scale[row];
      for (std::size_t k = 0; k < cols; ++k) {
        const int code = ((q[k] >> shift) & 0x0f);
        const auto value = static_cast<float>((code ^ 8) - 8);  // two's complement int4
        if (v.group_size == 0) {
          const float off = v.offset.empty() ? 0.0f : v.offset[row];
          dst[k] = (value - off) * s;
        } else {
          const std::size_t g = row * (cols / v.group_size) + k / v.group_size;
          const float off = v.group_offset.empty() ? 0.0f : v.group_offset[g];
          dst[k] = (value - off) * v.group_scale[g] * s;
        }
      }
      return;
    }
    default:
      dequantize_row(v.type, v.data.data() + row * row_bytes(v.type, cols), dst.data(), cols);
      return;
  }
}

void dequantize(const MatrixView& v, std::span<float> dst) {
  validate(v);
  if (dst.size() != v.rows * v.cols) {
    throw InternalError("quant: dequantize(" + describe(v) + ") into " +
                        std::to_string(dst.size()) + " floats");
  }
  for (std::size_t r = 0; r < v.rows; ++r) dequantize_row(v, r, dst.subspan(r * v.cols, v.cols));
}

void quantize_row(Type type, const float* src, std::uint8_t* dst, std::size_t n) {
  const TypeTraits& t = traits(type);
  if (t.from_float == nullptr) {
    throw InternalError("quant: quantize_row(" + std::string(t.name) +
                        ") is not a self-contained block type; use quantize()");
  }
  check_multiple(type, n, t.block_elems);
  if (n == 0) return;  // empty spans may carry null pointers
  t.from_float(src, dst, n);
}

void quantize_row_mxfp4_packed(const float* src, std::uint8_t* packed, std::uint8_t* e8m0,
                               std::size_t n) {
  check_multiple(Type::kMXFP4Packed, n, 32);
  for (std::size_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    const uint8_t e = mxfp4_exponent(x);
    const float d = e8m0_half(e);
    e8m0[b] = e;
    for (int i = 0; i < 16; ++i) {
      packed[16 * b + i] =
          static_cast<uint8_t>(mxfp4_code(x[2 * i], d) | (mxfp4_code(x[2 * i + 1], d) << 4));
    }
  }
}

}  // namespace k3::quant
