// The scalar reference: number formats, the worked examples of gguf.md section 2.3 byte for
// byte, and a quantize -> dequantize error bound for every format.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/fp.h"
#include "quant/isa.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "test_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace k3::quant {
namespace {

using testing::gaussian;
using testing::heavy_tailed;
using testing::view_over;

std::vector<std::uint8_t> bytes(std::initializer_list<int> v) {
  std::vector<std::uint8_t> out;
  for (int b : v) out.push_back(static_cast<std::uint8_t>(b));
  return out;
}

// ------------------------------------------------------------------ number formats

TEST(QuantFp, HalfRoundTripsEveryPattern) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = fp16_to_f32(bits);
    if (std::isnan(f)) {
      EXPECT_EQ(f32_to_fp16(f) & 0x7e00, 0x7e00) << h;  // stays a quiet NaN
      continue;
    }
    EXPECT_EQ(f32_to_fp16(f), bits) << h;
  }
  EXPECT_EQ(fp16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_f32(0xfc00)));
}

TEST(QuantFp, HalfRoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);  // below the midpoint: max half
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // midpoint to 65536: ties to even = inf
  EXPECT_EQ(f32_to_fp16(1e9f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);      // tie, even stays
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(f32_to_fp16(0x1p-25f), 0x0000);             // tie to even zero
  EXPECT_EQ(f32_to_fp16(3 * 0x1p-25f), 0x0002);         // subnormal tie
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_fp16(4.0f / 127.0f), 0x2808);  // gguf.md Q8_0 example
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) std::uint16_t hardware_fp16(float f) {
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}

// ggml converts with F16C on x86; the software conversion must agree bit for bit.
TEST(QuantFp, HalfMatchesF16C) {
  // Our AVX2 level includes F16C (quant/isa.h); clang 14's __builtin_cpu_supports lacks "f16c".
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no F16C";
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), hardware_fp16(f)) << std::hexfloat << f;
  }
  for (std::uint32_t u = 0x33000000u; u < 0x47800000u; u += 0x1fffu) {  // the whole half range
    const float f = std::bit_cast<float>(u);
    ASSERT_EQ(f32_to_fp16(f), hardware_fp16(f)) << std::hexfloat << f;
  }
}
#endif

TEST(QuantFp, Bfloat16AndE8m0) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(e8m0_half(127), 0.5f);
  EXPECT_EQ(e8m0_half(128), 1.0f);
  EXPECT_EQ(e8m0_half(0), 0x1p-128f);
  EXPECT_EQ(e8m0_half(1), 0x1p-127f);
  EXPECT_EQ(e8m0_half(255), 0x1p127f);
  EXPECT_EQ(nearest_int(2.5f), 2);
  EXPECT_EQ(nearest_int(-3.5f), -4);
}

// ------------------------------------------------------------------ worked examples

// gguf.md 2.3: x_j = (j-16)/4; max = x_0 = -4 -> d = 0.5.
TEST(QuantReference, Q4_0WorkedExample) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 4.0f;
  std::vector<std::uint8_t> blk(18);
  quantize_row(Type::kQ4_0, x.data(), blk.data(), 32);
  EXPECT_EQ(blk, bytes({0x00, 0x38, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4, 0xc4, 0xd5,
                        0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8}));
  std::vector<float> y(32);
  dequantize_row(Type::kQ4_0, blk.data(), y.data(), 32);
  EXPECT_EQ(y[0], -4.0f);  // qs[0]=0x80: nibble 0
  EXPECT_EQ(y[16], 0.0f);  // nibble 8
  EXPECT_EQ(y[15], 0.0f);  // qs[15]=0xf8
  EXPECT_EQ(y[31], 3.5f);  // 3.75*2+8.5 = 16 clipped to 15
  for (int j = 0; j < 31; ++j) EXPECT_NEAR(y[j], x[j], 0.25f + 1e-6f) << j;
}

