// Element-wise and per-row float math of the Kimi-K3 forward pass (the official modeling_kimi_linear.py of moonshotai/Kimi-K3; docs/ENGINE.md,
// "The math, piece by piece"): norms, gates, SiTU, the AttnRes softmax mix and the router's top-k. Weight products
// are not here: they go through quant/ kernels (model/engine/linear.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "quant/isa.h"

namespace k3::model::engine {

// SiTU-GLU (section 2.2): beta tanh(g/beta) sigmoid(g) * beta_lin tanh(u/beta_lin), the same bits
// as situ_rows. No special case for beta_lin: a negative one acts as |beta_lin| (tanh is odd) and
// 0 gives 0 (NaN for u = 0), as the formula says.
float situ(float gate, float up, float beta, float beta_lin);

// out[r] = weight * x[r] * rsqrt(mean(x[r]^2) + eps) for `rows` rows of `dim`; out may alias x.
// The mean is accumulated in double so the norm does not depend on the row's magnitude.
void rms_norm(const float* x, std::size_t rows, std::size_t dim, std::span<const float> weight,
              double eps, float* out);
// x * rsqrt(sum(x^2) + eps), in place, one vector.
void l2_norm(float* x, std::size_t dim, double eps);

// Element-wise over whole arrays, vectorized. Computed in double from one expm1 polynomial
// (error a few 1e-11), so each float result is the exact value correctly rounded unless that lies
// within the error of a halfway point: within 6e-8 relative (half an ulp), or half a denormal's
// spacing below FLT_MIN. No NaN from finite inputs, and inf only where the exact SiTU overflows
// float (betas near FLT_MAX). One element gives the same bits wherever it sits in the array,
// whatever the array's length and whichever ISA runs it (AVX2, AVX-512 or the portable code), so
// batch composition cannot change tokens.
//
// gate[i] = situ(gate[i], up[i]) for an [n, width] pair of projections; up.size() >= gate.size().
void situ_rows(std::span<float> gate, std::span<const float> up, float beta, float beta_lin);
// In place: x = sigmoid(x), x = silu(x) = x sigmoid(x), x = tanh(x).
void sigmoid_rows(std::span<float> x);
void silu_rows(std::span<float> x);
void tanh_rows(std::span<float> x);
// The same on an explicit ISA (quant::active_isa() above; the results are identical): tests
// compare the paths. UsageError if this CPU lacks `isa`.
void situ_rows(std::span<float> gate, std::span<const float> up, float beta, float beta_lin,
               quant::Isa isa);
void sigmoid_rows(std::span<float> x, quant::Isa isa);
void silu_rows(std::span<float> x, quant::Isa isa);
void tanh_rows(std::span<float> x, quant::Isa isa);

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
