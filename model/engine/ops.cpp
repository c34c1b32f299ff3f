#include "model/engine/ops.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.h"
#include "model/engine/ops_kernels.h"

namespace k3::model::engine {

const detail::MathKernels& detail::math_kernels(quant::Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(quant::detected_isa())) {
    throw UsageError("engine ops: asked for " + std::string(quant::name(isa)) +
                     " but this CPU supports at most " +
                     std::string(quant::name(quant::detected_isa())));
  }
  const detail::MathKernels& avx512 = detail::avx512_math();
  if (isa >= quant::Isa::kAvx512 && avx512.situ != nullptr) return avx512;
  const detail::MathKernels& avx2 = detail::avx2_math();
  return isa >= quant::Isa::kAvx2 && avx2.situ != nullptr ? avx2 : detail::scalar_math();
}

float situ(float gate, float up, float beta, float beta_lin) {
  detail::scalar_math().situ(&gate, &up, 1, detail::situ_params(beta, beta_lin));
  return gate;
}

void rms_norm(const float* x, std::size_t rows, std::size_t dim, std::span<const float> weight,
              double eps, float* out) {
  const detail::MathKernels& k = detail::math_kernels(quant::active_isa());
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double sq[detail::kSumLanes], unused[detail::kSumLanes];
    k.lane_sums(xr, nullptr, dim, sq, unused);
    const double sum_sq = detail::lane_total(sq);
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / double(dim) + eps));
    float* o = out + r * dim;
    for (std::size_t i = 0; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

void l2_norm(float* x, std::size_t dim, double eps) {
  double sum_sq = 0;
  for (std::size_t i = 0; i < dim; ++i) sum_sq += double(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq + eps));
  for (std::size_t i = 0; i < dim; ++i) x[i] *= inv;
}

void situ_rows(std::span<float> gate, std::span<const float> up, float beta, float beta_lin,
               quant::Isa isa) {
  if (up.size() < gate.size()) {
    throw InternalError("situ_rows: " + std::to_string(gate.size()) + " gate values but " +
                        std::to_string(up.size()) + " up values");
  }
  detail::math_kernels(isa).situ(gate.data(), up.data(), gate.size(),
                                 detail::situ_params(beta, beta_lin));
}
void situ_rows(std::span<float> gate, std::span<const float> up, float beta, float beta_lin) {
  situ_rows(gate, up, beta, beta_lin, quant::active_isa());
}

void sigmoid_rows(std::span<float> x, quant::Isa isa) {
  detail::math_kernels(isa).sigmoid(x.data(), x.size());
}
void silu_rows(std::span<float> x, quant::Isa isa) {
  detail::math_kernels(isa).silu(x.data(), x.size());
}
void tanh_rows(std::span<float> x, quant::Isa isa) {
  detail::math_kernels(isa).tanh(x.data(), x.size());
}
void sigmoid_rows(std::span<float> x) { sigmoid_rows(x, quant::active_isa()); }
void silu_rows(std::span<float> x) { silu_rows(x, quant::active_isa()); }
void tanh_rows(std::span<float> x) { tanh_rows(x, quant::active_isa()); }

void attn_res_mix(std::span<const float* const> sources, std::size_t dim,
                  std::span<const float> score, double eps, float* out) {
  const std::size_t n = sources.size();
  const detail::MathKernels& k = detail::math_kernels(quant::active_isa());
  std::vector<double> s(n);
  for (std::size_t i = 0; i < n; ++i) {
    double sq[detail::kSumLanes], dot[detail::kSumLanes];
    k.lane_sums(sources[i], score.data(), dim, sq, dot);
    s[i] = detail::lane_total(dot) / std::sqrt(detail::lane_total(sq) / double(dim) + eps);
  }
  const double top = *std::max_element(s.begin(), s.end());
  double total = 0;
  for (double& x : s) total += (x = std::exp(x - top));
  std::fill(out, out + dim, 0.0f);
  for (std::size_t i = 0; i < n; ++i)
    k.scaled_add(out, sources[i], static_cast<float>(s[i] / total), dim);
}

void route_top_k(std::span<const float> logits, std::span<const float> bias, int k, float scaling,
                 std::span<Route> out) {
  const std::size_t n = logits.size();
  std::vector<float> s(logits.begin(), logits.end()), biased(n);
  sigmoid_rows(s);
  for (std::size_t e = 0; e < n; ++e) {
    biased[e] = s[e] + bias[e];  // noaux_tc: the bias only selects
  }
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
                    });
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += s[order[i]];
  for (int i = 0; i < k; ++i) {
    out[i] = {order[i], static_cast<float>(s[order[i]] / (sum + 1e-20) * scaling)};
  }
}

}  // namespace k3::model::engine
