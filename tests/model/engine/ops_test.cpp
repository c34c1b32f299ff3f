// The engine's vectorized element-wise math (situ_rows, sigmoid_rows, silu_rows, tanh_rows)
// against double-precision std:: references, and its determinism: the same bits for an element
// wherever it sits in the array and on either ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "common/error.h"
#include "model/engine/kda.h"
#include "model/engine/ops.h"
#include "quant/isa.h"

namespace k3::test {
namespace {

using model::engine::sigmoid_rows;
using model::engine::silu_rows;
using model::engine::situ_rows;
using model::engine::tanh_rows;
using quant::Isa;

constexpr double kMaxRelError = 5e-7;

// Relative error, measured against FLT_MIN for results in float's denormal range (where a
// float cannot carry relative precision).
double rel_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : INFINITY;
  if (std::isinf(want)) return double(got) == want ? 0.0 : INFINITY;
  return std::fabs(double(got) - want) / std::max(std::fabs(want), double(FLT_MIN));
}

// Wide and tiny magnitudes of both signs: log-uniform over [1e-38, 1e3], uniform over [-12, 12]
// (where the functions bend), then float's edge values.
std::vector<float> test_values(std::size_t random_count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> log_mag(std::log(1e-38), std::log(1e3));
  std::uniform_real_distribution<double> near(-12.0, 12.0);
  std::vector<float> v;
  for (std::size_t i = 0; i < random_count; ++i) {
    const double m = std::exp(log_mag(rng));
    v.push_back(static_cast<float>(i % 2 == 0 ? m : -m));
    v.push_back(static_cast<float>(near(rng)));
  }
  const float edges[] = {0.0f,   1e-30f, 1e-40f, FLT_TRUE_MIN, FLT_MIN, 1e-7f, 0.01f, 0.5f,
                         0.625f, 1.0f,   2.0f,   9.0f,         20.0f,   40.0f, 87.0f, 88.7f,
                         89.0f,  100.0f, 104.0f, 110.0f,       1e3f,    1e4f,  1e30f, FLT_MAX};
  for (float e : edges) {
    v.push_back(e);
    v.push_back(-e);
  }
  return v;
}

std::vector<std::uint32_t> bits(std::span<const float> v) {
  std::vector<std::uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<std::uint32_t>(x));
  return b;
}

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_situ(double g, double u, double beta, double beta_lin) {
  return beta * std::tanh(g / beta) * ref_sigmoid(g) * (beta_lin * std::tanh(u / beta_lin));
}
// The per-element float formula situ_rows replaced (libm tanhf/expf).
float old_situ(float gate, float up, float beta, float beta_lin) {
  const float s = 1.0f / (1.0f + std::exp(-gate));
  return beta * std::tanh(gate / beta) * s * (beta_lin * std::tanh(up / beta_lin));
}

using Unary = void (*)(std::span<float>, Isa);
struct UnaryCase {
  const char* name;
  Unary f;
  double (*ref)(double);
};
const UnaryCase kUnary[] = {
    {"sigmoid", sigmoid_rows, ref_sigmoid},
    {"silu", silu_rows, [](double x) { return x * ref_sigmoid(x); }},
    {"tanh", tanh_rows, [](double x) { return std::tanh(x); }},
};

// (beta, beta_lin): the model's (4, 25), others, and negative ones (which act as their
// absolute values: tanh is odd).
const float kBetas[][2] = {{4.0f, 25.0f}, {1.0f, 1.0f}, {0.3f, 7.5f}, {-4.0f, -25.0f}};

TEST(EngineOps, UnaryWithin5e7OfDoubleOnEveryIsa) {
  const auto values = test_values(200000, 1);
  for (Isa isa : quant::available_isas()) {
    for (const auto& c : kUnary) {
      std::vector<float> y = values;
      c.f(y, isa);
      double worst = 0;
      float worst_x = 0;
      for (std::size_t i = 0; i < values.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << c.name << "(" << values[i] << ")";
        const double e = rel_error(y[i], c.ref(values[i]));
        if (e > worst) {
          worst = e;
          worst_x = values[i];
        }
      }
      std::printf("%-7s %-6s max relative error %.3g (at x = %g) over %zu values\n", c.name,
                  std::string(quant::name(isa)).c_str(), worst, double(worst_x), values.size());
      EXPECT_LE(worst, kMaxRelError) << c.name << " on " << quant::name(isa) << " at " << worst_x;
    }
  }
}

