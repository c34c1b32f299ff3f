// The shared part of every synthetic writer that decides values: the seeded hash, each
// parameter's role in the well-conditioned model (docs/ENGINE.md, "The synthetic model") and the
// routing margin. synth_values itself is public (synth.h): the tests regenerate weights with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kimi_k3.h"
#include "model/parameters.h"
#include "model/synth/synth.h"

namespace k3::model::synth {

// The residual branches' output gains at the tiny preset's depth: o_proj and down_proj. The
// DSpark draft's layers take the same ones.
inline constexpr float kAttentionOutputGain = 0.3f;  // o_proj: attention adds ~15 % of the stream
inline constexpr float kMlpOutputGain = 0.25f;       // dense and shared-expert down_proj

// Each parameter's synthetic role, by its field in the definition (never by its name).
ModelWeights<SynthRole> synth_roles(const ModelWeights<ParamSpec>& definition);

// What the well-conditioned weights of `config`'s synthetic model need to know of its structure.
SynthStructure structure_of(const ModelConfig& config);

// SynthOptions::router_margin: adds `margin` to the bias of experts_per_token experts of the
// router bias `logical`, chosen from the seed.
void fix_routing(std::uint64_t seed, const std::string& logical, const SynthStructure& structure,
                 double margin, std::vector<float>& bias);

}  // namespace k3::model::synth
