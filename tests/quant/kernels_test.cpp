// Every kernel (each ISA available here, plus scalar) against the scalar kernel and against an
// fp64 product of the dequantized weights, over random shapes and values; random byte
// patterns through every dequantizer and kernel (meaningful under ASan/UBSan).
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "quant/activations.h"
#include "quant/fp.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "quant/repack.h"
#include "test_util.h"

namespace k3::quant {
namespace {

using testing::act_dequantized;
using testing::dequantized;
using testing::heavy_tailed;
using testing::no_offset_dequantized;
using testing::random_bytes;
using testing::reference_gemm;

struct Format {
  Type type;
  QuantizeOptions opt;
  std::string label() const {
    std::string s(name(type));
    if (opt.group_size) s += "_g" + std::to_string(opt.group_size);
    if (opt.asymmetric) s += "_asym";
    return s;
  }
};

const std::vector<Format>& all_formats() {
  static const std::vector<Format> f = {
      {Type::kF32, {}},
      {Type::kF16, {}},
      {Type::kBF16, {}},
      {Type::kQ8_0, {}},
      {Type::kQ4_0, {}},
      {Type::kQ2_K, {}},
      {Type::kQ3_K, {}},
      {Type::kMXFP4, {}},
      {Type::kMXFP4Packed, {}},
      {Type::kModelSlimInt8, {}},
      {Type::kModelSlimInt8, {.asymmetric = true}},
      {Type::kModelSlimInt4, {}},
      {Type::kModelSlimInt4, {.asymmetric = true}},
      {Type::kModelSlimInt4, {.group_size = 64}},
      {Type::kModelSlimInt4, {.group_size = 32, .asymmetric = true}},
  };
  return f;
}

// Row lengths exercising full SIMD widths, odd block counts and tails.
std::vector<std::size_t> widths(Type t, std::mt19937_64& rng) {
  const std::size_t m = traits(t).row_multiple;
  if (m == 256) return {256, 512, 768};
  if (m == 32) {
    std::uniform_int_distribution<std::size_t> nb(1, 9);
    return {32, 64, 96, 32 * nb(rng), 320};
  }
  std::uniform_int_distribution<std::size_t> any(1, 70);
  return {1, 15, 16, 17, 64, any(rng), 257};
}

// Tolerances, all relative to S = sum_k |w_k x_k| of the exact product:
//  * any ISA vs the scalar kernel: only the float summation order differs -> 2e-5 S';
//  * kernel vs its exact model, the fp64 sum_k wn_k xq_k - (wn_k - w_k) x_k with xq the
//    activations as the kernel quantized them and wn the weights without ModelSlim offsets
//    (the offset term uses exact sums of x): 2e-5 S';
//    S' = S + 1.5 max_k |wn_k| sum_k |x_k| because the SIMD kernels multiply unsigned codes
//    (weight + C, C = 8 to 128 integer steps, at most ~1.33 max|w|) and convert int32 lanes to
//    float before the C term has cancelled, so their rounding is relative to that magnitude;
//  * kernel vs the fp64 product with the original activations: additionally the activation
//    rounding, at most sum_k |wn_k| |x_k - xq_k| (|x - xq| <= half the block's int8 step).
TEST(QuantKernels, MatchReferenceOnRandomShapes) {
  std::mt19937_64 rng(2024);
  for (const Format& f : all_formats()) {
    const Type t = f.type;
    for (std::size_t cols : widths(t, rng)) {
      if (f.opt.group_size && cols % f.opt.group_size) continue;
      std::uniform_int_distribution<std::size_t> row_dist(1, 19);
      std::size_t rows = row_dist(rng);
      if (t == Type::kModelSlimInt4) rows = 2 * rows;
      const std::vector<float> wf = heavy_tailed(rng, rows * cols);
      const QuantizedMatrix m = quantize(t, wf, rows, cols, f.opt);
      const MatrixView w = m.view();
      const std::vector<float> wd = dequantized(w);
      const std::vector<float> wn = no_offset_dequantized(w);
      std::vector<float> woff(wd.size());
      for (std::size_t k = 0; k < wd.size(); ++k) woff[k] = wn[k] - wd[k];
      for (std::size_t n : {1u, 2u, 4u, 5u, 9u, 12u, 16u, 33u}) {
        const std::vector<float> x = heavy_tailed(rng, n * cols);
        const Activations a = Activations::prepare(traits(t).act, x, n, cols);
        const std::vector<float> xq = act_dequantized(a);
        const std::vector<double> exact = reference_gemm(wd, rows, cols, x, n);
        std::vector<double> model = reference_gemm(wn, rows, cols, xq, n);
        const std::vector<double> off_term = reference_gemm(woff, rows, cols, x, n);
        for (std::size_t k = 0; k < model.size(); ++k) model[k] -= off_term[k];
        std::vector<float> y_scalar(n * rows);
        gemm(w, a, y_scalar, Isa::kScalar);
        for (Isa isa : available_isas()) {
          std::vector<float> y(n * rows, -1.0f);
          gemm(w, a, y, isa);
          for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t r = 0; r < rows; ++r) {
              double s = 0, act_err = 0, wmax = 0, xabs = 0;
              for (std::size_t k = 0; k < cols; ++k) {
                wmax = std::max(wmax, std::fabs(double(wn[r * cols + k])));
                xabs += std::fabs(double(x[i * cols + k]));
                // float rounding scales with both parts of the model (offsets can be large)
                s += (std::fabs(double(wn[r * cols + k])) + std::fabs(double(woff[r * cols + k]))) *
                     std::fabs(double(x[i * cols + k]));
                act_err += std::fabs(double(wn[r * cols + k])) *
                           std::fabs(double(x[i * cols + k]) - xq[i * cols + k]);
              }
              s += 1.5 * wmax * xabs;
              const double v = y[i * rows + r];
              const std::string where = f.label() + " " + std::string(name(isa)) + " [" +
                                        std::to_string(rows) + " x " + std::to_string(cols) +
                                        "] n=" + std::to_string(n) + " row " + std::to_string(r) +
                                        " act " + std::to_string(i);
              ASSERT_NEAR(v, y_scalar[i * rows + r], 2e-5 * s + 1e-30) << where;
              ASSERT_NEAR(v, model[i * rows + r], 2e-5 * s + 1e-30) << where;
              ASSERT_NEAR(v, exact[i * rows + r], act_err * 1.001 + 2e-5 * s + 1e-30) << where;
            }
          }
        }
      }
    }
  }
}

