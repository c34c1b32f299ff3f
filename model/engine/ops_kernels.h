// Internal: the per-ISA element-wise kernels behind situ_rows, sigmoid_rows, silu_rows and
// tanh_rows (ops.h). Not part of the public API.
//
// Every kernel widens to double and takes all its transcendentals from one expm1, so a float
// result is the correctly rounded double value up to ~1e-11 relative (float libm-style code
// accumulates several ulp over SiTU's three transcendentals and five roundings). The scalar,
// AVX2 and AVX-512 versions execute the same IEEE operations in the same order (FMA where the
// scalar code uses std::fma, the same clamps, the same constants below), so one element gives
// the same bits on every path and wherever it sits in the array: the vector kernels
// (ops_simd.inc) run a short tail through the same vector code on a padded copy. Their files are
// compiled with -ffp-contract=off to keep it so.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/isa.h"

namespace k3::model::engine::detail {

// expm1(x) = 2^n (1 + q(r)) - 1 with x = n ln2 + r, |r| <= ln2/2: n from the 1.5 * 2^52
// rounding trick, r by Cody-Waite with fdlibm's two-part ln2 (ln2_hi has 32 significant bits, so
// n * ln2_hi is exact), q(r) = r + r^2 (1/2 + r/6 + ... + r^7/9!) (Taylor: truncation below
// 2e-11 relative), then 2^n from n's bits and 2^n q + (2^n - 1) in one FMA. The sign of x is
// OR-ed into the result so that expm1(-0) = -0 (tanh and SiTU keep the sign of a zero).
inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
inline constexpr double kLn2Hi = 6.93147180369123816490e-01;
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;
inline constexpr double kExpC[8] = {1.0 / 2,   1.0 / 6,    1.0 / 24,    1.0 / 120,
                                    1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880};
inline constexpr std::uint64_t kExpBias = 1023;
inline constexpr std::uint64_t kSignBit = 0x8000000000000000ull;

// Clamps of the expm1 argument. 708 keeps 2^n normal (|n| <= 1021) and is far enough for the
// sigmoid: beyond it every SiTU/sigmoid/SiLU result is below float's smallest denormal.
// tanh(20) = 1 - 8.5e-18 rounds to 1 even in double.
inline constexpr double kExpLimit = 708.0;
inline constexpr double kTanhLimit = 40.0;  // on 2x

// SiTU's constants, widened once per call: g * g_scale = 2 g / beta (exact up to the product's
// rounding in double), and scale = beta * beta_lin (exact in double).
struct SituParams {
  double g_scale = 0;
  double u_scale = 0;
  double scale = 0;
};
inline SituParams situ_params(float beta, float beta_lin) {
  return {2.0 / double(beta), 2.0 / double(beta_lin), double(beta) * double(beta_lin)};
}

// Double sums of a float row in eight lanes: element i goes into lane i mod 8 (converted to
// double, multiplied, then added: no FMA), sq[l] = sum x^2 and, when w is not null, dot[l] =
// sum x w. The lanes are independent chains (a vector's lanes on AVX2 and AVX-512), where one
// sequential double sum per row was latency-bound; lane_total adds them in one fixed order, so
// every ISA gives the same bits.
inline constexpr std::size_t kSumLanes = 8;
inline double lane_total(const double* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// gate[i] = situ(gate[i], up[i]) for i < n; x[i] = f(x[i]) in place for the others.
struct MathKernels {
  void (*situ)(float* gate, const float* up, std::size_t n, const SituParams& p) = nullptr;
  void (*sigmoid)(float* x, std::size_t n) = nullptr;
  void (*silu)(float* x, std::size_t n) = nullptr;
  void (*tanh)(float* x, std::size_t n) = nullptr;
  void (*lane_sums)(const float* x, const float* w, std::size_t n, double* sq,
                    double* dot) = nullptr;
  // out[i] += alpha * x[i] for i < n: multiply, then add (no FMA).
  void (*scaled_add)(float* out, const float* x, float alpha, std::size_t n) = nullptr;
  // One token of the KDA delta rule from S_in to S (each [K][V], rows ld floats apart; S_in may
  // be S; kda.cpp), alpha[i] = exp(g[i]) given: S = diag(alpha) S_in; u = beta (v - S^T k);
  // S += k u^T; o = S^T q. Multiplies and adds kept apart (no FMA) and each element's operations
  // in the same order on every path.
  void (*kda_token)(const float* S_in, float* S, std::size_t ld, std::size_t K, std::size_t V,
                    const float* alpha, const float* k, const float* q, const float* v, float beta,
                    float* u, float* o) = nullptr;
};

const MathKernels& scalar_math();
// Null entries when this build has no AVX2 code (not x86-64).
const MathKernels& avx2_math();
// Null entries when this build has no AVX-512 code (not x86-64).
const MathKernels& avx512_math();
// The kernels for `isa`: the AVX-512 ones from kAvx512 up and the AVX2 ones from kAvx2 up where
// this build has them, else the scalar ones. A UsageError when the CPU does not have `isa`.
const MathKernels& math_kernels(quant::Isa isa);

}  // namespace k3::model::engine::detail
