#include "model/synth/synth.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json.h"
#include "model/checkpoint/gguf.h"
#include "model/checkpoint/gguf_names.h"
#include "model/parameters.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/stored_names.h"
#include "model/tokenizer/bpe_trainer.h"
#include "model/tokenizer/gguf_vocab.h"
#include "quant/fp.h"
#include "quant/quantize.h"

namespace k3::model {

namespace fs = std::filesystem;
using nlohmann::json;

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

}  // namespace

namespace {

// The well-conditioned synthetic model (docs/ENGINE.md, "The synthetic model"): a unit-RMS
// embedding dominates the residual stream and every residual branch adds a modest update, so
// a relative error e in any op moves the logits by a fraction of e, not a multiple.
constexpr float kAttentionOutputGain = 0.3f;  // o_proj: attention adds ~15 % of the stream
constexpr float kMlpOutputGain = 0.25f;       // dense and shared-expert down_proj
constexpr float kLatentOutputGain = 0.1f;     // routed_expert_up_proj reads a unit-RMS norm
constexpr double kGainDepth = 6;              // the tiny preset's depth, where they were measured
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
  const double v = std::sqrt(2.0 / static_cast<double>(width)) *
                   std::cos(M_PI * (static_cast<double>(d) + 0.5) * (j + 1) /
                            static_cast<double>(width));
  return static_cast<float>(flip ? -v : v);
}

// The experts_per_token distinct routing directions token `token` carries.
std::vector<int> token_directions(std::uint64_t seed, std::int64_t token,
                                  const SynthStructure& s) {
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
  return s.num_experts > 0 && s.experts_per_token > 0 &&
         s.experts_per_token <= s.num_experts && s.num_experts < width;
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
    oneapi::tbb::parallel_for(
        oneapi::tbb::blocked_range<std::size_t>(0, n, 4096), [&](const auto& range) {
          std::int64_t row = -1;
          std::vector<int> directions;
          for (std::size_t i = range.begin(); i != range.end(); ++i) {
            const auto [r, d] = coordinates(i);
            if (routed && r != row) directions = token_directions(seed, r, structure);
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
      return kRouterGain * routing_direction(seed, of_expert[static_cast<std::size_t>(e)], d, width);
    });
  } else if (shape == SynthShape::kLmHead) {
    each([&](std::size_t i) {
      const auto [token, d] = coordinates(i);
      const bool frequent =
          token < structure.ordinary_tokens &&
          splitmix(seed ^ 0x6672657175656e74ull ^ static_cast<std::uint64_t>(token)) %
                  kFrequentEvery == 0;
      return normal(i) * (frequent ? kFrequentGain : 1.0f);
    });
  } else {
    each([&](std::size_t i) { return normal(i) * role.gain; });
  }
}

namespace {

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

}  // namespace

namespace {

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;  // empty when header-only
};

std::vector<std::uint8_t> as_bytes_f32(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());  // header-only: no values
  return out;
}

