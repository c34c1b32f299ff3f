// Portable kernels: the fallback on any CPU and the exact-integer model the SIMD kernels are
// tested against. Integer block sums are exact; only the float accumulation order differs
// between ISAs.
#include <cstdint>

#include "quant/fp.h"
#include "quant/kernel_table.h"
#include "quant/reference.h"

namespace k3::quant::detail {
namespace {

using std::int32_t;
using std::size_t;
using std::uint8_t;

const uint8_t* row_ptr(const MatrixView& w, size_t row) {
  return w.data.data() + row * ((w.cols / traits(w.type).block_elems) * traits(w.type).block_bytes);
}

// ------------------------------------------------------------------ fp32 activations

template <float (*Load)(const uint8_t*), size_t kBytes>
void row_float(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na, float* y,
               size_t ldy) {
  const uint8_t* p = row_ptr(w, row);
  for (size_t i = 0; i < na; ++i) {
    const float* x = a.f32 + (a0 + i) * a.cols;
    float acc = 0.0f;
    for (size_t k = 0; k < w.cols; ++k) acc += Load(p + kBytes * k) * x[k];
    y[(a0 + i) * ldy + row] = acc;
  }
}

float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
float load_f16(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
float load_bf16(const uint8_t* p) { return bf16_to_f32(load_u16(p)); }

// ------------------------------------------------------------------ int8 blocks of 32

// Block b of a row: its 32 integer weights (in activation order) and its float scale.
struct Q8_0Decoder {
  static constexpr size_t kBytes = layout::kQ8_0Bytes;
  static float scale(const uint8_t* b) { return fp16_to_f32(load_u16(b)); }
  static void decode(const uint8_t* b, int* q) {
    for (int j = 0; j < 32; ++j) q[j] = static_cast<std::int8_t>(b[2 + j]);
  }
};
struct Q4_0Decoder {
  static constexpr size_t kBytes = layout::kQ4_0Bytes;
  static float scale(const uint8_t* b) { return fp16_to_f32(load_u16(b)); }
  static void decode(const uint8_t* b, int* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = (b[2 + j] & 0x0f) - 8;
      q[j + 16] = (b[2 + j] >> 4) - 8;
    }
  }
};
struct Mxfp4Decoder {
  static constexpr size_t kBytes = layout::kMxfp4Bytes;
  static float scale(const uint8_t* b) { return e8m0_half(b[0]); }
  static void decode(const uint8_t* b, int* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kMxfp4Doubled[b[1 + j] & 0x0f];
      q[j + 16] = kMxfp4Doubled[b[1 + j] >> 4];
    }
  }
};

int32_t dot32(const int* q, const std::int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += q[j] * x[j];
  return s;
}

template <class D>
void row_q8_family(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na,
                   float* y, size_t ldy) {
  const uint8_t* p = row_ptr(w, row);
  const size_t nb = a.blocks;
  float acc[kMaxActs] = {};
  int q[32];
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = p + b * D::kBytes;
    D::decode(blk, q);
    const float dw = D::scale(blk);
    for (size_t i = 0; i < na; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      acc[i] += (dw * a.d[ab]) * static_cast<float>(dot32(q, a.qs + ab * 32));
    }
  }
  for (size_t i = 0; i < na; ++i) y[(a0 + i) * ldy + row] = acc[i];
}

// compressed-tensors MXFP4: the activations are stored even/odd, so low nibble i meets
// activation position i and high nibble i meets position 16 + i, exactly as ggml's block.
void row_mxfp4_packed(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na,
                      float* y, size_t ldy) {
  const size_t nb = a.blocks;
  const uint8_t* p = w.data.data() + row * (w.cols / 2);
  const uint8_t* e = w.e8m0.data() + row * nb;
  float acc[kMaxActs] = {};
  int q[32];
  for (size_t b = 0; b < nb; ++b) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kMxfp4Doubled[p[16 * b + j] & 0x0f];
      q[j + 16] = kMxfp4Doubled[p[16 * b + j] >> 4];
    }
    const float dw = e8m0_half(e[b]);
    for (size_t i = 0; i < na; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      acc[i] += (dw * a.d[ab]) * static_cast<float>(dot32(q, a.qs + ab * 32));
    }
  }
  for (size_t i = 0; i < na; ++i) y[(a0 + i) * ldy + row] = acc[i];
}

// ModelSlim int8: y = scale * (sum_b dx_b * (q . qx)_b - offset * sum(x)).
void row_ms_int8(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na, float* y,
                 size_t ldy) {
  const size_t nb = a.blocks;
  const auto* p = reinterpret_cast<const std::int8_t*>(w.data.data() + row * w.cols);
  const float off = ms_offset(w, row);
  for (size_t i = 0; i < na; ++i) {
    float acc = 0.0f, xs = 0.0f;
    for (size_t b = 0; b < nb; ++b) {
      const size_t ab = (a0 + i) * nb + b;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += p[32 * b + j] * a.qs[ab * 32 + j];
      acc += a.d[ab] * static_cast<float>(s);
      xs += a.xsum[ab];
    }
    y[(a0 + i) * ldy + row] = w.scale[row] * (acc - off * xs);
  }
}

