// ModelConfig's derived views, its validation (every absurd value refused before anything is
// sized from it) and its least parameter count.
#include "model/config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <sstream>

#include "common/error.h"

namespace k3::model {

bool ModelConfig::is_mla_layer(int layer) const {
  return std::find(full_attn_layers.begin(), full_attn_layers.end(), layer + 1) !=
         full_attn_layers.end();
}

bool ModelConfig::is_dense_layer(int layer) const {
  return is_draft() || layer < first_k_dense_replace;
}

namespace {

// Far above any real model, and low enough that no product of two of them (a projection's
// rows, a head block) overflows: an absurd value is refused by validate(), before any per-layer
// or per-expert structure is sized from it.
constexpr long long kMaxWidth = 1 << 20, kMaxCount = 1 << 16, kMaxHeadDim = 1 << 12;
constexpr long long kMaxVocab = 1 << 24;
constexpr int kMaxBlockSize = 64;  // tokens a DSpark draft proposes per round

void validate_draft(const ModelConfig& c, const std::string& source) {
  const DSparkConfig& d = *c.dspark;
  auto fail = [&](const std::string& what) {
    throw InputError(source + ": invalid DSpark draft config: " + what);
  };
  auto within = [&](const std::string& key, long long v, long long low, long long high) {
    if (v < low || v > high) {
      fail(key + " = " + std::to_string(v) + ", expected " + std::to_string(low) + ".." +
           std::to_string(high));
    }
  };
  within("hidden_size", c.hidden_size, 1, kMaxWidth);
  within("num_hidden_layers", c.num_hidden_layers, 1, ModelConfig::kMaxLayers);
  within("vocab_size", c.vocab_size, 1, kMaxVocab);
  within("intermediate_size", c.intermediate_size, 1, kMaxWidth);
  within("num_attention_heads", c.num_attention_heads, 1, kMaxHeadDim);
  within("num_key_value_heads", d.num_key_value_heads, 1, kMaxHeadDim);
  within("head_dim", d.head_dim, 1, kMaxHeadDim);
  within("max_position_embeddings", d.max_position_embeddings, 1, INT_MAX);
  within("block_size", d.block_size, 1, kMaxBlockSize);
  within("dflash_config.markov_rank", d.markov_rank, 1, kMaxWidth);
  if (c.num_attention_heads % d.num_key_value_heads != 0) {
    fail("num_attention_heads = " + std::to_string(c.num_attention_heads) +
         ", expected a multiple of num_key_value_heads = " + std::to_string(d.num_key_value_heads) +
         " (GQA shares each KV head among a whole number of query heads)");
  }
  if (d.target_layer_ids.empty())
    fail("dflash_config.target_layer_ids is empty; a DSpark draft taps at least one target layer");
  if (static_cast<long long>(d.target_layer_ids.size()) > kMaxHeadDim) {
    fail("dflash_config.target_layer_ids has " + std::to_string(d.target_layer_ids.size()) +
         " entries, expected at most " + std::to_string(kMaxHeadDim));
  }
  for (std::size_t i = 0; i < d.target_layer_ids.size(); ++i) {
    const int l = d.target_layer_ids[i];
    if (l < 0) {
      fail("dflash_config.target_layer_ids entry " + std::to_string(l) +
           " is negative (0-based target layers)");
    }
    if (i > 0 && l <= d.target_layer_ids[i - 1]) {
      fail("dflash_config.target_layer_ids is not ascending and unique: " + std::to_string(l) +
           " follows " + std::to_string(d.target_layer_ids[i - 1]) +
           " (fc reads the taps concatenated in this order)");
    }
  }
  if (d.mask_token_id < 0 || d.mask_token_id >= c.vocab_size) {
    fail("dflash_config.mask_token_id = " + std::to_string(d.mask_token_id) +
         " outside the vocabulary (vocab_size " + std::to_string(c.vocab_size) + ")");
  }
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) fail("rms_norm_eps outside (0, 1)");
  auto number = [](double v) {
    std::ostringstream text;
    text << v;
    return text.str();
  };
  if (!(d.rope_theta > 0) || !std::isfinite(d.rope_theta))
    fail("rope_parameters.rope_theta = " + number(d.rope_theta) + ", expected > 0");
  if (!(d.rope_factor >= 1) || !std::isfinite(d.rope_factor))
    fail("rope_parameters.factor = " + number(d.rope_factor) + ", expected >= 1");
  if (d.rope_original_max_position < 0 || (d.rope_factor > 1 && d.rope_original_max_position < 1)) {
    fail("rope_parameters.original_max_position_embeddings = " +
         std::to_string(d.rope_original_max_position) + ", expected > 0 with YaRN (factor " +
         number(d.rope_factor) + ")");
  }
  if (!std::isfinite(d.rope_beta_fast) || !std::isfinite(d.rope_beta_slow))
    fail("rope_parameters.beta_fast / beta_slow must be finite numbers");
}

}  // namespace