std::vector<std::uint8_t> as_bytes_bf16(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t b = quant::f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

std::int64_t numel(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Collects the tensors of one checkpoint, then writes them into shards.
class Collector {
 public:
  Collector(const SynthOptions& o, const SynthStructure& structure)
      : o_(o), structure_(structure) {}

  std::vector<float> values(const std::string& logical, const SynthRole& role,
                            const std::vector<std::int64_t>& shape, std::size_t first = 0,
                            std::int64_t count = -1) const {
    if (o_.header_only) return {};  // shapes only: no values at all (the full preset is terabytes)
    std::vector<float> v(count < 0 ? static_cast<std::size_t>(numel(shape))
                                   : static_cast<std::size_t>(count));
    synth_values(o_.seed, logical, role, shape.back(), structure_, v.data(), v.size(), first);
    if (o_.router_margin > 0 && role.shape == SynthShape::kRouterBias && first == 0 &&
        v.size() == static_cast<std::size_t>(numel(shape)))
      fix_routing(logical, v);
    return v;
  }

  // SynthOptions::router_margin: a seeded partial Fisher-Yates shuffle picks the favoured experts.
  void fix_routing(const std::string& logical, std::vector<float>& bias) const {
    std::vector<std::size_t> order(bias.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::uint64_t state = splitmix(o_.seed ^ hash_name(logical + "/routing"));
    const std::size_t k = std::min<std::size_t>(structure_.experts_per_token, order.size());
    for (std::size_t i = 0; i < k; ++i) {
      state = splitmix(state);
      std::swap(order[i], order[i + state % (order.size() - i)]);
      bias[order[i]] += static_cast<float>(o_.router_margin);
    }
  }

  void dense(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
             const std::vector<float>& v) {
    Tensor t{name, dtype, shape, {}};
    if (!o_.header_only) {
      if (dtype == DType::kF32)
        t.data = as_bytes_f32(v);
      else if (dtype == DType::kBF16)
        t.data = as_bytes_bf16(v);
      else
        t.data = quantized(*quant_type_of(dtype), v, shape).data;
    }
    tensors.push_back(std::move(t));
  }

  quant::QuantizedMatrix quantized(quant::Type type, const std::vector<float>& v,
                                   const std::vector<std::int64_t>& shape) const {
    const auto cols = static_cast<std::size_t>(shape.back());
    return quant::quantize(type, v, v.size() / cols, cols);
  }

  void raw(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
           std::vector<std::uint8_t> data) {
    tensors.push_back(
        {name, dtype, shape, o_.header_only ? std::vector<std::uint8_t>{} : std::move(data)});
  }

  const SynthOptions& o_;
  SynthStructure structure_;
  std::vector<Tensor> tensors;
};

// Shard assignment: consecutive tensors, balanced by bytes, no shard left empty (so
// --shards 351 really writes 351 files when there are enough tensors).
std::vector<int> assign_shards(const std::vector<Tensor>& tensors, int shards) {
  long double total = 0;
  for (const auto& t : tensors) total += static_cast<long double>(*tensor_bytes(t.dtype, t.shape));
  const int n = static_cast<int>(tensors.size());
  std::vector<int> out(n, 0);
  long double acc = 0;
  int prev = 0;
  for (int i = 0; i < n; ++i) {
    const auto b = static_cast<long double>(*tensor_bytes(tensors[i].dtype, tensors[i].shape));
    int s = total > 0 ? static_cast<int>((acc + b / 2) / total * shards) : 0;
    s = std::clamp(s, prev, std::min(prev + 1, shards - 1));
    s = std::max(s, shards - (n - i));  // leave enough tensors for the remaining shards
    if (i == 0) s = 0;
    out[i] = s;
    prev = s;
    acc += b;
  }
  return out;
}

// Writes `tensors` into o.shards safetensors shards and their index.
SynthSummary write_safetensors(const SynthOptions& o, const std::vector<Tensor>& tensors) {
  SynthSummary summary;
  const auto shard_of = assign_shards(tensors, o.shards);
  for (const auto& t : tensors) summary.bytes += *tensor_bytes(t.dtype, t.shape);
  summary.tensors = tensors.size();
  std::vector<SafetensorsWriter> writers(o.shards);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto& t = tensors[i];
    if (o.header_only)
      writers[shard_of[i]].add_header_only(t.name, t.dtype, t.shape);
    else
      writers[shard_of[i]].add(t.name, t.dtype, t.shape, t.data);
  }
  json weight_map = json::object();
  for (int s = 0; s < o.shards; ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, o.shards);
    writers[s].set_metadata("format", "pt");
    writers[s].write(o.out / file);
    ++summary.files;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (shard_of[i] == s) weight_map[tensors[i].name] = file;
    }
  }
  std::ofstream(o.out / "model.safetensors.index.json")
      << json{{"metadata", {{"total_size", summary.bytes}}}, {"weight_map", weight_map}}.dump(1)
      << "\n";
  return summary;
}

