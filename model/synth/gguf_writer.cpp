// The gguf format's synthetic writer: llama.cpp's kimi-k3 GGUF (docs/FORMATS.md, "Compatibility
// with llama.cpp's kimi-k3 loader"). Its names (gguf_name), vectors in F32, AttnRes scores and
// the KDA decay folded, MLA kv_b split into Q4_0 attn_k_b and Q2_K attn_v_b, matrices in Q8_0
// (routers F32), routed experts stacked per layer in Q2_K (w2: Q3_K); the metadata and the
// tokenizer in the first file, split.* keys in each file of a split.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "model/checkpoint/gguf.h"
#include "model/checkpoint/gguf_names.h"
#include "model/checkpoint/stored_names.h"
#include "model/synth/writer.h"
#include "model/tokenizer/gguf_vocab.h"
#include "quant/fp.h"

namespace k3::model::synth {

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

class GgufEncoder final : public TargetEncoder {
 public:
  using TargetEncoder::TargetEncoder;

  void vector(const ParamSpec& s, const SynthRole& role) override {
    c_.dense(gguf_name(s.name, config_), DType::kF32, s.shape, c_.values(s.name, role, s.shape));
  }

  void attn_res_score(const ParamSpec& s, const SynthRole& role) override {
    const std::int64_t H = s.shape[0];
    const auto [norm, proj] = attn_res_parts(s, role);
    std::vector<float> score(c_.header_only() ? 0 : H);
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(score.size()); ++i) {
      // Fold what the safetensors formats store as BF16, so all formats agree.
      score[i] = quant::bf16_to_f32(quant::f32_to_bf16(norm[i])) *
                 quant::bf16_to_f32(quant::f32_to_bf16(proj[i]));
    }
    c_.dense(gguf_name(s.name, config_), DType::kF32, {H}, score);
  }

  // ssm_a = -exp(A_log[:heads]).
  void kda_decay(const ParamSpec& s, const SynthRole& role) override {
    const std::int64_t heads = s.shape[0];
    const std::vector<float> a_log = kda_a_log(s, role);
    std::vector<float> ssm_a(a_log.empty() ? 0 : heads);
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(ssm_a.size()); ++i)
      ssm_a[i] = -std::exp(a_log[i]);
    c_.dense(gguf_name(s.name, config_), DType::kF32, {heads}, ssm_a);
  }

  void matrix(const ParamSpec& s, const SynthRole& role) override {
    const DType dtype = role.shape == SynthShape::kRouter ? DType::kF32 : DType::kQ8_0;
    c_.dense(gguf_name(s.name, config_), dtype, s.shape, c_.values(s.name, role, s.shape));
  }

  // llama.cpp's split: per head, K = the first nope rows transposed [kv_lora, nope], V = the
  // last v rows [v, kv_lora].
  void mla_kv_b(const ParamSpec& s, const SynthRole& role) override {
    const auto v = c_.values(s.name, role, s.shape);
    const std::int64_t H = config_.num_attention_heads, L = config_.kv_lora_rank,
                       nope = config_.qk_nope_head_dim, vd = config_.v_head_dim;
    std::vector<float> k, vv;
    if (!c_.header_only()) {
      k.resize(static_cast<std::size_t>(H * L * nope));
      vv.resize(static_cast<std::size_t>(H * vd * L));
      for (std::int64_t h = 0; h < H; ++h) {
        const float* head = v.data() + h * (nope + vd) * L;
        for (std::int64_t j = 0; j < nope; ++j)
          for (std::int64_t l = 0; l < L; ++l) k[(h * L + l) * nope + j] = head[j * L + l];
        std::memcpy(vv.data() + h * vd * L, head + nope * L, sizeof(float) * vd * L);
      }
    }
    c_.dense(stored_names::gguf_k_b(s.layer), DType::kQ4_0, {H, L, nope}, k);
    c_.dense(stored_names::gguf_v_b(s.layer), DType::kQ2_K, {H, vd, L}, vv);
  }

  void routed_experts(const ParamSpec& s, const SynthRole& role) override {
    const DType dtype = expert_matrix(s) == "w2" ? DType::kQ3_K : DType::kQ2_K;
    c_.dense(gguf_name(s.name, config_), dtype, s.shape, c_.values(s.name, role, s.shape));
  }

  SynthSummary finish(const Vocabulary& vocab) override;
};

// kimi-k3-<preset>.gguf, or kimi-k3-<preset>-0000N-of-0000M.gguf for each file of a split.
SynthSummary GgufEncoder::finish(const Vocabulary& vocab) {
  const SynthOptions& o = c_.options();
  const std::vector<Tensor>& tensors = c_.tensors();
  SynthSummary summary = tally(tensors);
  const auto shard_of = assign_shards(tensors, o.shards);
  const GgufTokenizer tok = to_gguf_tokenizer(vocab, config_.vocab_size);
  std::vector<GgufWriter> writers(o.shards);
  for (int s = 0; s < o.shards; ++s) {
    if (s == 0) write_gguf_metadata(writers[s], config_, o.preset, tok);
    if (o.shards > 1) {
      writers[s].set_u16("split.no", static_cast<std::uint16_t>(s));
      writers[s].set_u16("split.count", static_cast<std::uint16_t>(o.shards));
      writers[s].set_i32("split.tensors.count", static_cast<std::int32_t>(tensors.size()));
    }
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
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

}  // namespace

const SynthWriter& gguf_writer() {
  static const TargetWriter<GgufEncoder> writer;
  return writer;
}

}  // namespace k3::model::synth