TEST(QuantReference, Q8_0WorkedExample) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 4.0f;
  std::vector<std::uint8_t> blk(34);
  quantize_row(Type::kQ8_0, x.data(), blk.data(), 32);
  EXPECT_EQ(blk[0], 0x08);
  EXPECT_EQ(blk[1], 0x28);  // d = f16 0x2808 = 0.031494
  EXPECT_EQ(static_cast<std::int8_t>(blk[2]), -127);
  EXPECT_EQ(static_cast<std::int8_t>(blk[3]), -119);
  EXPECT_EQ(static_cast<std::int8_t>(blk[2 + 16]), 0);
  EXPECT_EQ(static_cast<std::int8_t>(blk[2 + 31]), 119);  // 3.75 / (4/127) = 119.06
  std::vector<float> y(32);
  dequantize_row(Type::kQ8_0, blk.data(), y.data(), 32);
  EXPECT_FLOAT_EQ(y[0], -127.0f * fp16_to_f32(0x2808));
}

// Q8_0 rounds half away from zero, as ggml's roundf: ties, the floats just beside them, both
// signs, and scaled values beyond the int8 range (clamped).
TEST(QuantReference, Q8_0RoundsHalfAwayFromZeroLikeRoundf) {
  // amax 127 makes d = 1 and id = 1: each value is its own scaled value.
  const std::vector<float> ties = {0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 126.5f, -126.5f,
                                   std::nextafter(0.5f, 0.0f), std::nextafter(-0.5f, 0.0f),
                                   std::nextafter(0.5f, 1.0f), std::nextafter(-0.5f, -1.0f),
                                   std::nextafter(2.5f, 0.0f), std::nextafter(2.5f, 3.0f),
                                   0.0f, -0.0f, 1e-30f, -1e-30f, 3.49999f, -3.50001f, 100.25f,
                                   -100.75f, 63.5f, -63.5f, 12.0f, -12.0f, 0.25f, -0.75f, 7.5f,
                                   -7.5f, 127.0f};
  ASSERT_EQ(ties.size(), 31u);
  std::vector<float> x = ties;
  x.push_back(-127.0f);
  std::vector<std::uint8_t> blk(34);
  quantize_row(Type::kQ8_0, x.data(), blk.data(), 32);
  ASSERT_EQ(fp16_to_f32(static_cast<std::uint16_t>(blk[0] | blk[1] << 8)), 1.0f);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(static_cast<std::int8_t>(blk[2 + j]), static_cast<int>(std::round(x[j]))) << x[j];
  }
  // An infinite id: every nonzero value clamps to 127 or -128 (x * id is infinite), zero stays 0
  // (0 * inf is NaN).
  std::vector<float> tiny(32, 0.0f);
  tiny[0] = 1e-37f;  // d = amax / 127 is denormal, 1 / d overflows
  tiny[1] = -1e-37f;
  quantize_row(Type::kQ8_0, tiny.data(), blk.data(), 32);
  EXPECT_EQ(static_cast<std::int8_t>(blk[2]), 127);
  EXPECT_EQ(static_cast<std::int8_t>(blk[3]), -128);
  EXPECT_EQ(static_cast<std::int8_t>(blk[4]), 0);
}

// gguf.md 2.3: a hand-built Q2_K block and the values it must decode to.
TEST(QuantReference, Q2_KWorkedExample) {
  std::vector<std::uint8_t> blk(84, 0);
  blk[0] = 0x21;
  blk[1] = 0x13;
  blk[2] = 0x02;
  blk[4] = 0x11;
  blk[6] = 0x31;
  blk[16 + 0] = 0xe4;   // qs[0]
  blk[16 + 16] = 0x03;  // qs[16]
  blk[80] = 0x00;
  blk[81] = 0x3c;  // d = 1.0
  blk[82] = 0x00;
  blk[83] = 0x38;  // dmin = 0.5
  std::vector<float> y(256);
  dequantize_row(Type::kQ2_K, blk.data(), y.data(), 256);
  // Each sub-block defaults to -dmin * m (code 0); the five non-zero codes are set by hand.
  std::vector<float> expect(256, 0.0f);
  const float minus[16] = {-1.0f, -0.5f, 0, 0, -0.5f, 0, -1.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int e = 0; e < 256; ++e) expect[e] = minus[e / 16];
  expect[16] = 8.5f;  // sb1: sc 3, m 1, code 3 (qs[16] bits 0-1)
  expect[32] = 2.0f;  // sb2: sc 2, m 0, code 1 (qs[0] bits 2-3)
  expect[64] = 1.5f;  // sb4: sc 1, m 1, code 2 (qs[0] bits 4-5)
  expect[96] = 1.5f;  // sb6: sc 1, m 3, code 3 (qs[0] bits 6-7)
  EXPECT_EQ(y[0], -1.0f);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], expect[e]) << "element " << e;
}

