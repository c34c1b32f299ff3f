#include "model/synth/values.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

namespace k3::model {

namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t hash_name(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// The well-conditioned synthetic model (docs/ENGINE.md, "The synthetic model"): a unit-RMS
// embedding dominates the residual stream and every residual branch adds a modest update, so
// a relative error e in any op moves the logits by a fraction of e, not a multiple.
constexpr float kLatentOutputGain = 0.1f;  // routed_expert_up_proj reads a unit-RMS norm
constexpr double kGainDepth = 6;           // the tiny preset's depth, where they were measured
// AttnRes scores (a source's RMS-normed value . norm . proj) spread ~0.3 instead of ~1: every
// source keeps a share of the mix, so the exact embedding bank stays a large part of it.
constexpr float kAttnResScoreGain = 0.3f;
// Routing: each token's embedding carries experts_per_token of num_experts orthonormal
// directions with this weight; each MoE router row reads one direction (a seeded permutation
// per layer). The chosen experts' logits then lead the rest by several units, so rounding never
// flips a token's top-k, while which experts a token takes still varies from token to token.
constexpr float kRoutingSignature = 8.0f;
constexpr float kRouterGain = 0.5f;
// The LM head: 1 in kFrequentEvery ordinary tokens has rows kFrequentGain times longer, so the
// next-token distribution is peaked (a clear greedy margin) instead of 4352 similar logits.
constexpr int kFrequentEvery = 64;
constexpr float kFrequentGain = 4.0f;

// Routing direction j in a space of `width`: DCT-II basis vector j + 1 with a seeded sign per
// coordinate, so the directions are exactly orthonormal and have no large coordinates.
float routing_direction(std::uint64_t seed, int j, std::int64_t d, std::int64_t width) {
  const bool flip = splitmix(seed ^ 0x726f7574696e67ull ^ static_cast<std::uint64_t>(d)) & 1;
  const double v =
      std::sqrt(2.0 / static_cast<double>(width)) *
      std::cos(M_PI * (static_cast<double>(d) + 0.5) * (j + 1) / static_cast<double>(width));
  return static_cast<float>(flip ? -v : v);
}

// The experts_per_token distinct routing directions token `token` carries.
std::vector<int> token_directions(std::uint64_t seed, std::int64_t token, const SynthStructure& s) {
  std::vector<int> out;
  std::uint64_t state = splitmix(seed ^ 0x746f6b656e736574ull) + static_cast<std::uint64_t>(token);
  while (static_cast<int>(out.size()) < s.experts_per_token) {
    state = splitmix(state);
    const int j = static_cast<int>(state % static_cast<std::uint64_t>(s.num_experts));
    if (std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  }
  return out;
}

bool routing_fits(const SynthStructure& s, std::int64_t width) {
  return s.num_experts > 0 && s.experts_per_token > 0 && s.experts_per_token <= s.num_experts &&
         s.num_experts < width;
}

}  // namespace

void synth_values(std::uint64_t seed, const std::string& name, const SynthRole& role,
                  std::int64_t fan_in, const SynthStructure& structure, float* out, std::size_t n,
                  std::size_t first_index) {
  const std::uint64_t base = splitmix(seed ^ hash_name(name));
  auto uniform = [&](std::size_t i, int k) {  // in [-1, 1)
    const std::uint64_t r = splitmix(base + 2 * (first_index + i) + static_cast<std::uint64_t>(k));
    return static_cast<float>(static_cast<double>(r >> 11) * 0x1p-53 * 2.0 - 1.0);
  };
  // Roughly normal (sum of two uniforms); this scale gives it variance 1/fan_in, so a product
  // keeps its input's RMS.
  const std::int64_t width = std::max<std::int64_t>(fan_in, 1);
  const float matrix_scale = std::sqrt(1.5f / static_cast<float>(width));
  auto normal = [&](std::size_t i) { return (uniform(i, 0) + uniform(i, 1)) * matrix_scale; };
  auto coordinates = [&](std::size_t i) {
    const std::size_t at = first_index + i;
    return std::pair{static_cast<std::int64_t>(at / static_cast<std::size_t>(width)),
                     static_cast<std::int64_t>(at % static_cast<std::size_t>(width))};
  };
  auto each = [&](auto&& value) {
    oneapi::tbb::parallel_for(std::size_t{0}, n, [&](std::size_t i) { out[i] = value(i); });
  };

  const SynthShape shape = role.shape == SynthShape::kRouter && !routing_fits(structure, width)
                               ? SynthShape::kMatrix
                               : role.shape;
  if (shape == SynthShape::kNormWeight) {
    each([&](std::size_t i) { return 1.0f + 0.1f * uniform(i, 0); });
  } else if (shape == SynthShape::kDecayLog) {
    each([&](std::size_t i) { return std::log(1.0f + 1.5f * (uniform(i, 0) + 1.0f)); });
  } else if (shape == SynthShape::kBias || shape == SynthShape::kRouterBias) {
    each([&](std::size_t i) { return 0.05f * uniform(i, 0); });
  } else if (shape == SynthShape::kConvTaps) {
    each([&](std::size_t i) { return 0.5f * uniform(i, 0); });
  } else if (shape == SynthShape::kEmbedding) {
    // Unit RMS plus the token's routing directions.
    const bool routed = routing_fits(structure, width);
    const float unit = std::sqrt(static_cast<float>(width));
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<std::size_t>(0, n, 4096),
                              [&](const auto& range) {
                                std::int64_t row = -1;
                                std::vector<int> directions;
                                for (std::size_t i = range.begin(); i != range.end(); ++i) {
                                  const auto [r, d] = coordinates(i);
                                  if (routed && r != row)
                                    directions = token_directions(seed, r, structure);
                                  row = r;
                                  float v = normal(i) * unit;
                                  for (int j : directions)
                                    v += kRoutingSignature * routing_direction(seed, j, d, width);
                                  out[i] = v;
                                }
                              });
  } else if (shape == SynthShape::kRouter) {
    // Row e reads direction of_expert[e]: a seeded permutation per layer (the name).
    std::vector<int> of_expert(static_cast<std::size_t>(structure.num_experts));
    for (int e = 0; e < structure.num_experts; ++e) of_expert[static_cast<std::size_t>(e)] = e;
    std::uint64_t state = base;
    for (std::size_t e = of_expert.size(); e > 1; --e) {
      state = splitmix(state);
      std::swap(of_expert[e - 1], of_expert[state % e]);
    }
    each([&](std::size_t i) {
      const auto [e, d] = coordinates(i);
      return kRouterGain *
             routing_direction(seed, of_expert[static_cast<std::size_t>(e)], d, width);
    });
  } else if (shape == SynthShape::kLmHead) {
    each([&](std::size_t i) {
      const auto [token, d] = coordinates(i);
      const bool frequent =
          token < structure.ordinary_tokens &&
          splitmix(seed ^ 0x6672657175656e74ull ^ static_cast<std::uint64_t>(token)) %
                  kFrequentEvery ==
              0;
      return normal(i) * (frequent ? kFrequentGain : 1.0f);
    });
  } else {
    each([&](std::size_t i) { return normal(i) * role.gain; });
  }
}

namespace synth {

// Each parameter's synthetic role, by its field in the definition: a vector is a norm weight and
// a matrix a plain matrix unless its place says otherwise. An AttnRes score's role is its stored
// projection's (its stored norm weight is a kNormWeight); the KDA decay's is its stored A_log's.
ModelWeights<SynthRole> synth_roles(const ModelWeights<ParamSpec>& definition) {
  ModelWeights<SynthRole> r = map_weights(definition, [](const ParamSpec& s) {
    switch (s.family) {
      case ParamFamily::kVector:
        return SynthRole{SynthShape::kNormWeight};
      case ParamFamily::kAttnResScore:
        return SynthRole{SynthShape::kMatrix, kAttnResScoreGain};
      case ParamFamily::kKdaDecay:
        return SynthRole{SynthShape::kDecayLog, 1.0f, true};
      default:
        return SynthRole{};
    }
  });
  r.embed_tokens.shape = SynthShape::kEmbedding;
  r.lm_head.shape = SynthShape::kLmHead;
  // The branch gains hold the residual stream's total update at the depth they were set for;
  // deeper, each branch shrinks by sqrt(kGainDepth / layers) (GPT-2's 1/sqrt(N) residual
  // scaling), so a 24- or 48-layer model is as well-conditioned as the 6-layer one.
  const auto layers = static_cast<double>(r.layers.size());
  const float depth =
      layers > kGainDepth ? static_cast<float>(std::sqrt(kGainDepth / layers)) : 1.0f;
  const float attention_gain = kAttentionOutputGain * depth, mlp_gain = kMlpOutputGain * depth;
  const float latent_gain = kLatentOutputGain * depth;
  const SynthRole bias{SynthShape::kBias, 1.0f, true};
  const SynthRole conv{SynthShape::kConvTaps, 1.0f, true};
  for (LayerWeights<SynthRole>& layer : r.layers) {
    if (layer.mla) layer.mla->o_proj.gain = attention_gain;
    if (layer.kda) {
      KdaWeights<SynthRole>& k = *layer.kda;
      k.o_proj.gain = attention_gain;
      k.q_conv1d = k.k_conv1d = k.v_conv1d = conv;
      k.dt_bias = bias;
      k.o_norm.stored_f32 = true;
    }
    if (layer.mlp) layer.mlp->down_proj.gain = mlp_gain;
    if (layer.moe) {
      MoeWeights<SynthRole>& m = *layer.moe;
      m.gate.shape = SynthShape::kRouter;
      m.e_score_correction_bias = {SynthShape::kRouterBias, 1.0f, true};
      m.routed_expert_up_proj.gain = latent_gain;
      if (m.shared_experts) m.shared_experts->down_proj.gain = mlp_gain;
    }
  }
  return r;
}

// What the well-conditioned weights of `config`'s synthetic model need to know of its structure.
SynthStructure structure_of(const ModelConfig& config) {
  SynthStructure structure;
  structure.num_experts = config.num_experts;
  structure.experts_per_token = config.num_experts_per_token;
  structure.ordinary_tokens = static_cast<int>(config.base_vocab_size());
  return structure;
}

// A seeded partial Fisher-Yates shuffle picks the favoured experts.
void fix_routing(std::uint64_t seed, const std::string& logical, const SynthStructure& structure,
                 double margin, std::vector<float>& bias) {
  std::vector<std::size_t> order(bias.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::uint64_t state = splitmix(seed ^ hash_name(logical + "/routing"));
  const std::size_t k = std::min<std::size_t>(structure.experts_per_token, order.size());
  for (std::size_t i = 0; i < k; ++i) {
    state = splitmix(state);
    std::swap(order[i], order[i + state % (order.size() - i)]);
    bias[order[i]] += static_cast<float>(margin);
  }
}

}  // namespace synth

}  // namespace k3::model
