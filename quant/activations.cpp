#include "quant/activations.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "quant/fp.h"
#include "quant/isa.h"
#include "quant/kernel_table.h"

namespace k3::quant {
namespace {

using std::size_t;

// Int8 code, round to nearest even; NaN maps to 0 and the range is clamped, so every input
// (Inf, NaN, huge) is well defined.
std::int8_t code_of(float v) {
  const float r = std::nearbyint(v);
  if (!(r == r)) return 0;
  return static_cast<std::int8_t>(std::clamp(r, -127.0f, 127.0f));
}

void quantize_q8_32(const float* x, size_t cols, bool even_odd, std::int8_t* qs, float* d,
                    std::int32_t* isum, float* xsum, float* row_xsum) {
  float rx = 0.0f;
  for (size_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    std::int32_t s = 0;
    std::int8_t* q = qs + 32 * b;
    for (int j = 0; j < 32; ++j) {
      const std::int8_t c = code_of(xb[j] * inv);
      // Even/odd order matches compressed-tensors MXFP4: low nibbles hold the even elements.
      const int pos = even_odd ? (j % 2) * 16 + j / 2 : j;
      q[pos] = c;
      s += c;
    }
    d[b] = scale;
    isum[b] = s;
    if (xsum != nullptr) {
      float sum = 0.0f;
      for (int j = 0; j < 32; ++j) sum += xb[j];
      xsum[b] = sum;
      rx += sum;
    }
  }
  if (row_xsum != nullptr) *row_xsum = rx;
}

// ggml's quantize_row_q8_K_ref: scale from the signed value of largest magnitude.
void quantize_q8_k(const float* x, size_t cols, std::int8_t* qs, float* d, std::int16_t* bsums) {
  for (size_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    std::int8_t* q = qs + 256 * b;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    std::int16_t* bs = bsums + 16 * b;
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::fill(q, q + 256, std::int8_t{0});
      std::fill(bs, bs + 16, std::int16_t{0});
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) {
      const int v = nearest_int(iscale * xb[j]);
      q[j] = static_cast<std::int8_t>(std::clamp(v, -127, 127));
    }
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += q[16 * j + i];
      bs[j] = static_cast<std::int16_t>(s);
    }
    d[b] = 1 / iscale;
  }
}

}  // namespace