// A hand-built Q3_K block: sub-block 0 has scale +1, every other scale is 0.
TEST(QuantReference, Q3_KHandBuiltBlock) {
  std::vector<std::uint8_t> blk(110, 0);
  std::fill(blk.begin(), blk.begin() + 32, 0xff);  // high bit set: no -4
  blk[1] = 0xfe;                                   // element 1 (hmask[1] bit 0) gets -4
  blk[32 + 0] = 0x03;                              // element 0: low bits 3
  std::uint8_t* sc = blk.data() + 96;
  sc[0] = 0x01;                               // sub-block 0: 6-bit 33 -> +1
  for (int i = 8; i < 12; ++i) sc[i] = 0xaa;  // high bits 2 for all: 32 + low
  blk[108] = 0x00;
  blk[109] = 0x40;  // d = 2.0
  std::int8_t s[16];
  unpack_q3_k_scales(sc, s);
  EXPECT_EQ(s[0], 1);
  for (int j = 1; j < 16; ++j) EXPECT_EQ(s[j], 0) << j;
  std::vector<float> y(256);
  dequantize_row(Type::kQ3_K, blk.data(), y.data(), 256);
  EXPECT_EQ(y[0], 6.0f);   // 2 * 1 * 3
  EXPECT_EQ(y[1], -8.0f);  // 2 * 1 * (0 - 4)
  EXPECT_EQ(y[2], 0.0f);
  for (int e = 16; e < 256; ++e) EXPECT_EQ(y[e], 0.0f) << e;
}

// gguf.md 2.3: [6, -3, 1.5, 0.25, 0 ..., -6, 4, 0.5, 2, 0 ...] -> e = 0x7f, scale 0.5.
std::vector<float> mxfp4_example() {
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[1] = -3.0f;
  x[2] = 1.5f;
  x[3] = 0.25f;
  x[16] = -6.0f;
  x[17] = 4.0f;
  x[18] = 0.5f;
  x[19] = 2.0f;
  return x;
}

TEST(QuantReference, Mxfp4WorkedExample) {
  const std::vector<float> x = mxfp4_example();
  std::vector<std::uint8_t> blk(17);
  quantize_row(Type::kMXFP4, x.data(), blk.data(), 32);
  std::vector<std::uint8_t> expect(17, 0);
  expect[0] = 0x7f;
  expect[1] = 0xf7;
  expect[2] = 0x6d;
  expect[3] = 0x13;
  expect[4] = 0x40;
  EXPECT_EQ(blk, expect);
  std::vector<float> y(32);
  dequantize_row(Type::kMXFP4, blk.data(), y.data(), 32);
  std::vector<float> back = x;
  back[3] = 0.0f;  // 0.25 / 0.5 = 0.5: the tie goes to the first entry, 0
  EXPECT_EQ(y, back);
}

// The same values in the compressed-tensors layout: element 2i low nibble, 2i+1 high nibble.
TEST(QuantReference, CompressedTensorsMxfp4Example) {
  const std::vector<float> x = mxfp4_example();
  std::vector<std::uint8_t> packed(16), scale(1);
  quantize_row_mxfp4_packed(x.data(), packed.data(), scale.data(), 32);
  std::vector<std::uint8_t> expect(16, 0);
  expect[0] = 0xd7;  // x0 = 6 -> 7, x1 = -3 -> 0xd
  expect[1] = 0x03;  // x2 = 1.5 -> 3, x3 = 0.25 -> 0
  expect[8] = 0x6f;  // x16 = -6 -> 0xf, x17 = 4 -> 6
  expect[9] = 0x41;  // x18 = 0.5 -> 1, x19 = 2 -> 4
  EXPECT_EQ(packed, expect);
  EXPECT_EQ(scale[0], 0x7f);
  std::vector<float> y(32);
  dequantize_row_mxfp4_packed(packed.data(), scale.data(), y.data(), 32);
  std::vector<float> back = x;
  back[3] = 0.0f;
  EXPECT_EQ(y, back);
}

