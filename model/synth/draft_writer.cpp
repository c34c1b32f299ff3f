// The draft format's synthetic writer: the DSpark drafter of the preset's target (docs/FORMATS.md,
// "The DSpark draft"), BF16 safetensors with the drafter's own names and config.json, no
// tokenizer (a draft uses its target's).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/synth/values.h"
#include "model/synth/writer.h"

namespace k3::model::synth {

namespace {

// The synthetic DSpark drafter (docs/FORMATS.md, "The DSpark draft") is derived from its
// target's synthetic weights, so that it drafts what the target would say: its Markov head holds
// the target's logits for a stream equal to the previous token's embedding (the synthetic target
// is close to such a bigram model), its (untrained, seeded) body adds a small correction through
// the target's LM head, and fc averages the tapped streams.
enum class DraftValues {
  kSeeded,           // synth_values under the drafter's own name (SynthRole)
  kOnes,             // norms: identity
  kTapAverage,       // fc: [I/taps, ..., I/taps]
  kFinalNorm,        // norm: kDraftBodyScale x the target's final norm weight
  kMarkovEmbedding,  // markov_w1[x]: the first rank coordinates of RMSNorm(E[x])
  kMarkovOutput,     // markov_w2[v]: the first rank coordinates of lm_head[v] x final norm
};
struct DraftRole {
  DraftValues values = DraftValues::kSeeded;
  SynthRole role;
};

// The body's logits enter at 1/16 of the Markov head's scale: its layers are seeded, not trained,
// so at a larger share they pull the drafts away from the target (accept length on the
// quickstart, docs/FORMATS.md: 1.99 at 0, 2.25 at 1/32 and 1/16, 1.96 at 1/4, 1.58 at 1).
constexpr float kDraftBodyScale = 0.0625f;

DSparkWeights<DraftRole> draft_roles(const DSparkWeights<ParamSpec>& definition) {
  DSparkWeights<DraftRole> r = map_weights(definition, [](const ParamSpec& s) {
    return s.family == ParamFamily::kVector ? DraftRole{DraftValues::kOnes, {}} : DraftRole{};
  });
  r.fc.values = DraftValues::kTapAverage;
  r.norm.values = DraftValues::kFinalNorm;
  r.markov_w1.values = DraftValues::kMarkovEmbedding;
  r.markov_w2.values = DraftValues::kMarkovOutput;
  if (r.confidence_bias) r.confidence_bias->values = DraftValues::kSeeded;
  for (DSparkLayerWeights<DraftRole>& layer : r.layers) {
    layer.o_proj.role.gain = kAttentionOutputGain;
    layer.mlp.down_proj.role.gain = kMlpOutputGain;
  }
  return r;
}

// The target tensors a synthetic drafter is derived from: their logical names and synthetic
// roles, as synthesize_checkpoint writes them for the target.
struct DraftSource {
  std::uint64_t seed = 0;
  SynthStructure structure;
  std::int64_t hidden = 0;
  double eps = 0;
  std::string embedding, lm_head, norm;
  SynthRole embedding_role, lm_head_role, norm_role;