Activations Activations::prepare(ActFormat format, std::span<const float> x, std::size_t rows,
                                 std::size_t cols) {
  if (x.size() != rows * cols) {
    throw InputError("quant: activations [" + std::to_string(rows) + " x " + std::to_string(cols) +
                     "] from " + std::to_string(x.size()) + " floats");
  }
  Activations a;
  ActView& v = a.view_;
  v.format = format;
  v.rows = rows;
  v.cols = cols;
  if (format == ActFormat::kF32) {
    v.f32 = x.data();
    return a;
  }
  const size_t block = format == ActFormat::kQ8K ? 256 : 32;
  if (cols % block != 0) {
    throw InputError("quant: " + std::string(name(format)) + " activations need a row length " +
                     "that is a multiple of " + std::to_string(block) + ", got " +
                     std::to_string(cols));
  }
  v.blocks = cols / block;
  const size_t nb = rows * v.blocks;
  a.qs_.resize(rows * cols);
  a.d_.resize(nb);
  if (format == ActFormat::kQ8K) {
    a.bsums_.resize(nb * 16);
  } else {
    a.isum_.resize(nb);
    a.nisum_.resize(nb);
    if (format == ActFormat::kQ8Block32Sums) {
      a.xsum_.resize(nb);
      a.row_xsum_.resize(rows);
    }
  }
  // The AVX-512 quantizer gives the same bits (a scalar call per element was ~9 % of a
  // speculative decode round).
  detail::Q8Block32Quantizer q8_block32 = quantize_q8_32;
  detail::Q8KQuantizer q8_k = quantize_q8_k;
  if (active_isa() >= Isa::kAvx512) {
    const detail::KernelTable& t = detail::avx512_kernels();
    if (t.q8_block32 != nullptr) q8_block32 = t.q8_block32;
    if (t.q8_k != nullptr) q8_k = t.q8_k;
  }
  auto one_row = [&](size_t r) {
    const float* xr = x.data() + r * cols;
    std::int8_t* qs = a.qs_.data() + r * cols;
    float* d = a.d_.data() + r * v.blocks;
    if (format == ActFormat::kQ8K) {
      q8_k(xr, cols, qs, d, a.bsums_.data() + r * v.blocks * 16);
    } else {
      const bool sums = format == ActFormat::kQ8Block32Sums;
      q8_block32(xr, cols, format == ActFormat::kQ8Block32EvenOdd, qs, d,
                 a.isum_.data() + r * v.blocks, sums ? a.xsum_.data() + r * v.blocks : nullptr,
                 sums ? a.row_xsum_.data() + r : nullptr);
    }
  };
  if (rows >= 8) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, rows, 4),
                      [&](const tbb::blocked_range<size_t>& rr) {
                        for (size_t r = rr.begin(); r != rr.end(); ++r) one_row(r);
                      });
  } else {
    for (size_t r = 0; r < rows; ++r) one_row(r);
  }
  if (rows >= kInterleaveMinRows) {
    const bool q8k = format == ActFormat::kQ8K;
    const size_t blocks = v.blocks, nb32 = cols / 32;
    v.groups16 = (rows + 15) / 16;
    a.qs16_.assign(v.groups16 * nb32 * 512, 0);
    a.d16_.assign(v.groups16 * blocks * 16, 0.0f);
    if (q8k) {
      a.bsums16_.assign(v.groups16 * blocks * 8 * 32, 0);
    } else {
      a.nisum16_.assign(v.groups16 * blocks * 16, 0);
    }
    for (size_t r = 0; r < rows; ++r) {
      const size_t g = r / 16, lane = r % 16;
      for (size_t b = 0; b < nb32; ++b) {
        const std::int8_t* src = a.qs_.data() + r * cols + 32 * b;
        for (size_t j = 0; j < 8; ++j) {
          std::memcpy(a.qs16_.data() + (g * nb32 + b) * 512 + j * 64 + lane * 4, src + 4 * j, 4);
        }
      }
      for (size_t b = 0; b < blocks; ++b) {
        const size_t gb = g * blocks + b;
        a.d16_[gb * 16 + lane] = a.d_[r * blocks + b];
        if (!q8k) {
          a.nisum16_[gb * 16 + lane] = -a.isum_[r * blocks + b];
          continue;
        }
        for (size_t p = 0; p < 8; ++p) {
          std::int16_t* dst = a.bsums16_.data() + ((gb * 8 + p) * 16 + lane) * 2;
          dst[0] = a.bsums_[(r * blocks + b) * 16 + 2 * p];
          dst[1] = a.bsums_[(r * blocks + b) * 16 + 2 * p + 1];
        }
      }
    }
    v.qs16 = a.qs16_.data();
    v.d16 = a.d16_.data();
    v.nisum16 = a.nisum16_.empty() ? nullptr : a.nisum16_.data();
    v.bsums16 = a.bsums16_.empty() ? nullptr : a.bsums16_.data();
  }
  v.qs = a.qs_.data();
  v.d = a.d_.data();
  for (size_t i = 0; i < a.isum_.size(); ++i) a.nisum_[i] = -a.isum_[i];
  v.isum = a.isum_.empty() ? nullptr : a.isum_.data();
  v.nisum = a.nisum_.empty() ? nullptr : a.nisum_.data();
  v.xsum = a.xsum_.empty() ? nullptr : a.xsum_.data();
  v.row_xsum = a.row_xsum_.empty() ? nullptr : a.row_xsum_.data();
  v.bsums = a.bsums_.empty() ? nullptr : a.bsums_.data();
  return a;
}

}  // namespace k3::quant
