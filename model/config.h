// model::ModelConfig: the Kimi-K3 text model's hyper-parameters, from config.json (official
// release: under "text_config"; ModelSlim exports may be flat), from GGUF metadata, or from a
// preset (the tiny synthetic model and the full-size shapes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace k3::model {

// The DSpark drafter as SGLang serves it for Kimi-K3 (RadixArk/Kimi-K3-DSpark; config.json with
// model_type "qwen3" and a "dflash_config"; docs/FORMATS.md, "The DSpark draft"): Qwen3-style GQA
// layers that attend over the target's tapped hidden states (fused by `fc` and `hidden_norm`) and
// a block of anchor + mask tokens, the target's embedding and LM head, and a low-rank Markov
// head. The shared sizes (hidden, layers, Q heads, MLP, vocabulary, eps) are the ModelConfig's
// own fields; its Kimi-K3 fields (MLA, KDA, MoE, AttnRes) stay at their defaults.
struct DSparkConfig {
  int block_size = 7;           // tokens drafted per round (anchor + block_size - 1 masks)
  int num_key_value_heads = 0;  // GQA: num_attention_heads is a multiple of it
  int head_dim = 0;
  int mask_token_id = -1;  // dflash_config.mask_token_id, a token of the target vocabulary
  std::vector<int> target_layer_ids;  // dflash_config.target_layer_ids: 0-based, ascending
  int markov_rank = 256;              // dflash_config.markov_rank (vanilla Markov head)
  bool confidence_head = false;       // dflash_config.enable_confidence_head (stored, unused)
  // Which target stream a tap reads (config "aux_hidden_stream"): SGLang's "attn_res" (the
  // AttnRes mixture the next layer's input norm would see; the default) or "prefix" (the
  // residual stream after the layer).
  bool tap_attn_res = true;
  // RoPE (rope_parameters): theta, and YaRN when factor > 1.
  double rope_theta = 10000;
  double rope_factor = 1;
  int rope_original_max_position = 0;
  double rope_beta_fast = 32, rope_beta_slow = 1;
  int max_position_embeddings = 0;
  // dflash_config.confidence_head_with_markov: the confidence head reads the Markov head's
  // previous-token embedding beside the hidden state ([1, hidden + markov_rank]) or not.
  bool confidence_with_markov = true;

  int taps() const { return static_cast<int>(target_layer_ids.size()); }
};

struct ModelConfig {
  std::string model_type = "kimi_linear";
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int vocab_size = 0;         // padded: base vocabulary plus the 256 reserved special ids
  int intermediate_size = 0;  // dense layers' MLP
  int first_k_dense_replace = 1;
  double rms_norm_eps = 1e-5;
  double situ_beta = 4.0;
  double situ_linear_beta = 25.0;

  // Gated NoPE MLA
  int num_attention_heads = 0;
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;  // per head

  // LatentMoE
  int num_experts = 0;
  int num_experts_per_token = 0;
  int num_shared_experts = 0;
  int moe_intermediate_size = 0;
  int routed_expert_hidden_size = 0;  // the latent width
  double routed_scaling_factor = 1.0;

  int attn_res_block_size = 0;

  // KDA
  int kda_num_heads = 0;
  int kda_head_dim = 0;
  int kda_conv_kernel = 4;
  double kda_gate_lower_bound = -5.0;
  std::vector<int> full_attn_layers;  // 1-based, as config.json stores them (MLA layers)

  // Set for a DSpark draft checkpoint (see DSparkConfig); then is_draft().
  std::optional<DSparkConfig> dspark;

  // The target's special tokens; a draft has none of its own (they stay 0).
  int bos_token_id = 0;
  int eos_token_id = 0;  // <|end_of_msg|>, the stop token
  int pad_token_id = 0;

  // Derived views.
  bool is_draft() const { return dspark.has_value(); }
  bool is_mla_layer(int layer) const;    // 0-based
  bool is_dense_layer(int layer) const;  // 0-based: layer < first_k_dense_replace
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int kda_projection_size() const { return kda_num_heads * kda_head_dim; }
  int shared_intermediate_size() const { return moe_intermediate_size * num_shared_experts; }
  int base_vocab_size() const { return vocab_size - kReservedSpecialTokens; }

  // Throws k3::InputError naming `source` and the field for any inconsistent value.
  void validate(const std::string& source) const;

  // A lower bound on the weights the config declares (the large matrices of every layer, the
  // embedding and the LM head; for a draft its layers, fc and Markov head), for checking it
  // against the bytes a checkpoint stores.
  double least_parameter_count() const;

  static constexpr int kReservedSpecialTokens = 256;
  static constexpr int kMaxLayers = 1 << 12;  // validate()'s bound on num_hidden_layers
};

// The synthetic presets: "tiny" (divides cleanly for TP64/DP4/EP64, see ARCHITECTURE.md),
// "wide" (the real widths with 4 layers and 32 experts, for speed at production widths) and
// "full" (the real Kimi-K3 shapes).
ModelConfig preset_config(const std::string& name);
// The DSpark drafter that goes with a preset's target: "full" is RadixArk/Kimi-K3-DSpark exactly
// (5 GQA layers, 64 Q / 16 KV heads of 64, taps 7,23,51,67,83, Markov rank 256); "tiny" is its
// shape at the tiny target's width (5 layers, 32 Q / 16 KV heads of 16, taps 0,1,2,4,5, Markov
// rank = hidden); "wide" is the full drafter tapping the wide target's 4 layers. Hidden size,
// vocabulary, rms_norm_eps and the mask token (vocab - 16) follow the target; the second form
// takes that target (a preset changed by k3ckpt synth --set).
ModelConfig draft_preset_config(const std::string& name);
ModelConfig draft_preset_config(const std::string& name, const ModelConfig& target);

// config.json: reads "text_config" when present, else the top level. Strict: a missing key or a
// value of the wrong JSON type is an InputError naming the file and the key. A config with a
// "dflash_config" object is a DSpark draft (SGLang's layout, see DSparkConfig); the MLA drafter
// (K3DSparkModel) and the speculators convention (speculators_model_type "dspark") are refused.
ModelConfig parse_config_json(const nlohmann::json& json, const std::string& source);
ModelConfig read_config_json(const std::filesystem::path& path);

// The official release's layout: {"architectures": [...], "text_config": {...}, ...}; for a draft
// the flat layout parse_config_json reads ({"architectures": ["DSparkDraftModel"], ...,
// "dflash_config": {...}}).
nlohmann::json to_config_json(const ModelConfig& config);

}  // namespace k3::model
