// The synthetic presets (tiny, wide, full) and the DSpark drafters that go with them.
#include <string>

#include "common/error.h"
#include "model/config.h"

namespace k3::model {

ModelConfig preset_config(const std::string& name) {
  ModelConfig c;
  if (name == "tiny") {
    // Every split the tests use divides: 16 heads and a 4352 vocabulary over attention-TP 16,
    // 64 experts over EP 64; K-quant rows (kv_lora, latent, expert intermediate) are 256.
    c.hidden_size = 512;
    c.num_hidden_layers = 6;
    c.vocab_size = 4096 + ModelConfig::kReservedSpecialTokens;
    c.intermediate_size = 1024;
    c.num_attention_heads = 16;
    c.q_lora_rank = 128;
    c.kv_lora_rank = 256;
    c.qk_nope_head_dim = 32;
    c.qk_rope_head_dim = 16;
    c.v_head_dim = 32;
    c.num_experts = 64;
    c.num_experts_per_token = 4;
    c.num_shared_experts = 2;
    c.moe_intermediate_size = 256;
    c.routed_expert_hidden_size = 256;
    c.attn_res_block_size = 3;
    c.kda_num_heads = 16;
    c.kda_head_dim = 32;
    c.full_attn_layers = {3, 6};
    c.bos_token_id = 4096;
    c.eos_token_id = 4096 + 2;
    c.pad_token_id = 4096 + 255;
  } else if (name == "full") {
    c.hidden_size = 7168;
    c.num_hidden_layers = 93;
    c.vocab_size = 163840;
    c.intermediate_size = 33792;
    c.num_attention_heads = 96;
    c.q_lora_rank = 1536;
    c.kv_lora_rank = 512;
    c.qk_nope_head_dim = 128;
    c.qk_rope_head_dim = 64;
    c.v_head_dim = 128;
    c.num_experts = 896;
    c.num_experts_per_token = 16;
    c.num_shared_experts = 2;
    c.moe_intermediate_size = 3072;
    c.routed_expert_hidden_size = 3584;
    c.attn_res_block_size = 12;
    c.kda_num_heads = 96;
    c.kda_head_dim = 128;
    for (int l = 4; l <= 92; l += 4) c.full_attn_layers.push_back(l);
    c.full_attn_layers.push_back(93);
    c.bos_token_id = 163584;
    c.eos_token_id = 163586;
    c.pad_token_id = 163839;
  } else if (name == "wide") {
    // Production widths at a depth this host runs: every width of "full" (hidden,
    // MLA and KDA heads and head dimensions, LatentMoE latent 3584 and expert intermediate 3072,
    // two shared experts, the 33792-wide dense first layer, the 163840 vocabulary, top-16
    // routing) with 4 layers (KDA 1-3 and MLA 4; layer 1 dense, 2-4 MoE) in two AttnRes blocks
    // and 32 routed experts: a 6.2 GiB GGUF whose batch-1 decode streams 4.5 GiB a token.
    c = preset_config("full");
    c.num_hidden_layers = 4;
    c.full_attn_layers = {4};
    c.attn_res_block_size = 2;
    c.num_experts = 32;
  } else {
    throw UsageError("unknown preset '" + name + "' (expected tiny, wide or full)");
  }
  c.validate("preset " + name);
  return c;
}

ModelConfig draft_preset_config(const std::string& name) {
  return draft_preset_config(name, preset_config(name));
}

ModelConfig draft_preset_config(const std::string& name, const ModelConfig& target) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.hidden_size = target.hidden_size;
  c.vocab_size = target.vocab_size;
  c.rms_norm_eps = target.rms_norm_eps;
  c.num_hidden_layers = 5;
  DSparkConfig& d = c.dspark.emplace();
  d.block_size = 7;
  // RadixArk's mask token is 163824 = vocab - 16, a reserved special id of the target.
  d.mask_token_id = target.vocab_size - 16;
  d.confidence_head = true;
  d.confidence_with_markov = true;
  d.tap_attn_res = true;
  d.rope_theta = 10000;
  d.rope_factor = 16;
  d.rope_original_max_position = 65536;
  d.max_position_embeddings = 1048576;
  if (name == "tiny") {
    // 32 Q heads and 16 KV heads divide over attention-TP 16; a Markov rank equal to the hidden
    // size lets the synthetic Markov head hold the target's bigram logits exactly.
    c.num_attention_heads = 32;
    c.intermediate_size = 1024;
    d.num_key_value_heads = 16;
    d.head_dim = 16;
    d.target_layer_ids = {0, 1, 2, 4, 5};
    d.markov_rank = target.hidden_size;
  } else if (name == "full") {
    // RadixArk/Kimi-K3-DSpark: 2,249,289,601 parameters in 62 tensors.
    c.num_attention_heads = 64;
    c.intermediate_size = 14336;
    d.num_key_value_heads = 16;
    d.head_dim = 64;
    d.target_layer_ids = {7, 23, 51, 67, 83};
    d.markov_rank = 256;
  } else if (name == "wide") {
    // The full drafter's shape; its four-layer target offers four taps.
    c.num_attention_heads = 64;
    c.intermediate_size = 14336;
    d.num_key_value_heads = 16;
    d.head_dim = 64;
    d.target_layer_ids = {0, 1, 2, 3};
    d.markov_rank = 256;
  } else {
    throw UsageError("unknown preset '" + name + "' (expected tiny, wide or full)");
  }
  c.validate("draft preset " + name);
  return c;
}

}  // namespace k3::model