TEST(QuantReference, ModelSlimInt4PackingAlongOutputs) {
  // Rows 0 and 1 share packed row 0: row 0 in the low nibble, row 1 in the high nibble.
  std::vector<float> w(2 * 32, 0.0f);
  w[0] = 7.0f;        // row 0, col 0: +7 with scale 1
  w[32 + 0] = -7.0f;  // row 1, col 0: -7 -> code 0x9
  w[1] = -3.0f;
  w[32 + 1] = 2.0f;
  const QuantizedMatrix m = quantize(Type::kModelSlimInt4, w, 2, 32);
  ASSERT_EQ(m.data.size(), 32u);
  EXPECT_EQ(m.scale[0], 1.0f);
  EXPECT_EQ(m.scale[1], 1.0f);
  EXPECT_EQ(m.data[0], 0x97);  // low 7 (row 0), high -7 = 0x9 (row 1)
  EXPECT_EQ(m.data[1], 0x2d);  // low -3 = 0xd, high 2
  std::vector<float> y(64);
  dequantize(m.view(), y);
  EXPECT_EQ(y, w);
}

TEST(QuantReference, ModelSlimOffsetConvention) {
  // ModelSlim's documented dequantization: (weight - weight_offset) * weight_scale.
  std::vector<std::uint8_t> q = {static_cast<std::uint8_t>(10), static_cast<std::uint8_t>(-20)};
  q.resize(32, 0);
  std::vector<float> scale = {0.5f}, offset = {4.0f};
  const MatrixView v = view_over(Type::kModelSlimInt8, 1, 32, q, scale, offset);
  std::vector<float> y(32);
  dequantize(v, y);
  EXPECT_EQ(y[0], 3.0f);    // (10 - 4) * 0.5
  EXPECT_EQ(y[1], -12.0f);  // (-20 - 4) * 0.5
  EXPECT_EQ(y[2], -2.0f);
}

// ------------------------------------------------------------------ error bounds

struct Stats {
  double err2 = 0, ref2 = 0;
  double rel_rmse() const { return std::sqrt(err2 / ref2); }
};

// Q8_0: |x - q*d16| <= d/2 + 127 |d - d16| <= d (1/2 + 127 * 2^-11).
TEST(QuantBounds, Q8_0) {
  std::mt19937_64 rng(11);
  const std::vector<float> x = heavy_tailed(rng, 64 * 256);
  std::vector<std::uint8_t> q(x.size() / 32 * 34);
  quantize_row(Type::kQ8_0, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  dequantize_row(Type::kQ8_0, q.data(), y.data(), x.size());
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const float bound = amax / 127.0f * (0.5f + 127.0f / 2048.0f) * 1.0001f;
    for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(x[32 * b + j] - y[32 * b + j]), bound);
  }
}

// Q4_0: the grid step is |d| = amax/8; the element at -max clips to +7, an error of |d|.
TEST(QuantBounds, Q4_0) {
  std::mt19937_64 rng(12);
  const std::vector<float> x = heavy_tailed(rng, 64 * 256);
  std::vector<std::uint8_t> q(x.size() / 32 * 18);
  quantize_row(Type::kQ4_0, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  dequantize_row(Type::kQ4_0, q.data(), y.data(), x.size());
  Stats s;
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    const float d = std::fabs(fp16_to_f32(load_u16(q.data() + 18 * b)));
    for (int j = 0; j < 32; ++j) {
      const float e = std::fabs(x[32 * b + j] - y[32 * b + j]);
      ASSERT_LE(e, d * 1.0001f) << "block " << b;
      s.err2 += e * e;
      s.ref2 += x[32 * b + j] * x[32 * b + j];
    }
  }
  EXPECT_LT(s.rel_rmse(), 0.15);
}