TEST(EngineOps, EdgeValues) {
  for (Isa isa : quant::available_isas()) {
    std::vector<float> t = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -FLT_TRUE_MIN, NAN};
    tanh_rows(t, isa);
    EXPECT_EQ(bits(std::span(t).first(4)), bits(std::vector<float>{0.0f, -0.0f, 1.0f, -1.0f}));
    EXPECT_EQ(t[4], 1e-40f);  // tanh(x) = x to the last bit of a denormal
    EXPECT_EQ(t[5], -FLT_TRUE_MIN);
    EXPECT_TRUE(std::isnan(t[6]));

    std::vector<float> s = {0.0f, INFINITY, -INFINITY, 200.0f, -200.0f, -100.0f, NAN};
    sigmoid_rows(s, isa);
    EXPECT_EQ(s[0], 0.5f);
    EXPECT_EQ(s[1], 1.0f);
    EXPECT_EQ(s[2], 0.0f);
    EXPECT_EQ(s[3], 1.0f);
    EXPECT_EQ(s[4], 0.0f);
    EXPECT_EQ(s[5], static_cast<float>(ref_sigmoid(-100.0)));  // a denormal, correctly rounded
    EXPECT_TRUE(std::isnan(s[6]));

    std::vector<float> l = {-0.0f, -1000.0f, FLT_MAX, -FLT_MAX};
    silu_rows(l, isa);
    EXPECT_EQ(bits(l), bits(std::vector<float>{-0.0f, -0.0f, FLT_MAX, -0.0f}));

    // SiTU keeps the sign of a zero like the old formula, and NaN propagates.
    std::vector<float> g = {-0.0f, 0.0f, 3.0f, NAN, 1.0f}, u = {2.0f, 2.0f, -0.0f, 1.0f, NAN};
    situ_rows(g, u, 4.0f, 25.0f, isa);
    EXPECT_EQ(bits(std::span(g).first(3)), bits(std::vector<float>{-0.0f, 0.0f, -0.0f}));
    EXPECT_TRUE(std::isnan(g[3]));
    EXPECT_TRUE(std::isnan(g[4]));
  }
}

TEST(EngineOps, SituWithin5e7OfDoubleOnEveryIsa) {
  const auto gs = test_values(100000, 2), us = test_values(100000, 3);
  std::vector<float> up = us;
  std::shuffle(up.begin(), up.end(), std::mt19937(4));
  for (Isa isa : quant::available_isas()) {
    for (const auto& b : kBetas) {
      std::vector<float> y = gs;
      situ_rows(y, up, b[0], b[1], isa);
      double worst = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "situ(" << gs[i] << ", " << up[i] << ")";
        worst = std::max(worst, rel_error(y[i], ref_situ(gs[i], up[i], b[0], b[1])));
      }
      std::printf("situ (beta %g, beta_lin %g) %-6s max relative error %.3g over %zu values\n",
                  double(b[0]), double(b[1]), std::string(quant::name(isa)).c_str(), worst,
                  y.size());
      EXPECT_LE(worst, kMaxRelError) << b[0] << " " << b[1] << " on " << quant::name(isa);
    }
  }
}

// Where the old float formula is itself accurate (inputs and result in float's normal range),
// the new one agrees with it within 5e-7; beta_lin = 0 gives the old zeros and NaN.
TEST(EngineOps, SituMatchesTheOldFormula) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> log_mag(std::log(1e-20), std::log(60.0));
  std::vector<float> g, u;
  for (int i = 0; i < 200000; ++i) {
    const double a = std::exp(log_mag(rng)), b = std::exp(log_mag(rng));
    g.push_back(static_cast<float>(i % 2 ? a : -a));
    u.push_back(static_cast<float>(i % 3 ? b : -b));
  }
  for (const auto& b : kBetas) {
    std::vector<float> y = g;
    situ_rows(y, u, b[0], b[1]);
    double worst = 0;
    std::size_t compared = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const float old = old_situ(g[i], u[i], b[0], b[1]);
      if (std::fabs(old) < 1e3 * FLT_MIN) continue;  // lost to float's range in the old form
      worst = std::max(worst, rel_error(y[i], old));
      ++compared;
    }
    std::printf(
        "situ (beta %g, beta_lin %g) vs old float formula: max relative difference %.3g "
        "over %zu values\n",
        double(b[0]), double(b[1]), worst, compared);
    EXPECT_LE(worst, kMaxRelError);
    EXPECT_GT(compared, y.size() / 2);
  }
  std::vector<float> g0 = {1.5f, -2.0f, 0.5f, 3.0f}, u0 = {2.0f, 3.0f, -1.0f, 0.0f};
  std::vector<float> y0 = g0;
  situ_rows(y0, u0, 4.0f, 0.0f);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(y0[i]),
              std::bit_cast<std::uint32_t>(old_situ(g0[i], u0[i], 4.0f, 0.0f)));
  }
  EXPECT_TRUE(std::isnan(y0[3]));
  EXPECT_TRUE(std::isnan(old_situ(g0[3], u0[3], 4.0f, 0.0f)));
  // The single-value form gives situ_rows' bits.
  for (std::size_t i = 0; i < 1000; ++i) {
    const float one = model::engine::situ(g[i], u[i], 4.0f, 25.0f);
    std::vector<float> row = {g[i]};
    situ_rows(row, std::span(u).subspan(i, 1), 4.0f, 25.0f);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(one), std::bit_cast<std::uint32_t>(row[0]));
  }
}

