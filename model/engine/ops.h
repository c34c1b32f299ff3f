// Element-wise and per-row float math of the Kimi-K3 forward pass (../shared/reference/kimi-k3.md
// section 2): norms, gates, SiTU, the AttnRes softmax mix and the router's top-k. Weight products
// are not here: they go through quant/ kernels (model/engine/linear.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace k3::model::engine {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x * sigmoid(x); }

// SiTU-GLU (section 2.2): beta tanh(g/beta) sigmoid(g) * beta_lin tanh(u/beta_lin).
inline float situ(float gate, float up, float beta, float beta_lin) {
  return beta * std::tanh(gate / beta) * sigmoid(gate) * (beta_lin * std::tanh(up / beta_lin));
}

// out[r] = weight * x[r] * rsqrt(mean(x[r]^2) + eps) for `rows` rows of `dim`; out may alias x.
// The mean is accumulated in double so the norm does not depend on the row's magnitude.
void rms_norm(const float* x, std::size_t rows, std::size_t dim, std::span<const float> weight,
              double eps, float* out);
// x * rsqrt(sum(x^2) + eps), in place, one vector.
void l2_norm(float* x, std::size_t dim, double eps);

// y[i] = situ(gate[i], up[i]) for an [n, width] pair of projections, into `gate`.
void situ_rows(std::span<float> gate, std::span<const float> up, float beta, float beta_lin);

// AttnRes (section 2.0): logits s_i = rms-normalised source i dotted with `score`, softmax over
// the sources, result = sum_i alpha_i source_i over the RAW sources. `sources` holds one pointer
// per source to its row of `dim` floats.
void attn_res_mix(std::span<const float* const> sources, std::size_t dim,
                  std::span<const float> score, double eps, float* out);

// LatentMoE router (section 2.5): sigmoid scores, the top `k` of score + bias (the lower expert
// index wins a tie), weights = unbiased scores of the chosen / (sum + 1e-20) * scaling.
struct Route {
  std::int32_t expert = 0;
  float weight = 0;
};
void route_top_k(std::span<const float> logits, std::span<const float> bias, int k, float scaling,
                 std::span<Route> out);

}  // namespace k3::model::engine