// The activation rounding above is the whole story: the int8 step of a block is amax/127, so
// for well-behaved data the relative error of an integer kernel is small. Checked on a
// realistic shape for each format with the active ISA.
TEST(QuantKernels, RelativeErrorOnRealisticShape) {
  std::mt19937_64 rng(77);
  const std::size_t rows = 64, cols = 1024;
  const std::vector<float> wf = testing::gaussian(rng, rows * cols, 0.02f);
  const std::vector<float> x = testing::gaussian(rng, cols);
  for (const Format& f : all_formats()) {
    const QuantizedMatrix m = quantize(f.type, wf, rows, cols, f.opt);
    const std::vector<float> wd = dequantized(m.view());
    const std::vector<double> exact = reference_gemm(wd, rows, cols, x, 1);
    std::vector<float> y(rows);
    gemv(m.view(), x, y);
    double e2 = 0, r2 = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      e2 += (y[r] - exact[r]) * (y[r] - exact[r]);
      r2 += exact[r] * exact[r];
    }
    const double tol = traits(f.type).integer_kernel ? 0.02 : 1e-5;
    EXPECT_LT(std::sqrt(e2 / r2), tol) << f.label();
  }
}

// A heavy-tailed matrix of format f and n heavy-tailed activation rows, drawn in that order.
struct HeavyTailedProblem {
  QuantizedMatrix m;
  std::vector<float> x;
};
HeavyTailedProblem heavy_tailed_problem(std::mt19937_64& rng, const Format& f, std::size_t rows,
                             std::size_t cols, std::size_t n) {
  const std::vector<float> wf = heavy_tailed(rng, rows * cols);
  QuantizedMatrix m = quantize(f.type, wf, rows, cols, f.opt);
  return {std::move(m), heavy_tailed(rng, n * cols)};
}