// Every window [start, start + len) of one array, computed alone, gives the bits the whole
// array gave: vector body, padded tail and any length agree.
TEST(EngineOps, BitsIndependentOfPositionAndLength) {
  const auto values = test_values(48, 6);  // 96 random + the edges
  std::vector<float> up = values;
  std::reverse(up.begin(), up.end());
  for (Isa isa : quant::available_isas()) {
    std::vector<std::function<void(std::span<float>, std::span<const float>)>> fs = {
        [&](std::span<float> x, std::span<const float>) { sigmoid_rows(x, isa); },
        [&](std::span<float> x, std::span<const float>) { silu_rows(x, isa); },
        [&](std::span<float> x, std::span<const float>) { tanh_rows(x, isa); },
        [&](std::span<float> x, std::span<const float> v) { situ_rows(x, v, 4.0f, 25.0f, isa); },
    };
    for (const auto& f : fs) {
      std::vector<float> whole = values;
      f(whole, up);
      const auto want = bits(whole);
      for (std::size_t len = 1; len <= 19; ++len) {
        for (std::size_t start = 0; start + len <= values.size(); start += 3) {
          std::vector<float> w(values.begin() + start, values.begin() + start + len);
          f(w, std::span(up).subspan(start, len));
          const auto got = bits(w);
          ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin() + start))
              << quant::name(isa) << " window " << start << "+" << len;
        }
      }
    }
  }
}

// The portable kernels are the vector kernels' model: the same bits, element for element, on
// every ISA this CPU has.
TEST(EngineOps, ScalarAndVectorKernelsGiveTheSameBits) {
  const auto values = test_values(100000, 7);
  std::vector<float> up = values;
  std::shuffle(up.begin(), up.end(), std::mt19937(8));
  for (Isa isa : quant::available_isas()) {
    if (isa == Isa::kScalar) continue;
    for (const auto& c : kUnary) {
      std::vector<float> a = values, b = values;
      c.f(a, Isa::kScalar);
      c.f(b, isa);
      EXPECT_EQ(bits(a), bits(b)) << c.name << " on " << quant::name(isa);
    }
    for (const auto& beta : kBetas) {
      std::vector<float> a = values, b = values;
      situ_rows(a, up, beta[0], beta[1], Isa::kScalar);
      situ_rows(b, up, beta[0], beta[1], isa);
      EXPECT_EQ(bits(a), bits(b)) << "situ " << beta[0] << " " << beta[1] << " on "
                                  << quant::name(isa);
    }
  }
}