// What the well-conditioned weights of `config`'s synthetic model need to know of its structure.
SynthStructure structure_of(const ModelConfig& config) {
  SynthStructure structure;
  structure.num_experts = config.num_experts;
  structure.experts_per_token = config.num_experts_per_token;
  structure.ordinary_tokens = static_cast<int>(config.base_vocab_size());
  return structure;
}

}  // namespace

std::vector<std::string> read_jsonl_corpus(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read corpus " + path.string());
  std::vector<std::string> texts;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(n);
    const json j = parse_json(line, {where, "expected a JSON object", true});
    if (!j.is_object()) throw InputError(where + ": expected a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (value.is_string()) texts.push_back(value.get<std::string>());
    }
  }
  if (texts.empty()) throw InputError("corpus " + path.string() + " holds no text");
  return texts;
}

namespace {

// llama.cpp's kimi-k3 metadata (its conversion/kimi_k3.py writes these keys, src/models/kimi-k3.cpp
// reads them).
void write_gguf_metadata(GgufWriter& w, const ModelConfig& c, const std::string& preset,
                         const GgufTokenizer& tok) {
  auto k = [](const char* key) { return std::string("kimi-k3.") + key; };
  w.set_string("general.architecture", "kimi-k3");
  w.set_string("general.name", "synthetic-kimi-k3-" + preset);
  w.set_u32("general.quantization_version", 2);
  w.set_u32(k("context_length"), 131072);
  w.set_u32(k("vocab_size"), static_cast<std::uint32_t>(c.vocab_size));
  w.set_u32(k("embedding_length"), static_cast<std::uint32_t>(c.hidden_size));
  w.set_u32(k("block_count"), static_cast<std::uint32_t>(c.num_hidden_layers));
  w.set_u32(k("feed_forward_length"), static_cast<std::uint32_t>(c.intermediate_size));
  w.set_u32(k("leading_dense_block_count"), static_cast<std::uint32_t>(c.first_k_dense_replace));
  w.set_f32(k("attention.layer_norm_rms_epsilon"), static_cast<float>(c.rms_norm_eps));
  w.set_u32(k("attention.head_count"), static_cast<std::uint32_t>(c.num_attention_heads));
  std::vector<std::int32_t> kv_heads;
  for (int l = 0; l < c.num_hidden_layers; ++l) kv_heads.push_back(c.is_mla_layer(l) ? 1 : 0);
  w.set_i32s(k("attention.head_count_kv"), kv_heads);
  w.set_u32(k("attention.q_lora_rank"), static_cast<std::uint32_t>(c.q_lora_rank));
  w.set_u32(k("attention.kv_lora_rank"), static_cast<std::uint32_t>(c.kv_lora_rank));
  w.set_u32(k("attention.key_length"),
            static_cast<std::uint32_t>(c.kv_lora_rank + c.qk_rope_head_dim));
  w.set_u32(k("attention.value_length"), static_cast<std::uint32_t>(c.kv_lora_rank));
  w.set_u32(k("attention.key_length_mla"), static_cast<std::uint32_t>(c.qk_head_dim()));
  w.set_u32(k("attention.value_length_mla"), static_cast<std::uint32_t>(c.v_head_dim));
  w.set_u32(k("rope.dimension_count"), static_cast<std::uint32_t>(c.qk_rope_head_dim));
  w.set_u32(k("expert_count"), static_cast<std::uint32_t>(c.num_experts));
  w.set_u32(k("expert_used_count"), static_cast<std::uint32_t>(c.num_experts_per_token));
  w.set_u32(k("expert_shared_count"), static_cast<std::uint32_t>(c.num_shared_experts));
  w.set_u32(k("expert_feed_forward_length"), static_cast<std::uint32_t>(c.moe_intermediate_size));
  w.set_u32(k("expert_latent_length"), static_cast<std::uint32_t>(c.routed_expert_hidden_size));
  w.set_f32(k("expert_weights_scale"), static_cast<float>(c.routed_scaling_factor));
  w.set_bool(k("expert_weights_norm"), true);
  w.set_u32(k("expert_gating_func"), 2);  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
  w.set_u32(k("ssm.conv_kernel"), static_cast<std::uint32_t>(c.kda_conv_kernel));
  w.set_u32(k("kda.head_dim"), static_cast<std::uint32_t>(c.kda_head_dim));
  w.set_f32(k("kda.gate_lower_bound"), static_cast<float>(c.kda_gate_lower_bound));
  w.set_f32(k("activation.situ_beta"), static_cast<float>(c.situ_beta));
  w.set_f32(k("activation.situ_linear_beta"), static_cast<float>(c.situ_linear_beta));
  w.set_u32(k("attn_res.block_size"), static_cast<std::uint32_t>(c.attn_res_block_size));
  w.set_string(std::string(kGgufKeyModel), tok.model);
  w.set_string(std::string(kGgufKeyPre), tok.pre);
  w.set_strings(std::string(kGgufKeyTokens), tok.tokens);
  w.set_i32s(std::string(kGgufKeyTokenType), tok.token_types);
  w.set_strings(std::string(kGgufKeyMerges), tok.merges);
  if (tok.bos_token_id) w.set_u32(std::string(kGgufKeyBos), *tok.bos_token_id);
  if (tok.eos_token_id) w.set_u32(std::string(kGgufKeyEos), *tok.eos_token_id);
  if (tok.padding_token_id) w.set_u32(std::string(kGgufKeyPad), *tok.padding_token_id);
}

}  // namespace

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
  if (c.o_.header_only) return {};
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
  fs::create_directories(o.out);
  Collector c(o, source.structure);
  auto emit = [&](const ParamSpec& s, const DraftRole& r) {
    c.dense(s.name, DType::kBF16, s.shape, draft_values(c, source, s, r));
  };
  DSparkWeights<ParamSpec>::fields(emit, definition, roles);
  const SynthSummary summary = write_safetensors(o, c.tensors);
  std::ofstream(o.out / "config.json") << to_config_json(cfg).dump(2) << "\n";
  return summary;
}

}  // namespace