void ModelConfig::validate(const std::string& source) const {
  if (is_draft()) {
    validate_draft(*this, source);
    return;
  }
  auto fail = [&](const std::string& what) {
    throw InputError(source + ": invalid Kimi-K3 config: " + what);
  };
  auto positive = [&](const char* name, long long v) {
    if (v <= 0) fail(std::string(name) + " = " + std::to_string(v) + ", expected > 0");
  };
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("vocab_size", vocab_size);
  positive("intermediate_size", intermediate_size);
  positive("num_attention_heads", num_attention_heads);
  positive("q_lora_rank", q_lora_rank);
  positive("kv_lora_rank", kv_lora_rank);
  positive("qk_nope_head_dim", qk_nope_head_dim);
  positive("qk_rope_head_dim", qk_rope_head_dim);
  positive("v_head_dim", v_head_dim);
  positive("num_experts", num_experts);
  positive("num_experts_per_token", num_experts_per_token);
  positive("moe_intermediate_size", moe_intermediate_size);
  positive("routed_expert_hidden_size", routed_expert_hidden_size);
  positive("attn_res_block_size", attn_res_block_size);
  positive("linear_attn_config.num_heads", kda_num_heads);
  positive("linear_attn_config.head_dim", kda_head_dim);
  positive("linear_attn_config.short_conv_kernel_size", kda_conv_kernel);
  auto at_most = [&](const char* name, long long v, long long limit) {
    if (v > limit) {
      fail(std::string(name) + " = " + std::to_string(v) + ", expected at most " +
           std::to_string(limit));
    }
  };
  at_most("hidden_size", hidden_size, kMaxWidth);
  at_most("num_hidden_layers", num_hidden_layers, kMaxLayers);
  at_most("vocab_size", vocab_size, kMaxVocab);
  at_most("intermediate_size", intermediate_size, kMaxWidth);
  at_most("num_attention_heads", num_attention_heads, kMaxHeadDim);
  at_most("q_lora_rank", q_lora_rank, kMaxWidth);
  at_most("kv_lora_rank", kv_lora_rank, kMaxWidth);
  at_most("qk_nope_head_dim", qk_nope_head_dim, kMaxHeadDim);
  at_most("qk_rope_head_dim", qk_rope_head_dim, kMaxHeadDim);
  at_most("v_head_dim", v_head_dim, kMaxHeadDim);
  at_most("num_experts", num_experts, kMaxCount);
  at_most("num_shared_experts", num_shared_experts, kMaxHeadDim);
  at_most("moe_intermediate_size", moe_intermediate_size, kMaxWidth);
  at_most("routed_expert_hidden_size", routed_expert_hidden_size, kMaxWidth);
  at_most("attn_res_block_size", attn_res_block_size, kMaxCount);
  at_most("linear_attn_config.num_heads", kda_num_heads, kMaxHeadDim);
  at_most("linear_attn_config.head_dim", kda_head_dim, kMaxHeadDim);
  at_most("linear_attn_config.short_conv_kernel_size", kda_conv_kernel, kMaxHeadDim);
  if (num_shared_experts < 0) fail("num_shared_experts < 0");
  if (first_k_dense_replace < 0 || first_k_dense_replace > num_hidden_layers) {
    fail("first_k_dense_replace = " + std::to_string(first_k_dense_replace) +
         " outside [0, num_hidden_layers]");
  }
  if (num_experts_per_token > num_experts) {
    fail("num_experts_per_token = " + std::to_string(num_experts_per_token) + " exceeds " +
         "num_experts = " + std::to_string(num_experts));
  }
  if (vocab_size <= kReservedSpecialTokens) {
    fail("vocab_size = " + std::to_string(vocab_size) + " leaves no room for the " +
         std::to_string(kReservedSpecialTokens) + " reserved special tokens");
  }
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) fail("rms_norm_eps outside (0, 1)");
  std::set<int> seen;
  for (int l : full_attn_layers) {
    if (l < 1 || l > num_hidden_layers) {
      fail("full_attn_layers entry " + std::to_string(l) + " outside 1.." +
           std::to_string(num_hidden_layers) + " (the list is 1-based)");
    }
    if (!seen.insert(l).second)
      fail("full_attn_layers lists layer " + std::to_string(l) + " twice");
  }
  for (int id : {bos_token_id, eos_token_id, pad_token_id}) {
    if (id < 0 || id >= vocab_size) {
      fail("special token id " + std::to_string(id) + " outside vocab_size " +
           std::to_string(vocab_size) + " (bos, eos and pad need embedding rows)");
    }
  }
}

double ModelConfig::least_parameter_count() const {
  const double hidden = hidden_size, vocab = vocab_size;
  const double layers = num_hidden_layers;
  if (is_draft()) {
    const DSparkConfig& d = *dspark;
    const double q = double(num_attention_heads) * d.head_dim,
                 kv = double(d.num_key_value_heads) * d.head_dim;
    const double layer = 2 * hidden * q + 2 * hidden * kv + 3 * hidden * intermediate_size;
    return layers * layer + hidden * hidden * d.taps() + 2 * vocab * d.markov_rank;
  }
  const double mla = static_cast<double>(full_attn_layers.size());
  const double mla_layer =
      hidden * q_lora_rank + double(q_lora_rank) * num_attention_heads * qk_head_dim() +
      hidden * kv_lora_rank +
      double(kv_lora_rank) * num_attention_heads * (qk_nope_head_dim + v_head_dim) +
      double(num_attention_heads) * v_head_dim * hidden;
  const double dense_mlp = 3 * hidden * intermediate_size;
  const double count = 2 * vocab * hidden + layers * 2 * hidden;  // embedding, LM head, norms
  const double kda_layer = 4 * hidden * double(kda_num_heads) * kda_head_dim;
  const double dense = first_k_dense_replace, moe = layers - dense;
  const double experts =
      double(num_experts) * 3 * routed_expert_hidden_size * moe_intermediate_size;
  return count + mla * mla_layer + (layers - mla) * kda_layer + dense * dense_mlp + moe * experts;
}

}  // namespace k3::model