TEST(QuantKernels, GemvGemmAndDotAgree) {
  std::mt19937_64 rng(5);
  const std::size_t rows = 10, cols = 512, n = 3;
  for (const Format& f : all_formats()) {
    const auto [m, x] = heavy_tailed_problem(rng, f, rows, cols, n);
    std::vector<float> y(n * rows);
    gemm(m.view(), x, n, y);
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<float> yv(rows);
      const std::span<const float> xi(x.data() + i * cols, cols);
      gemv(m.view(), xi, yv);
      for (std::size_t r = 0; r < rows; ++r) {
        EXPECT_EQ(yv[r], y[i * rows + r]) << f.label();  // same kernel, same activations
        EXPECT_EQ(dot(m.view(), r, xi), yv[r]) << f.label() << " row " << r;
      }
    }
  }
}

// Batch invariance: a row's outputs are bitwise the same whatever else is in the
// batch. Every kernel (each ISA here, plain and repacked layouts) adds a row's blocks in one
// order at every batch size, so activation row i of a batch of n gives what it gives alone.
TEST(QuantKernels, EveryActivationRowIsTheSameAtAnyBatchSize) {
  std::mt19937_64 rng(17);
  const std::vector<std::size_t> batches = {2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64};
  for (const Format& f : all_formats())
  // Whole groups of four 32-blocks, and 13 blocks (a tail of one); 2 and 3 super-blocks.
  for (const std::size_t cols : traits(f.type).row_multiple == 256
                                    ? std::vector<std::size_t>{512, 768}
                                    : std::vector<std::size_t>{512, 416}) {
    if (f.opt.group_size != 0 && cols % f.opt.group_size != 0) continue;
    // Tail rows past the groups of 4 and 16 (MS_INT4 packs rows in pairs).
    const std::size_t rows = f.type == Type::kModelSlimInt4 ? 202 : 203;
    const std::vector<float> wf = heavy_tailed(rng, rows * cols);
    const QuantizedMatrix m = quantize(f.type, wf, rows, cols, f.opt);
    std::vector<std::pair<std::string, Repacked>> packed;
    if (can_repack(f.type)) {
      for (std::size_t g : {std::size_t{4}, std::size_t{8}})
        packed.emplace_back(" by " + std::to_string(g), repack(m.view(), g));
    }
    if (can_repack_vnni(f.type)) packed.emplace_back(" VNNI", repack_vnni(m.view()));
    std::vector<std::pair<std::string, MatrixView>> views = {{"", m.view()}};
    for (const auto& [label, p] : packed) views.emplace_back(label, p.view());
    const std::vector<float> x = heavy_tailed(rng, 64 * cols);
    for (const Isa isa : available_isas()) {
      for (const auto& [label, view] : views) {
        const std::string what = f.label() + label + " [" + std::to_string(rows) + " x " +
                                 std::to_string(cols) + "] on " + std::string(name(isa));
        std::vector<std::vector<float>> alone(64, std::vector<float>(rows));
        for (std::size_t i = 0; i < 64; ++i)
          gemv(view, std::span<const float>(x.data() + i * cols, cols), alone[i], isa);
        for (const std::size_t n : batches) {
          const Activations a = Activations::prepare(
              traits(view.type).act, std::span<const float>(x.data(), n * cols), n, cols);
          std::vector<float> y(n * rows);
          gemm(view, a, y, isa);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i)
            bad += std::memcmp(alone[i].data(), y.data() + i * rows, rows * sizeof(float)) != 0;
          EXPECT_EQ(bad, 0u) << what << ": activation rows differing from alone in a batch of "
                             << n;
          if (bad != 0) break;
        }
      }
    }
  }
}