SynthSummary synthesize_checkpoint(const SynthOptions& o) {
  if (o.shards < 1) throw UsageError("--shards " + std::to_string(o.shards) + " must be >= 1");
  // A draft goes with the preset's target as --set changes it, and is derived from its weights.
  ModelConfig cfg = preset_config(o.preset);
  bool depth_changed = false;
  for (const auto& [key, value] : o.overrides) {
    if (key == "hidden_size")
      cfg.hidden_size = value;
    else if (key == "num_hidden_layers") {
      cfg.num_hidden_layers = value;
      depth_changed = true;
    } else if (key == "attn_res_block_size") {
      cfg.attn_res_block_size = value;
      depth_changed = true;
    } else if (key == "num_attention_heads")
      cfg.num_attention_heads = value;
    else if (key == "kda_num_heads")
      cfg.kda_num_heads = value;
    else if (key == "num_experts")
      cfg.num_experts = value;
    else if (key == "num_experts_per_token")
      cfg.num_experts_per_token = value;
    else if (key == "routed_expert_hidden_size")
      cfg.routed_expert_hidden_size = value;
    else if (key == "moe_intermediate_size")
      cfg.moe_intermediate_size = value;
    else if (key == "intermediate_size")
      cfg.intermediate_size = value;
    else if (key == "vocab") {
      cfg.vocab_size = value + ModelConfig::kReservedSpecialTokens;
      cfg.bos_token_id = value;
      cfg.eos_token_id = value + 2;
      cfg.pad_token_id = value + ModelConfig::kReservedSpecialTokens - 1;
    } else {
      throw UsageError(
          "--set " + key +
          ": not a synthesizable config field (hidden_size, num_hidden_layers, "
          "attn_res_block_size, "
          "num_attention_heads, kda_num_heads, num_experts, num_experts_per_token, "
          "routed_expert_hidden_size, moe_intermediate_size, intermediate_size, vocab)");
    }
  }
  if (depth_changed && cfg.num_hidden_layers > 0 && cfg.attn_res_block_size > 0) {
    // Keep Kimi-K3's pattern: MLA every attn_res_block_size-th layer and the last one.
    cfg.full_attn_layers.clear();
    for (int l = cfg.attn_res_block_size; l < cfg.num_hidden_layers; l += cfg.attn_res_block_size)
      cfg.full_attn_layers.push_back(l);
    cfg.full_attn_layers.push_back(cfg.num_hidden_layers);
  }
  cfg.validate("k3ckpt synth --preset " + o.preset);
  if (o.format == FormatKind::kDraft) return synthesize_draft(o, cfg);
  // The tiny preset tokenizes for real: a BPE vocabulary trained on the corpus, of exactly the
  // config's base size. Larger presets get a 4096-token vocabulary (GGUF pads its token list
  // to vocab_size; tiktoken.model holds the 4096 tokens, their ids below vocab_size).
  if (o.corpus.empty())
    throw UsageError(
        "k3ckpt synth needs --corpus (a JSONL text corpus such as GSM8K's train.jsonl)");
  BpeTrainOptions train;
  train.vocab_size = o.preset == "tiny" ? cfg.base_vocab_size() : 4096;
  const Vocabulary vocab = train_bpe(read_jsonl_corpus(o.corpus), train);
  if (vocab.base_size() != train.vocab_size) {
    throw InputError("corpus " + o.corpus.string() + " yields only " +
                     std::to_string(vocab.base_size()) + " BPE tokens, the preset needs " +
                     std::to_string(train.vocab_size));
  }
  dist::LayoutSpec one;
  const ModelWeights<ParamSpec> definition = kimi_k3_definition(cfg, dist::Layout::make(one));
  const ModelWeights<SynthRole> roles = synth_roles(definition);
  fs::create_directories(o.out);
  Collector c(o, structure_of(cfg));
  const FormatKind kind = o.format;
  const bool gguf = kind == FormatKind::kGguf;
  const bool ms = kind == FormatKind::kModelSlim;
  const std::string prefix = gguf ? "" : "language_model.";
  json description = {
      {"model_quant_type", "W4A8_DYNAMIC"}, {"version", "1.0.0"}, {"group_size", 0}};
  // ModelSlim linears: int8 weight with per-row scale and offset, or FLOAT.
  auto modelslim_linear = [&](const std::string& name, const std::vector<std::int64_t>& shape,
                              const std::vector<float>& v, const std::string& scheme) {
    description[name] = scheme;
    if (scheme == "FLOAT") {
      c.dense(name, DType::kBF16, shape, v);
      return;
    }
    const bool int4 = scheme == "W4A8_DYNAMIC";
    std::vector<std::int64_t> wshape = shape;
    if (int4) wshape[0] /= 2;
    quant::QuantizedMatrix q;
    if (!o.header_only)
      q = c.quantized(int4 ? quant::Type::kModelSlimInt4 : quant::Type::kModelSlimInt8, v, shape);
    c.raw(name, DType::kI8, wshape, q.data);
    c.raw(stored_names::modelslim(name, stored_names::kModelSlimScale), DType::kF32, {shape[0], 1},
          as_bytes_f32(q.scale));
    std::vector<float> offset(q.scale.size(), 0.0f);
    if (!q.offset.empty()) offset = q.offset;
    c.raw(stored_names::modelslim(name, stored_names::kModelSlimOffset), DType::kF32,
          {shape[0], 1}, as_bytes_f32(offset));
  };

  // Every parameter with its synthetic role, in the definition's order.
  auto emit = [&](const ParamSpec& s, const SynthRole& role) {
    const std::string& n = s.name;
    switch (s.family) {
      case ParamFamily::kVector: {
        const std::string stored = gguf ? gguf_name(n, cfg) : prefix + n;
        if (ms) description[stored] = "FLOAT";
        c.dense(stored, gguf || role.stored_f32 ? DType::kF32 : DType::kBF16, s.shape,
                c.values(n, role, s.shape));
        break;
      }
      case ParamFamily::kAttnResScore: {
        const std::int64_t H = s.shape[0];
        const std::string norm_name = stored_names::attn_res_norm(n);
        const std::string proj_name = stored_names::attn_res_proj(n);
        const auto norm = c.values(norm_name, SynthRole{SynthShape::kNormWeight}, {H});
        const auto proj = c.values(proj_name, role, {1, H});
        if (gguf) {
          std::vector<float> score(o.header_only ? 0 : H);
          for (std::int64_t i = 0; i < static_cast<std::int64_t>(score.size()); ++i) {
            // Fold what the safetensors formats store as BF16, so all formats agree.
            score[i] = quant::bf16_to_f32(quant::f32_to_bf16(norm[i])) *
                       quant::bf16_to_f32(quant::f32_to_bf16(proj[i]));
          }
          c.dense(gguf_name(n, cfg), DType::kF32, {H}, score);
        } else {
          if (ms) {
            description[prefix + norm_name] = "FLOAT";
            description[prefix + proj_name] = "FLOAT";
          }
          c.dense(prefix + norm_name, DType::kBF16, {H}, norm);
          c.dense(prefix + proj_name, DType::kBF16, {1, H}, proj);
        }
        break;
      }
      case ParamFamily::kKdaDecay: {
        const std::int64_t heads = s.shape[0];
        const std::int64_t stored_len = std::max<std::int64_t>(heads, cfg.kda_head_dim);
        const std::string a_log = stored_names::kda_a_log(n);
        auto v = c.values(a_log, role, {stored_len});
        for (std::int64_t i = heads; i < static_cast<std::int64_t>(v.size()); ++i)
          v[i] = 0.0f;  // unused, as in the release
        if (gguf) {
          std::vector<float> ssm_a(v.empty() ? 0 : heads);
          for (std::int64_t i = 0; i < static_cast<std::int64_t>(ssm_a.size()); ++i)
            ssm_a[i] = -std::exp(v[i]);
          c.dense(gguf_name(n, cfg), DType::kF32, {heads}, ssm_a);
        } else {
          if (ms) description[prefix + a_log] = "FLOAT";
          c.dense(prefix + a_log, DType::kF32, {stored_len}, v);
        }
        break;
      }
      case ParamFamily::kEmbedding:
      case ParamFamily::kLinear:
      case ParamFamily::kLatentProjection: {
        const auto v = c.values(n, role, s.shape);
        const bool router = role.shape == SynthShape::kRouter;
        if (gguf) {
          c.dense(gguf_name(n, cfg), router ? DType::kF32 : DType::kQ8_0, s.shape, v);
        } else if (ms) {
          const bool keep_float = s.family == ParamFamily::kEmbedding ||
                                  role.shape == SynthShape::kLmHead || router;
          modelslim_linear(prefix + n, s.shape, v, keep_float ? "FLOAT" : "W8A8_DYNAMIC");
        } else {
          c.dense(prefix + n, DType::kBF16, s.shape, v);
        }
        break;
      }
      case ParamFamily::kMlaKvB: {
        const auto v = c.values(n, role, s.shape);
        if (!gguf) {
          if (ms) description[prefix + n] = "FLOAT";
          c.dense(prefix + n, DType::kBF16, s.shape, v);
          break;
        }
        // llama.cpp's split: per head, K = first nope rows transposed [kv_lora, nope], V = the
        // last v rows [v, kv_lora].
        const std::int64_t H = cfg.num_attention_heads, L = cfg.kv_lora_rank,
                           nope = cfg.qk_nope_head_dim, vd = cfg.v_head_dim;
        std::vector<float> k, vv;
        if (!o.header_only) {
          k.resize(static_cast<std::size_t>(H * L * nope));
          vv.resize(static_cast<std::size_t>(H * vd * L));
          for (std::int64_t h = 0; h < H; ++h) {
            const float* head = v.data() + h * (nope + vd) * L;
            for (std::int64_t j = 0; j < nope; ++j)
              for (std::int64_t l = 0; l < L; ++l) k[(h * L + l) * nope + j] = head[j * L + l];
            std::memcpy(vv.data() + h * vd * L, head + nope * L, sizeof(float) * vd * L);
          }
        }
        c.dense(stored_names::gguf_k_b(s.layer), DType::kQ4_0, {H, L, nope}, k);
        c.dense(stored_names::gguf_v_b(s.layer), DType::kQ2_K, {H, vd, L}, vv);
        break;
      }
      case ParamFamily::kRoutedExpert: {
        const std::int64_t E = s.shape[0], out = s.shape[1], in = s.shape[2];
        const std::string which = n.substr(n.size() - 2);
        if (gguf) {
          const DType t = which == "w2" ? DType::kQ3_K : DType::kQ2_K;
          c.dense(gguf_name(n, cfg), t, s.shape, c.values(n, role, s.shape));
          break;
        }
        for (std::int64_t e = 0; e < E; ++e) {
          const auto v =
              c.values(n, role, {out, in}, static_cast<std::size_t>(e * out * in), out * in);
          const std::string name = stored_names::routed_expert(prefix, s.layer, e, which);
          if (ms) {
            modelslim_linear(name + ".weight", {out, in}, v, "W4A8_DYNAMIC");
          } else {
            quant::QuantizedMatrix q;
            if (!o.header_only) q = c.quantized(quant::Type::kMXFP4Packed, v, {out, in});
            c.raw(stored_names::mxfp4_packed(name), DType::kU8, {out, in / 2}, q.data);
            c.raw(stored_names::mxfp4_scale(name), DType::kU8, {out, in / 32}, q.e8m0);
          }
        }
        break;
      }
    }
  };
  ModelWeights<ParamSpec>::fields(emit, definition, roles);

  SynthSummary summary;
  if (gguf) {
    const auto shard_of = assign_shards(c.tensors, o.shards);
    for (const auto& t : c.tensors) summary.bytes += *tensor_bytes(t.dtype, t.shape);
    summary.tensors = c.tensors.size();
    const GgufTokenizer tok = to_gguf_tokenizer(vocab, cfg.vocab_size);
    std::vector<GgufWriter> writers(o.shards);
    std::vector<int> counts(o.shards, 0);
    for (std::size_t i = 0; i < c.tensors.size(); ++i) ++counts[shard_of[i]];
    for (int s = 0; s < o.shards; ++s) {
      if (s == 0) write_gguf_metadata(writers[s], cfg, o.preset, tok);
      if (o.shards > 1) {
        writers[s].set_u16("split.no", static_cast<std::uint16_t>(s));
        writers[s].set_u16("split.count", static_cast<std::uint16_t>(o.shards));
        writers[s].set_i32("split.tensors.count", static_cast<std::int32_t>(c.tensors.size()));
      }
    }
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      auto& t = c.tensors[i];
      if (o.header_only)
        writers[shard_of[i]].add_header_only(t.name, t.dtype, t.shape);
      else
        writers[shard_of[i]].add_tensor(t.name, t.dtype, t.shape, t.data);
    }
    const std::string stem = "kimi-k3-" + o.preset;
    for (int s = 0; s < o.shards; ++s) {
      char file[96];
      if (o.shards == 1)
        std::snprintf(file, sizeof file, "%s.gguf", stem.c_str());
      else
        std::snprintf(file, sizeof file, "%s-%05d-of-%05d.gguf", stem.c_str(), s + 1, o.shards);
      writers[s].write(o.out / file);
      ++summary.files;
    }
    return summary;
  }
  summary = write_safetensors(o, c.tensors);
  std::ofstream(o.out / "config.json") << to_config_json(cfg).dump(2) << "\n";
  if (ms) std::ofstream(o.out / "quant_model_description.json") << description.dump(1) << "\n";
  // Every main-model checkpoint carries its tokenizer (pre-flight checks it).
  std::ofstream(o.out / "tiktoken.model", std::ios::binary) << vocab.to_tiktoken();
  return summary;
}

}  // namespace k3::model