// MXFP4 (both layouts): d = 2^(e-128); grid gaps up to 4d (half: 2d), and values in
// (12d, 16d) clip to 12d, so |err| <= 4d.
TEST(QuantBounds, Mxfp4) {
  std::mt19937_64 rng(13);
  const std::vector<float> x = heavy_tailed(rng, 64 * 256);
  std::vector<std::uint8_t> q(x.size() / 32 * 17), packed(x.size() / 2), e8(x.size() / 32);
  quantize_row(Type::kMXFP4, x.data(), q.data(), x.size());
  quantize_row_mxfp4_packed(x.data(), packed.data(), e8.data(), x.size());
  std::vector<float> y(x.size()), yp(x.size());
  dequantize_row(Type::kMXFP4, q.data(), y.data(), x.size());
  dequantize_row_mxfp4_packed(packed.data(), e8.data(), yp.data(), x.size());
  Stats s;
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    ASSERT_EQ(q[17 * b], e8[b]) << "same shared exponent in both layouts";
    const float d = e8m0_half(e8[b]);
    for (int j = 0; j < 32; ++j) {
      const float e = std::fabs(x[32 * b + j] - y[32 * b + j]);
      ASSERT_LE(e, 4.0f * d) << "block " << b;
      ASSERT_EQ(y[32 * b + j], yp[32 * b + j]) << "layouts decode identically";
      s.err2 += e * e;
      s.ref2 += x[32 * b + j] * x[32 * b + j];
    }
  }
  EXPECT_LT(s.rel_rmse(), 0.2);
}

// K-quants: with the final scales fixed, every element sits on the grid point nearest to it
// (ggml re-derives the codes by rounding), so |err| <= distance to the nearest grid point.
// Plus a relative RMS error bound on Gaussian data.
TEST(QuantBounds, Q2_K) {
  std::mt19937_64 rng(14);
  const std::vector<float> x = heavy_tailed(rng, 32 * 256);
  std::vector<std::uint8_t> q(x.size() / 256 * 84);
  quantize_row(Type::kQ2_K, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  dequantize_row(Type::kQ2_K, q.data(), y.data(), x.size());
  Stats s;
  for (std::size_t b = 0; b < x.size() / 256; ++b) {
    const std::uint8_t* blk = q.data() + 84 * b;
    const float d = fp16_to_f32(load_u16(blk + 80)), dmin = fp16_to_f32(load_u16(blk + 82));
    for (int e = 0; e < 256; ++e) {
      const float xv = x[256 * b + e];
      const float err = std::fabs(xv - y[256 * b + e]);
      const float dl = d * static_cast<float>(blk[e / 16] & 0xf);
      const float ml = dmin * static_cast<float>(blk[e / 16] >> 4);
      if (dl != 0.0f) {
        float best = INFINITY;
        for (int c = 0; c < 4; ++c) best = std::min(best, std::fabs(xv - (dl * c - ml)));
        ASSERT_LE(err, best + 1e-5f * (std::fabs(xv) + dl)) << "block " << b << " elem " << e;
      }
      s.err2 += err * err;
      s.ref2 += xv * xv;
    }
  }
  EXPECT_LT(s.rel_rmse(), 0.45);
}

TEST(QuantBounds, Q3_K) {
  std::mt19937_64 rng(15);
  const std::vector<float> x = heavy_tailed(rng, 32 * 256);
  std::vector<std::uint8_t> q(x.size() / 256 * 110);
  quantize_row(Type::kQ3_K, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  dequantize_row(Type::kQ3_K, q.data(), y.data(), x.size());
  Stats s;
  for (std::size_t b = 0; b < x.size() / 256; ++b) {
    const std::uint8_t* blk = q.data() + 110 * b;
    std::int8_t sc[16];
    unpack_q3_k_scales(blk + 96, sc);
    const float d = fp16_to_f32(load_u16(blk + 108));
    for (int e = 0; e < 256; ++e) {
      const float xv = x[256 * b + e];
      const float err = std::fabs(xv - y[256 * b + e]);
      const float dl = d * static_cast<float>(sc[e / 16]);
      if (dl != 0.0f) {
        float best = INFINITY;
        for (int c = -4; c < 4; ++c) best = std::min(best, std::fabs(xv - dl * c));
        ASSERT_LE(err, best + 1e-5f * (std::fabs(xv) + std::fabs(dl))) << "block " << b;
      }
      s.err2 += err * err;
      s.ref2 += xv * xv;
    }
  }
  EXPECT_LT(s.rel_rmse(), 0.25);
}

TEST(QuantBounds, HalfAndBfloat16) {
  std::mt19937_64 rng(16);
  const std::vector<float> x = heavy_tailed(rng, 4096);
  for (Type t : {Type::kF16, Type::kBF16}) {
    std::vector<std::uint8_t> q(x.size() * 2);
    quantize_row(t, x.data(), q.data(), x.size());
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), x.size());
    const float rel = t == Type::kF16 ? 0x1p-11f : 0x1p-8f;  // half an ulp
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) * rel + 0x1p-25f) << name(t) << " " << i;
    }
  }
}