// Every output is computed by exactly one kernel call, so the result must not depend on the
// number of threads.
TEST(QuantKernels, ThreadCountDoesNotChangeResults) {
  std::mt19937_64 rng(9);
  const std::size_t rows = 300, cols = 512, n = 6;
  for (const Format& f : all_formats()) {
    const auto [m, x] = heavy_tailed_problem(rng, f, rows, cols, n);
    std::vector<float> y1(n * rows), y2(n * rows);
    {
      tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
      gemm(m.view(), x, n, y1);
    }
    {
      tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
      gemm(m.view(), x, n, y2);
    }
    EXPECT_EQ(y1, y2) << f.label();
  }
}

// Zero-width and zero-row matrices are legal and produce nothing or zeros.
TEST(QuantKernels, EmptyShapes) {
  std::vector<float> none;
  const QuantizedMatrix m = quantize(Type::kQ8_0, none, 0, 64);
  std::vector<float> x(64, 1.0f), y;
  EXPECT_NO_THROW(gemv(m.view(), x, y));
  const QuantizedMatrix f = quantize(Type::kF32, none, 3, 0);
  std::vector<float> y3(3, 7.0f);
  gemv(f.view(), none, y3);
  EXPECT_EQ(y3, std::vector<float>(3, 0.0f));
}

// ------------------------------------------------------------------ arbitrary bytes

// Random bytes as weights: the scales are then arbitrary f16/E8M0/f32 patterns (NaN, Inf,
// subnormals). Every dequantizer and kernel must run without undefined behaviour, and where
// the scalar result is finite every ISA must agree with it.
QuantizedMatrix random_matrix(Type t, std::size_t rows, std::size_t cols, std::size_t group,
                              std::mt19937_64& rng) {
  QuantizedMatrix m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  m.group_size = group;
  m.data = random_bytes(rng, data_bytes(t, rows, cols));
  auto floats = [&](std::size_t n) {
    const std::vector<std::uint8_t> b = random_bytes(rng, 4 * n);
    std::vector<float> v(n);
    std::memcpy(v.data(), b.data(), 4 * n);
    return v;
  };
  if (t == Type::kMXFP4Packed) m.e8m0 = random_bytes(rng, rows * cols / 32);
  if (t == Type::kModelSlimInt8 || t == Type::kModelSlimInt4) {
    m.scale = floats(rows);
    if (group == 0) {
      m.offset = floats(rows);
    } else {
      m.group_scale = floats(rows * cols / group);
      m.group_offset = floats(rows * cols / group);
    }
  }
  // Force the special half patterns into the f16 scale slots of a few blocks.
  const std::uint16_t specials[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x7bff, 0x8000};
  const std::size_t rb = t == Type::kModelSlimInt4 ? 0 : m.data.size() / rows;
  std::size_t scale_at = SIZE_MAX, scale2_at = SIZE_MAX;
  switch (t) {
    case Type::kQ8_0:
    case Type::kQ4_0:
      scale_at = 0;
      break;
    case Type::kQ2_K:
      scale_at = 80;
      scale2_at = 82;
      break;
    case Type::kQ3_K:
      scale_at = 108;
      break;
    default:
      break;
  }
  if (scale_at != SIZE_MAX) {
    const std::size_t bb = traits(t).block_bytes;
    for (std::size_t i = 0; i < m.data.size() / bb; i += 3) {
      store_u16(m.data.data() + i * bb + scale_at, specials[i % 7]);
      if (scale2_at != SIZE_MAX)
        store_u16(m.data.data() + i * bb + scale2_at, specials[(i + 3) % 7]);
    }
  }
  (void)rb;
  return m;
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
}