// ModelSlim int4 (version 1.0.0): packed row j holds rows 2j (low nibble) and 2j+1 (high).
// Per group g: y += scale2_g * (sum_b dx_b * (q . qx)_b - offset2_g * sum_g(x)); then * scale.
void row_ms_int4(const MatrixView& w, size_t unit, const ActView& a, size_t a0, size_t na, float* y,
                 size_t ldy) {
  const size_t nb = a.blocks;
  const uint8_t* p = w.data.data() + unit * w.cols;
  const size_t bpg = ms_blocks_per_group(w, nb);  // blocks per group
  const size_t groups = nb / bpg;
  for (size_t half = 0; half < 2; ++half) {
    const size_t row = 2 * unit + half;
    const int shift = static_cast<int>(half) * 4;
    for (size_t i = 0; i < na; ++i) {
      float acc = 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        float gacc = 0.0f, xs = 0.0f;
        for (size_t b = g * bpg; b < (g + 1) * bpg; ++b) {
          const size_t ab = (a0 + i) * nb + b;
          int32_t s = 0;
          for (int j = 0; j < 32; ++j) {
            const int q = (((p[32 * b + j] >> shift) & 0x0f) ^ 8) - 8;
            s += q * a.qs[ab * 32 + j];
          }
          gacc += a.d[ab] * static_cast<float>(s);
          xs += a.xsum[ab];
        }
        if (w.group_size == 0) {
          const float off = ms_offset(w, row);
          acc += gacc - off * xs;
        } else {
          const size_t gi = row * groups + g;
          const float off = ms_group_offset(w, gi);
          acc += w.group_scale[gi] * (gacc - off * xs);
        }
      }
      y[(a0 + i) * ldy + row] = w.scale[row] * acc;
    }
  }
}

// ------------------------------------------------------------------ K-quants x Q8_K

// Q2_K: sum = d * dx * sum_j sc_j (q . qx)_j  -  dmin * dx * sum_j m_j * bsum_j.
void row_q2_k(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na, float* y,
              size_t ldy) {
  const size_t nb = a.blocks;
  const uint8_t* p = row_ptr(w, row);
  float acc[kMaxActs] = {};
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = p + layout::kQ2KBytes * b;
    const uint8_t* sc = blk + layout::kQ2KScales;
    const uint8_t* qs = blk + layout::kQ2KQs;
    const float d = fp16_to_f32(load_u16(blk + layout::kQ2KD));
    const float dmin = fp16_to_f32(load_u16(blk + layout::kQ2KDmin));
    for (size_t i = 0; i < na; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      const std::int8_t* x = a.qs + ab * 256;
      const std::int16_t* bs = a.bsums + ab * 16;
      int32_t isum = 0, msum = 0;
      for (int j = 0; j < 16; ++j) {
        int32_t s = 0;
        for (int e = 16 * j; e < 16 * j + 16; ++e) {
          s += ((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) * x[e];
        }
        isum += (sc[j] & 0x0f) * s;
        msum += (sc[j] >> 4) * bs[j];
      }
      acc[i] += a.d[ab] * d * static_cast<float>(isum) - a.d[ab] * dmin * static_cast<float>(msum);
    }
  }
  for (size_t i = 0; i < na; ++i) y[(a0 + i) * ldy + row] = acc[i];
}

// Q3_K: code u = low2 + 4*high in [0, 8), weight = u - 4, so
// sum = d * dx * sum_j sc_j ((u . qx)_j - 4 * bsum_j).
void row_q3_k(const MatrixView& w, size_t row, const ActView& a, size_t a0, size_t na, float* y,
              size_t ldy) {
  const size_t nb = a.blocks;
  const uint8_t* p = row_ptr(w, row);
  float acc[kMaxActs] = {};
  std::int8_t sc[16];
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = p + layout::kQ3KBytes * b;
    const uint8_t* hm = blk + layout::kQ3KHmask;
    const uint8_t* qs = blk + layout::kQ3KQs;
    unpack_q3_k_scales(blk + layout::kQ3KScales, sc);
    const float d = fp16_to_f32(load_u16(blk + layout::kQ3KD));
    for (size_t i = 0; i < na; ++i) {
      const size_t ab = (a0 + i) * nb + b;
      const std::int8_t* x = a.qs + ab * 256;
      const std::int16_t* bs = a.bsums + ab * 16;
      int32_t isum = 0;
      for (int j = 0; j < 16; ++j) {
        int32_t s = 0;
        for (int e = 16 * j; e < 16 * j + 16; ++e) {
          const int low = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
          const int high = (hm[e % 32] >> (e / 32)) & 1;
          s += (low + 4 * high) * x[e];
        }
        isum += sc[j] * (s - 4 * bs[j]);
      }
      acc[i] += a.d[ab] * d * static_cast<float>(isum);
    }
  }
  for (size_t i = 0; i < na; ++i) y[(a0 + i) * ldy + row] = acc[i];
}

KernelTable make_table() {
  KernelTable t;
  auto set = [&t](Type type, RowKernel k) { t.row[static_cast<size_t>(type)] = k; };
  set(Type::kF32, row_float<load_f32, 4>);
  set(Type::kF16, row_float<load_f16, 2>);
  set(Type::kBF16, row_float<load_bf16, 2>);
  set(Type::kQ8_0, row_q8_family<Q8_0Decoder>);
  set(Type::kQ4_0, row_q8_family<Q4_0Decoder>);
  set(Type::kMXFP4, row_q8_family<Mxfp4Decoder>);
  set(Type::kMXFP4Packed, row_mxfp4_packed);
  set(Type::kModelSlimInt8, row_ms_int8);
  set(Type::kModelSlimInt4, row_ms_int4);
  set(Type::kQ2_K, row_q2_k);
  set(Type::kQ3_K, row_q3_k);
  return t;
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace k3::quant::detail