// RMSNorm and the AttnRes mix add their double sums in eight lanes in one fixed order
// (ops_kernels.h lane_sums): the scalar and vector paths give the same bits, tails included,
// and the values stay within double rounding of a plain sequential sum.
TEST(EngineOps, NormAndAttnResSumsGiveTheSameBitsOnEveryIsa) {
  if (quant::detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const Isa before = quant::active_isa();
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t dim : {std::size_t{2048}, std::size_t{13}, std::size_t{517}}) {
    std::vector<float> x(3 * dim), weight(dim), score(dim);
    for (float& v : x) v = normal(rng) * 3.0f;
    for (float& v : weight) v = 1.0f + 0.1f * normal(rng);
    // Logits of order 1, so that every source weighs in the mix (a unit score vector gives
    // logits ~ sqrt(dim) apart, one source's weight ~1, and hides the weighted sum's rounding).
    const float score_scale = 1.0f / std::sqrt(static_cast<float>(dim));
    for (float& v : score) v = normal(rng) * score_scale;
    const std::vector<const float*> sources = {&x[0], &x[dim], &x[2 * dim]};
    std::vector<float> norm[2], mix[2];
    for (Isa isa : quant::available_isas()) {
      const int at = isa == Isa::kScalar ? 0 : 1;
      quant::set_active_isa(isa);
      norm[at].resize(3 * dim);
      mix[at].resize(dim);
      model::engine::rms_norm(x.data(), 3, dim, weight, 1e-6, norm[at].data());
      model::engine::attn_res_mix(sources, dim, score, 1e-6, mix[at].data());
      if (at == 0) continue;  // the scalar path comes first
      EXPECT_EQ(bits(norm[0]), bits(norm[1]))
          << "rms_norm, dim " << dim << " on " << quant::name(isa);
      EXPECT_EQ(bits(mix[0]), bits(mix[1]))
          << "attn_res_mix, dim " << dim << " on " << quant::name(isa);
    }
    for (std::size_t r = 0; r < 3; ++r) {
      double sum_sq = 0;
      for (std::size_t i = 0; i < dim; ++i) sum_sq += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(sum_sq / double(dim) + 1e-6);
      for (std::size_t i = 0; i < dim; ++i) {
        const double want = double(weight[i]) * double(static_cast<float>(x[r * dim + i] * inv));
        EXPECT_NEAR(norm[0][r * dim + i], want, 1e-6 * std::fabs(want) + 1e-30);
      }
    }
  }
  quant::set_active_isa(before);
}

TEST(EngineOps, KdaRecurrenceGivesTheSameBitsOnEveryIsa) {
  if (quant::detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const Isa before = quant::active_isa();
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t dim : {std::size_t{32}, std::size_t{13}, std::size_t{128}, std::size_t{72}}) {
    const std::size_t tokens = 5;
    model::engine::KdaHead head;
    head.resize(tokens, dim);
    for (auto* v : {&head.q, &head.k, &head.v}) {
      for (float& x : *v) x = normal(rng) * 0.3f;
    }
    for (float& x : head.g) x = -std::fabs(normal(rng));
    for (float& x : head.beta) x = 0.5f + 0.1f * normal(rng);
    std::vector<float> state0(dim * dim);
    for (float& x : state0) x = normal(rng);
    // In place (decode), and from a state left alone into a scratch state (verify): the
    // scratch ends as the state decoding leaves, on every ISA.
    std::vector<float> out[2], state[2], after[2];
    int at = 0;
    for (Isa isa : quant::available_isas()) {
      quant::set_active_isa(isa);
      model::engine::KdaHead h = head;
      state[at] = state0;
      model::engine::kda_recurrent(h, state[at].data());
      out[at] = h.o;
      model::engine::KdaHead verify = head;
      std::vector<float> kept = state0;
      after[at].assign(dim * dim, std::nanf(""));
      model::engine::kda_recurrent(verify, kept.data(), after[at].data());
      EXPECT_EQ(bits(kept), bits(state0)) << "the state under a verify, dim " << dim;
      EXPECT_EQ(bits(verify.o), bits(h.o)) << "outputs of a verify, dim " << dim;
      EXPECT_EQ(bits(after[at]), bits(state[at])) << "the verify's scratch state, dim " << dim;
      at = 1;  // every vector ISA against the scalar path (index 0)
      if (isa == Isa::kScalar) continue;
      EXPECT_EQ(bits(out[0]), bits(out[1])) << "outputs, dim " << dim << " on " << quant::name(isa);
      EXPECT_EQ(bits(state[0]), bits(state[1]))
          << "state, dim " << dim << " on " << quant::name(isa);
      EXPECT_EQ(bits(after[0]), bits(after[1]))
          << "verify scratch states, dim " << dim << " on " << quant::name(isa);
    }
  }
  quant::set_active_isa(before);
}

TEST(EngineOps, SituRejectsAShortUp) {
  std::vector<float> g(8), u(7);
  EXPECT_THROW(situ_rows(g, u, 4.0f, 25.0f), InternalError);
}

}  // namespace
}  // namespace k3::test