TEST(QuantKernels, AnyBytePatternIsWellDefined) {
  std::mt19937_64 rng(31337);
  for (const Format& f : all_formats()) {
    if (f.opt.asymmetric) continue;  // random side arrays already cover offsets
    const Type t = f.type;
    const std::size_t cols = traits(t).row_multiple == 256 ? 512 : 128;
    const std::size_t rows = 6;
    for (int trial = 0; trial < 8; ++trial) {
      const std::size_t n = trial % 2 == 0 ? 3 : 16;  // row kernels and the GEMM tile path
      const QuantizedMatrix m = random_matrix(t, rows, cols, f.opt.group_size, rng);
      const std::vector<float> wd = dequantized(m.view());  // reference dequantizer
      std::vector<float> x = heavy_tailed(rng, n * cols);
      if (trial >= 6) {
        x[5] = INFINITY;
        x[cols + 7] = NAN;
      }
      const Activations a = Activations::prepare(traits(t).act, x, n, cols);
      std::vector<float> ref(n * rows);
      gemm(m.view(), a, ref, Isa::kScalar);
      const bool comparable = all_finite(wd) && all_finite(ref) && trial < 6;
      const std::vector<float> xq = act_dequantized(a);
      for (Isa isa : available_isas()) {
        std::vector<float> y(n * rows);
        gemm(m.view(), a, y, isa);
        if (!comparable) continue;
        for (std::size_t i = 0; i < n; ++i) {
          for (std::size_t r = 0; r < rows; ++r) {
            double s = 0, wmax = 0, xabs = 0;
            for (std::size_t k = 0; k < cols; ++k) {
              s += std::fabs(double(wd[r * cols + k]) * xq[i * cols + k]);
              wmax = std::max(wmax, std::fabs(double(wd[r * cols + k])));
              xabs += std::fabs(double(xq[i * cols + k]));
            }
            s += 1.5 * wmax * xabs;  // see MatchReferenceOnRandomShapes
            if (!std::isfinite(s) || s > 1e30) continue;
            ASSERT_NEAR(y[i * rows + r], ref[i * rows + r], 2e-5 * s + 1e-30)
                << f.label() << " " << name(isa) << " trial " << trial;
          }
        }
      }
    }
  }
}