  // Rows [first, first + count) of the target matrix `name` ([rows, hidden]).
  std::vector<float> rows(const std::string& name, const SynthRole& role, std::int64_t first,
                          std::int64_t count) const {
    std::vector<float> v(static_cast<std::size_t>(count * hidden));
    synth_values(seed, name, role, hidden, structure, v.data(), v.size(),
                 static_cast<std::size_t>(first * hidden));
    return v;
  }
  std::vector<float> final_norm() const { return rows(norm, norm_role, 0, 1); }
};

DraftSource draft_source(const SynthOptions& o, const ModelConfig& target) {
  dist::LayoutSpec one;
  const ModelWeights<ParamSpec> definition = kimi_k3_definition(target, dist::Layout::make(one));
  const ModelWeights<SynthRole> roles = synth_roles(definition);
  DraftSource s;
  s.seed = o.seed;
  s.structure = structure_of(target);
  s.hidden = target.hidden_size;
  s.eps = target.rms_norm_eps;
  s.embedding = definition.embed_tokens.name;
  s.lm_head = definition.lm_head.name;
  s.norm = definition.norm.name;
  s.embedding_role = roles.embed_tokens;
  s.lm_head_role = roles.lm_head;
  s.norm_role = roles.norm;
  return s;
}

// The values of one drafter tensor (empty when header-only).
std::vector<float> draft_values(const Collector& c, const DraftSource& target, const ParamSpec& s,
                                const DraftRole& r) {
  if (c.header_only()) return {};
  if (r.values == DraftValues::kSeeded) return c.values(s.name, r.role, s.shape);
  std::vector<float> v(static_cast<std::size_t>(numel(s.shape)), 0.0f);
  const std::int64_t H = target.hidden;
  switch (r.values) {
    case DraftValues::kSeeded:
      break;
    case DraftValues::kOnes:
      std::fill(v.begin(), v.end(), 1.0f);
      break;
    case DraftValues::kTapAverage: {
      const std::int64_t width = s.shape[1], taps = width / H;
      for (std::int64_t i = 0; i < H; ++i)
        for (std::int64_t t = 0; t < taps; ++t)
          v[static_cast<std::size_t>(i * width + t * H + i)] = 1.0f / static_cast<float>(taps);
      break;
    }
    case DraftValues::kFinalNorm: {
      const std::vector<float> g = target.final_norm();
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = kDraftBodyScale * g[i];
      break;
    }
    case DraftValues::kMarkovEmbedding:
    case DraftValues::kMarkovOutput: {
      const bool embedding = r.values == DraftValues::kMarkovEmbedding;
      const std::vector<float> g = embedding ? std::vector<float>() : target.final_norm();
      const std::int64_t vocab = s.shape[0], rank = s.shape[1];
      constexpr std::int64_t kRowsPerChunk = 1024;  // bounds the target rows held at once
      for (std::int64_t first = 0; first < vocab; first += kRowsPerChunk) {
        const std::int64_t count = std::min(kRowsPerChunk, vocab - first);
        const std::vector<float> rows =
            embedding ? target.rows(target.embedding, target.embedding_role, first, count)
                      : target.rows(target.lm_head, target.lm_head_role, first, count);
        for (std::int64_t row = 0; row < count; ++row) {
          const float* in = rows.data() + row * H;
          float* out = v.data() + (first + row) * rank;
          if (embedding) {
            double squares = 0;
            for (std::int64_t d = 0; d < H; ++d) squares += double(in[d]) * in[d];
            const auto inv_rms =
                static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(H) + target.eps));
            for (std::int64_t d = 0; d < rank; ++d) out[d] = in[d] * inv_rms;
          } else {
            for (std::int64_t d = 0; d < rank; ++d) out[d] = in[d] * g[static_cast<std::size_t>(d)];
          }
        }
      }
      break;
    }
  }
  return v;
}

// k3ckpt synth --format draft: the preset's drafter, derived from `target` (the preset's target
// with its --set changes) under the same seed; BF16 safetensors and config.json, no tokenizer.
SynthSummary synthesize_draft(const SynthOptions& o, const ModelConfig& target) {
  const ModelConfig cfg = draft_preset_config(o.preset, target);
  const DSparkConfig& d = *cfg.dspark;
  for (int l : d.target_layer_ids) {
    if (l >= target.num_hidden_layers) {
      throw UsageError("k3ckpt synth --format draft: the " + o.preset +
                       " draft taps target layer " + std::to_string(l) + ", but the target has " +
                       std::to_string(target.num_hidden_layers) + " layers");
    }
  }
  if (d.markov_rank > cfg.hidden_size) {
    throw UsageError("k3ckpt synth --format draft: Markov rank " + std::to_string(d.markov_rank) +
                     " exceeds the hidden size " + std::to_string(cfg.hidden_size) +
                     " its rows are cut from");
  }
  dist::LayoutSpec one;
  const DSparkWeights<ParamSpec> definition = dspark_definition(cfg, dist::Layout::make(one));
  const DSparkWeights<DraftRole> roles = draft_roles(definition);
  const DraftSource source = draft_source(o, target);
  std::filesystem::create_directories(o.out);
  const MutationEffect mutation =
      o.mutant ? MutationEffect(*o.mutant, cfg, FormatKind::kDraft) : MutationEffect{};
  ModelConfig written = cfg;
  mutation.on_config(written);
  if (mutation.active() && !mutation.applied())
    throw InternalError("mutant '" + o.mutant->name + "' changed nothing of the draft");
  Collector c(o, source.structure);
  auto emit = [&](const ParamSpec& s, const DraftRole& r) {
    c.dense(s.name, DType::kBF16, s.shape, draft_values(c, source, s, r));
  };
  DSparkWeights<ParamSpec>::fields(emit, definition, roles);
  const SynthSummary summary = write_safetensors(o, c.tensors());
  std::ofstream(o.out / "config.json") << to_config_json(written).dump(2) << "\n";
  return summary;
}

class DraftWriter final : public SynthWriter {
 public:
  SynthSummary write(const SynthOptions& o, const ModelConfig& target) const override {
    return synthesize_draft(o, target);
  }
};

}  // namespace

const SynthWriter& draft_writer() {
  static const DraftWriter writer;
  return writer;
}

}  // namespace k3::model::synth
