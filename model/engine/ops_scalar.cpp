// Portable element-wise kernels: the fallback without AVX2 and the model the vector kernels must
// match bit for bit (ops_kernels.h). Every step mirrors one instruction of ops_simd.inc.
#include <bit>
#include <cmath>

#include "model/engine/ops_kernels.h"

namespace k3::model::engine::detail {
namespace {

// _mm256_max_pd(lo, x) then _mm256_min_pd(hi, .): a NaN x passes through, as in the vector code.
double clamp(double x, double lo, double hi) {
  const double y = lo > x ? lo : x;
  return hi < y ? hi : y;
}

double expm1_clamped(double x, double limit) {
  x = clamp(x, -limit, limit);
  const double t = std::fma(x, kLog2e, kShifter);
  const double n = t - kShifter;
  double r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  double p = kExpC[7];
  for (int i = 6; i >= 0; --i) p = std::fma(p, r, kExpC[i]);
  const double q = std::fma(r * r, p, r);
  const double s = std::bit_cast<double>((std::bit_cast<std::uint64_t>(t) + kExpBias) << 52);
  const double e = std::fma(s, q, s - 1.0);
  return std::bit_cast<double>(std::bit_cast<std::uint64_t>(e) |
                               (std::bit_cast<std::uint64_t>(x) & kSignBit));
}

void situ(float* gate, const float* up, std::size_t n, const SituParams& p) {
  for (std::size_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i];
    const double eg = expm1_clamped(g * p.g_scale, kTanhLimit);
    const double es = expm1_clamped(-g, kExpLimit);
    const double eu = expm1_clamped(u * p.u_scale, kTanhLimit);
    // beta tanh(g/beta) = beta eg / (eg + 2), sigmoid(g) = 1 / (es + 2), the same for u.
    const double num = (p.scale * eg) * eu;
    const double den = ((eg + 2.0) * (eu + 2.0)) * (es + 2.0);
    gate[i] = static_cast<float>(num / den);
  }
}

void sigmoid(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double e = expm1_clamped(-double(x[i]), kExpLimit);
    x[i] = static_cast<float>(1.0 / (e + 2.0));
  }
}

void silu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double e = expm1_clamped(-v, kExpLimit);
    x[i] = static_cast<float>(v / (e + 2.0));
  }
}

void tanh(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double e = expm1_clamped(2.0 * double(x[i]), kTanhLimit);
    x[i] = static_cast<float>(e / (e + 2.0));
  }
}

void lane_sums(const float* x, const float* w, std::size_t n, double* sq, double* dot) {
  for (std::size_t l = 0; l < kSumLanes; ++l) sq[l] = dot[l] = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    sq[i % kSumLanes] += v * v;
    if (w != nullptr) dot[i % kSumLanes] += v * double(w[i]);
  }
}

void scaled_add(float* out, const float* x, float alpha, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] += alpha * x[i];
}

void kda_token(const float* S_in, float* S, std::size_t ld, std::size_t K, std::size_t V,
               const float* alpha, const float* k, const float* q, const float* v, float beta,
               float* u, float* o) {
  for (std::size_t j = 0; j < V; ++j) u[j] = 0.0f;
  for (std::size_t i = 0; i < K; ++i) {
    const float* in = S_in + i * ld;
    float* row = S + i * ld;
    for (std::size_t j = 0; j < V; ++j) {
      row[j] = in[j] * alpha[i];
      u[j] += row[j] * k[i];
    }
  }
  for (std::size_t j = 0; j < V; ++j) u[j] = beta * (v[j] - u[j]);
  for (std::size_t j = 0; j < V; ++j) o[j] = 0.0f;
  for (std::size_t i = 0; i < K; ++i) {
    float* row = S + i * ld;
    for (std::size_t j = 0; j < V; ++j) {
      row[j] += k[i] * u[j];
      o[j] += row[j] * q[i];
    }
  }
}

}  // namespace

const MathKernels& scalar_math() {
  static const MathKernels table{situ, sigmoid, silu, tanh, lane_sums, scaled_add, kda_token};
  return table;
}

}  // namespace k3::model::engine::detail