// The int8 activation blocks are the same bits whichever ISA quantizes them: ordinary values,
// ties at .5, zeros, huge values, infinities and NaNs, in both block orders.
TEST(QuantKernels, ActivationQuantizationIsTheSameOnEveryIsa) {
  std::mt19937_64 rng(77);
  const std::size_t rows = 9, cols = 32 * 37;
  std::vector<float> x = heavy_tailed(rng, rows * cols);
  for (std::size_t i = 0; i < cols; ++i) x[i] = static_cast<float>(i % 64) * 0.5f - 16.0f;  // ties
  std::fill(x.begin() + cols, x.begin() + cols + 64, 0.0f);  // zero blocks
  x[2 * cols + 3] = std::numeric_limits<float>::infinity();
  x[3 * cols + 40] = std::numeric_limits<float>::quiet_NaN();
  x[4 * cols + 70] = -std::numeric_limits<float>::infinity();
  x[4 * cols + 71] = std::numeric_limits<float>::quiet_NaN();
  x[5 * cols + 100] = 3e38f;
  x[6 * cols + 5] = -1e-40f;  // subnormal
  const Isa before = active_isa();
  for (ActFormat format :
       {ActFormat::kQ8Block32, ActFormat::kQ8Block32EvenOdd, ActFormat::kQ8Block32Sums}) {
    set_active_isa(Isa::kScalar);
    const Activations want = Activations::prepare(format, x, rows, cols);
    for (Isa isa : available_isas()) {
      set_active_isa(isa);
      const Activations got = Activations::prepare(format, x, rows, cols);
      const ActView& w = want.view();
      const ActView& g = got.view();
      const std::size_t nb = rows * w.blocks;
      const std::string where = std::string(name(isa)) + " " + std::string(name(format));
      EXPECT_EQ(0, std::memcmp(w.qs, g.qs, rows * cols)) << where;
      EXPECT_EQ(0, std::memcmp(w.d, g.d, nb * sizeof(float))) << where;
      EXPECT_EQ(0, std::memcmp(w.isum, g.isum, nb * sizeof(std::int32_t))) << where;
      EXPECT_EQ(0, std::memcmp(w.nisum, g.nisum, nb * sizeof(std::int32_t))) << where;
      if (format == ActFormat::kQ8Block32Sums) {
        ASSERT_NE(g.xsum, nullptr) << where;
        ASSERT_NE(g.row_xsum, nullptr) << where;
        EXPECT_EQ(0, std::memcmp(w.xsum, g.xsum, nb * sizeof(float))) << where;
        EXPECT_EQ(0, std::memcmp(w.row_xsum, g.row_xsum, rows * sizeof(float))) << where;
      } else {
        EXPECT_EQ(g.xsum, nullptr) << where;  // only ModelSlim's offsets read them
      }
    }
  }
  // Q8_K (K-quant weights): 256-element blocks, a tie for the largest |x| (the first wins).
  const std::size_t kcols = 256 * 5;
  std::vector<float> xk = heavy_tailed(rng, rows * kcols);
  std::fill(xk.begin() + 256, xk.begin() + 512, 0.0f);  // a zero block
  xk[10] = 50.0f;
  xk[20] = -50.0f;
  xk[kcols + 600] = std::numeric_limits<float>::quiet_NaN();
  xk[2 * kcols + 3] = std::numeric_limits<float>::infinity();
  xk[3 * kcols + 7] = -1e-40f;
  set_active_isa(Isa::kScalar);
  const Activations want = Activations::prepare(ActFormat::kQ8K, xk, rows, kcols);
  for (Isa isa : available_isas()) {
    set_active_isa(isa);
    const Activations got = Activations::prepare(ActFormat::kQ8K, xk, rows, kcols);
    const ActView& w = want.view();
    const ActView& g = got.view();
    const std::size_t nb = rows * w.blocks;
    const std::string where = std::string(name(isa)) + " Q8_K";
    EXPECT_EQ(0, std::memcmp(w.qs, g.qs, rows * kcols)) << where;
    EXPECT_EQ(0, std::memcmp(w.d, g.d, nb * sizeof(float))) << where;
    EXPECT_EQ(0, std::memcmp(w.bsums, g.bsums, nb * 16 * sizeof(std::int16_t))) << where;
  }
  set_active_isa(before);
}

// quantize(type, x) gives the scalar reference's bytes, row by row, on every ISA of this host.
void expect_same_bits_on_every_isa(Type type, const std::vector<float>& x, std::size_t rows,
                                   std::size_t cols) {
  const Isa before = active_isa();
  set_active_isa(Isa::kScalar);
  const QuantizedMatrix want = quantize(type, x, rows, cols);
  for (Isa isa : available_isas()) {
    set_active_isa(isa);
    const QuantizedMatrix got = quantize(type, x, rows, cols);
    ASSERT_EQ(want.data.size(), got.data.size());
    const std::size_t bytes = want.data.size() / rows;
    for (std::size_t r = 0; r < rows; ++r) {
      EXPECT_EQ(0, std::memcmp(want.data.data() + r * bytes, got.data.data() + r * bytes, bytes))
          << name(isa) << " row " << r;
    }
  }
  set_active_isa(before);
}