// ModelSlim: rounding to the integer grid, |err| <= scale/2 (scale * scale2 / 2 with groups).
TEST(QuantBounds, ModelSlim) {
  std::mt19937_64 rng(17);
  const std::size_t rows = 16, cols = 256;
  const std::vector<float> w = heavy_tailed(rng, rows * cols);
  struct Case {
    Type type;
    QuantizeOptions opt;
    double max_rel_rmse;
  };
  const Case cases[] = {
      {Type::kModelSlimInt8, {}, 0.03},
      {Type::kModelSlimInt8, {.asymmetric = true}, 0.03},
      // int4 per channel on data with 12-sigma outliers: the step is ~1/7 of the outlier
      {Type::kModelSlimInt4, {}, 0.4},
      {Type::kModelSlimInt4, {.asymmetric = true}, 0.4},
      {Type::kModelSlimInt4, {.group_size = 64}, 0.3},
      {Type::kModelSlimInt4, {.group_size = 32, .asymmetric = true}, 0.3},
  };
  for (const Case& c : cases) {
    const QuantizedMatrix m = quantize(c.type, w, rows, cols, c.opt);
    std::vector<float> y(w.size());
    dequantize(m.view(), y);
    Stats s;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t k = 0; k < cols; ++k) {
        float step = m.scale[r];
        if (c.opt.group_size != 0)
          step *= m.group_scale[r * (cols / c.opt.group_size) + k / c.opt.group_size];
        const float err = std::fabs(w[r * cols + k] - y[r * cols + k]);
        ASSERT_LE(err, 0.5f * step * 1.0001f + 1e-6f)
            << name(c.type) << " group " << c.opt.group_size << " asym " << c.opt.asymmetric;
        s.err2 += err * err;
        s.ref2 += w[r * cols + k] * w[r * cols + k];
      }
    }
    EXPECT_LT(s.rel_rmse(), c.max_rel_rmse) << name(c.type) << " group " << c.opt.group_size;
  }
}

// Non-finite inputs must not invoke undefined behaviour in any quantizer (run under UBSan).
TEST(QuantReference, QuantizersAcceptNonFiniteInput) {
  std::vector<float> x(512, 1.0f);
  x[3] = NAN;
  x[40] = INFINITY;
  x[300] = -INFINITY;
  x[301] = 1e-40f;
  x[302] = 3e38f;
  for (Type t : {Type::kF16, Type::kBF16, Type::kQ8_0, Type::kQ4_0, Type::kQ2_K, Type::kQ3_K,
                 Type::kMXFP4, Type::kMXFP4Packed, Type::kModelSlimInt8, Type::kModelSlimInt4}) {
    const QuantizedMatrix m = quantize(t, x, 2, 256);
    std::vector<float> y(512);
    dequantize(m.view(), y);
    SUCCEED() << name(t);
  }
  std::vector<float> tiny(32, 1e-42f);
  std::vector<std::uint8_t> blk(17);
  quantize_row(Type::kMXFP4, tiny.data(), blk.data(), 32);  // exponent below the E8M0 range
  EXPECT_EQ(blk[0], 0);
}

}  // namespace
}  // namespace k3::quant