// Q2_K weights are the same bits whichever ISA fits them (the AVX-512 fit runs the 16 sub-blocks
// of a block in 16 lanes): ordinary and uniform values, flat sub-blocks (zeros, one repeated
// positive or negative value), ties, huge values, subnormals, infinities and NaNs.
TEST(QuantKernels, Q2_KQuantizationIsTheSameOnEveryIsa) {
  std::mt19937_64 rng(78);
  const std::size_t rows = 24, cols = 256 * 6;
  std::vector<float> x = heavy_tailed(rng, rows * cols);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (std::size_t i = cols; i < 2 * cols; ++i) x[i] = uniform(rng);
  std::fill(x.begin() + 2 * cols, x.begin() + 2 * cols + 16, 0.0f);            // flat at 0
  std::fill(x.begin() + 2 * cols + 16, x.begin() + 2 * cols + 32, 0.75f);      // flat above 0
  std::fill(x.begin() + 2 * cols + 32, x.begin() + 2 * cols + 48, -0.25f);     // flat below 0
  for (std::size_t i = 0; i < 256; ++i) x[3 * cols + i] = static_cast<float>(i % 8) * 0.5f;  // ties
  for (std::size_t i = 256; i < 512; ++i) x[3 * cols + i] = static_cast<float>(i % 4) - 3.0f;
  x[4 * cols + 3] = 3e38f;
  x[4 * cols + 300] = -3e38f;
  x[5 * cols + 7] = -1e-40f;
  x[5 * cols + 8] = 1e-42f;
  x[6 * cols + 5] = std::numeric_limits<float>::infinity();
  x[7 * cols + 17] = -std::numeric_limits<float>::infinity();
  x[8 * cols] = std::numeric_limits<float>::quiet_NaN();  // a sub-block's first element
  x[8 * cols + 300] = std::numeric_limits<float>::quiet_NaN();
  expect_same_bits_on_every_isa(Type::kQ2_K, x, rows, cols);
}

// Q8_0 weights (a drafter's float matrices re-encoded at load) are the same bits whichever ISA
// encodes them: ordinary values, exact ties at every scale (roundf rounds them away from zero),
// the floats beside them, huge values, a scale whose inverse overflows, subnormals, infinities
// and NaNs.
TEST(QuantKernels, Q8_0QuantizationIsTheSameOnEveryIsa) {
  std::mt19937_64 rng(79);
  const std::size_t rows = 16, cols = 32 * 40;
  std::vector<float> x = heavy_tailed(rng, rows * cols);
  for (std::size_t b = 0; b < 40; ++b) {  // row 1: amax 127, so the codes are the values
    float* blk = x.data() + cols + 32 * b;
    for (std::size_t j = 0; j < 32; ++j) {
      const float tie = static_cast<float>(static_cast<int>(j + b) % 254 - 127) + 0.5f;
      blk[j] = b % 3 == 0 ? tie : std::nextafter(tie, b % 3 == 1 ? 0.0f : 2 * tie);
    }
    blk[31] = 127.0f;
  }
  for (std::size_t i = 2 * cols; i < 3 * cols; ++i) x[i] *= 1e-38f;  // subnormal scales
  x[3 * cols] = 1e-37f;  // a block whose scale's inverse overflows: codes +-127, -128 or 0
  x[3 * cols + 1] = -1e-37f;
  std::fill(x.begin() + 3 * cols + 2, x.begin() + 3 * cols + 32, 0.0f);
  x[4 * cols + 3] = 3e38f;
  x[4 * cols + 300] = -3e38f;
  x[5 * cols + 7] = -1e-40f;
  x[6 * cols + 5] = std::numeric_limits<float>::infinity();
  x[7 * cols + 17] = -std::numeric_limits<float>::infinity();
  x[8 * cols] = std::numeric_limits<float>::quiet_NaN();
  x[8 * cols + 300] = std::numeric_limits<float>::quiet_NaN();
  std::fill(x.begin() + 9 * cols, x.begin() + 9 * cols + 32, 0.0f);
  expect_same_bits_on_every_isa(Type::kQ8_0, x, rows, cols);
}

}  // namespace
}  // namespace k3::quant
