#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/json.h"

namespace k3::model {

using nlohmann::json;

bool ModelConfig::is_mla_layer(int layer) const {
  if (is_draft()) return true;
  return std::find(full_attn_layers.begin(), full_attn_layers.end(), layer + 1) !=
         full_attn_layers.end();
}

bool ModelConfig::is_dense_layer(int layer) const {
  return is_draft() || layer < first_k_dense_replace;
}

void ModelConfig::validate(const std::string& source) const {
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
  if (is_draft()) {
    if (draft_target_layers.empty())
      fail("target_layer_ids is empty; a DSpark draft taps at least one layer");
    for (int l : draft_target_layers) {
      if (l < 0) fail("target_layer_ids entry " + std::to_string(l) + " is negative");
    }
  } else {
    positive("num_experts", num_experts);
    positive("num_experts_per_token", num_experts_per_token);
    positive("moe_intermediate_size", moe_intermediate_size);
    positive("routed_expert_hidden_size", routed_expert_hidden_size);
    positive("attn_res_block_size", attn_res_block_size);
    positive("linear_attn_config.num_heads", kda_num_heads);
    positive("linear_attn_config.head_dim", kda_head_dim);
    positive("linear_attn_config.short_conv_kernel_size", kda_conv_kernel);
  }
  // Far above any real model, and low enough that no product of two of them (a projection's
  // rows, a head block) overflows: an absurd value is refused here, before any per-layer or
  // per-expert structure is sized from it.
  auto at_most = [&](const char* name, long long v, long long limit) {
    if (v > limit) {
      fail(std::string(name) + " = " + std::to_string(v) + ", expected at most " +
           std::to_string(limit));
    }
  };
  constexpr long long kMaxWidth = 1 << 20, kMaxCount = 1 << 16, kMaxHeadDim = 1 << 12;
  at_most("hidden_size", hidden_size, kMaxWidth);
  at_most("num_hidden_layers", num_hidden_layers, kMaxLayers);
  at_most("vocab_size", vocab_size, 1 << 24);
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
  at_most("target_layer_ids entries", static_cast<long long>(draft_target_layers.size()),
          kMaxHeadDim);
  if (num_shared_experts < 0) fail("num_shared_experts < 0");
  if (first_k_dense_replace < 0 || first_k_dense_replace > num_hidden_layers) {
    fail("first_k_dense_replace = " + std::to_string(first_k_dense_replace) +
         " outside [0, num_hidden_layers]");
  }
  if (!is_draft() && num_experts_per_token > num_experts) {
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
  const double mla = static_cast<double>(full_attn_layers.size());
  const double mla_layer =
      hidden * q_lora_rank + double(q_lora_rank) * num_attention_heads * qk_head_dim() +
      hidden * kv_lora_rank +
      double(kv_lora_rank) * num_attention_heads * (qk_nope_head_dim + v_head_dim) +
      double(num_attention_heads) * v_head_dim * hidden;
  const double dense_mlp = 3 * hidden * intermediate_size;
  double count = 2 * vocab * hidden + layers * 2 * hidden;  // embedding, LM head, norms
  if (is_draft()) return count + layers * (mla_layer + dense_mlp);
  const double kda_layer = 4 * hidden * double(kda_num_heads) * kda_head_dim;
  const double dense = first_k_dense_replace, moe = layers - dense;
  const double experts =
      double(num_experts) * 3 * routed_expert_hidden_size * moe_intermediate_size;
  return count + mla * mla_layer + (layers - mla) * kda_layer + dense * dense_mlp + moe * experts;
}

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
  } else {
    throw UsageError("unknown preset '" + name + "' (expected tiny or full)");
  }
  c.validate("preset " + name);
  return c;
}

ModelConfig draft_preset_config(const std::string& name) {
  const ModelConfig target = preset_config(name);
  ModelConfig c;
  c.model_type = "k3_dspark";
  c.hidden_size = target.hidden_size;
  c.vocab_size = target.vocab_size;
  c.rms_norm_eps = target.rms_norm_eps;
  c.num_attention_heads = target.num_attention_heads;
  c.q_lora_rank = target.q_lora_rank;
  c.kv_lora_rank = target.kv_lora_rank;
  c.qk_nope_head_dim = target.qk_nope_head_dim;
  c.qk_rope_head_dim = target.qk_rope_head_dim;
  c.v_head_dim = target.v_head_dim;
  c.bos_token_id = target.bos_token_id;
  c.eos_token_id = target.eos_token_id;
  c.pad_token_id = target.pad_token_id;
  if (name == "tiny") {
    c.num_hidden_layers = 2;
    c.intermediate_size = 1024;
    c.draft_target_layers = {1, 3, 4};
  } else {
    // Inferact/Kimi-K3-DSpark: 5 MLA layers tapping target layers 2, 23, 47, 71 and 89.
    c.num_hidden_layers = 5;
    c.intermediate_size = 18432;
    c.draft_target_layers = {2, 23, 47, 71, 89};
  }
  c.first_k_dense_replace = c.num_hidden_layers;
  for (int l = 1; l <= c.num_hidden_layers; ++l) c.full_attn_layers.push_back(l);
  c.validate("draft preset " + name);
  return c;
}

namespace {

// Typed, strict access to one JSON object, naming the file and key on every error.
class Reader {
 public:
  Reader(const json& object, std::string source, std::string prefix)
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  const json& at(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end()) throw InputError(source_ + ": missing key '" + prefix_ + key + "'");
    return *it;
  }
  bool has(const char* key) const { return object_.contains(key); }

  int integer(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_integer()) type_error(key, "an integer", v);
    const auto x = v.get<long long>();
    if (x < INT32_MIN || x > INT32_MAX) type_error(key, "a 32-bit integer", v);
    return static_cast<int>(x);
  }
  int integer_or(const char* key, int fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) type_error(key, "a number", v);
    return v.get<double>();
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) type_error(key, "a string", v);
    return v.get<std::string>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) type_error(key, "true or false", v);
    return v.get<bool>();
  }
  std::vector<int> integers(const char* key) const {
    const json& v = at(key);
    if (!v.is_array()) type_error(key, "an array of integers", v);
    std::vector<int> out;
    for (const json& x : v) {
      if (!x.is_number_integer()) type_error(key, "an array of integers", v);
      out.push_back(x.get<int>());
    }
    return out;
  }
  Reader object(const char* key) const {
    const json& v = at(key);
    if (!v.is_object()) type_error(key, "an object", v);
    return Reader(v, source_, prefix_ + key + ".");
  }

 private:
  [[noreturn]] void type_error(const char* key, const char* expected, const json& v) const {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
    throw InputError(source_ + ": key '" + prefix_ + key + "' is " + shown + ", expected " +
                     expected);
  }
  const json& object_;
  std::string source_;
  std::string prefix_;
};

// Sizes and gated NoPE MLA, which a Kimi-K3 text config and a DSpark draft config share.
void read_shared_fields(const Reader& r, ModelConfig& c, const std::string& source) {
  c.hidden_size = r.integer("hidden_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.vocab_size = r.integer("vocab_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-5);
  if (r.has("hidden_act") && r.string("hidden_act") != "situ") {
    throw InputError(source + ": key 'hidden_act' is \"" + r.string("hidden_act") +
                     "\", expected \"situ\" (Kimi-K3)");
  }
  c.num_attention_heads = r.integer("num_attention_heads");
  c.q_lora_rank = r.integer("q_lora_rank");
  c.kv_lora_rank = r.integer("kv_lora_rank");
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim");
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim");
  c.v_head_dim = r.integer("v_head_dim");
  if (!r.boolean_or("mla_use_nope", true)) {
    throw InputError(source + ": mla_use_nope is false; Kimi-K3 MLA has no rotary embedding");
  }
}

}  // namespace

ModelConfig parse_config_json(const json& root, const std::string& source) {
  if (!root.is_object()) throw InputError(source + ": expected a JSON object");
  Reader top(root, source, "");
  const bool nested = top.has("text_config");
  Reader r = nested ? top.object("text_config") : top;
  ModelConfig c;
  c.model_type = r.has("model_type") ? r.string("model_type") : "kimi_linear";
  read_shared_fields(r, c, source);
  if (c.is_draft()) {
    c.draft_target_layers = r.integers("target_layer_ids");
    c.first_k_dense_replace = c.num_hidden_layers;
    // Every draft layer is MLA; an absurd count is left to validate() below, never sized here.
    if (c.num_hidden_layers <= ModelConfig::kMaxLayers)
      for (int l = 1; l <= c.num_hidden_layers; ++l) c.full_attn_layers.push_back(l);
    c.bos_token_id =
        r.integer_or("bos_token_id", c.vocab_size - ModelConfig::kReservedSpecialTokens);
    c.eos_token_id = r.integer_or("eos_token_id", c.bos_token_id + 2);
    c.pad_token_id = r.integer_or("pad_token_id", c.vocab_size - 1);
    c.validate(source);
    return c;
  }
  c.first_k_dense_replace = r.integer_or("first_k_dense_replace", 1);
  c.situ_beta = r.number_or("activation_situ_beta", 4.0);
  c.situ_linear_beta = r.number_or("activation_situ_linear_beta", 25.0);
  c.num_experts = r.integer("num_experts");
  c.num_experts_per_token = r.integer("num_experts_per_token");
  c.num_shared_experts = r.integer_or("num_shared_experts", 0);
  c.moe_intermediate_size = r.integer("moe_intermediate_size");
  c.routed_expert_hidden_size = r.integer("routed_expert_hidden_size");
  c.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
  c.attn_res_block_size = r.integer("attn_res_block_size");
  const Reader kda = r.object("linear_attn_config");
  c.kda_num_heads = kda.integer("num_heads");
  c.kda_head_dim = kda.integer("head_dim");
  c.kda_conv_kernel = kda.integer_or("short_conv_kernel_size", 4);
  c.kda_gate_lower_bound = kda.number_or("gate_lower_bound", -5.0);
  c.full_attn_layers = kda.integers("full_attn_layers");
  // Token ids live at the top level of the official release and in the text config of flat ones.
  const Reader& ids = top.has("eos_token_id") ? top : r;
  c.bos_token_id =
      ids.integer_or("bos_token_id", c.vocab_size - ModelConfig::kReservedSpecialTokens);
  c.eos_token_id = ids.integer_or("eos_token_id", c.bos_token_id + 2);
  c.pad_token_id = ids.integer_or("pad_token_id", c.vocab_size - 1);
  c.validate(source);
  return c;
}

ModelConfig read_config_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return read_json(text.str(), {path.string()},
                   [&](const json& root) { return parse_config_json(root, path.string()); });
}

namespace {

// The fields a Kimi-K3 text config and a DSpark draft config share: sizes and gated NoPE MLA.
json shared_config_json(const ModelConfig& c) {
  return {
      {"model_type", c.model_type},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"vocab_size", c.vocab_size},
      {"intermediate_size", c.intermediate_size},
      {"hidden_act", "situ"},
      {"rms_norm_eps", c.rms_norm_eps},
      {"num_attention_heads", c.num_attention_heads},
      {"q_lora_rank", c.q_lora_rank},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope_head_dim},
      {"qk_rope_head_dim", c.qk_rope_head_dim},
      {"v_head_dim", c.v_head_dim},
      {"mla_use_nope", true},
      {"mla_use_output_gate", true},
  };
}

}  // namespace

json to_config_json(const ModelConfig& c) {
  if (c.is_draft()) {
    json draft = shared_config_json(c);
    draft.update({
        {"architectures", {"K3DSparkModel"}},
        {"target_layer_ids", c.draft_target_layers},
        {"bos_token_id", c.bos_token_id},
        {"eos_token_id", c.eos_token_id},
        {"pad_token_id", c.pad_token_id},
        {"torch_dtype", "bfloat16"},
    });
    return draft;
  }
  json kda_layers = json::array();
  for (int l = 1; l <= c.num_hidden_layers; ++l) {
    if (!c.is_mla_layer(l - 1)) kda_layers.push_back(l);
  }
  json text = shared_config_json(c);
  text.update({
      {"architectures", {"KimiLinearForCausalLM"}},
      {"first_k_dense_replace", c.first_k_dense_replace},
      {"moe_layer_freq", 1},
      {"activation_situ_beta", c.situ_beta},
      {"activation_situ_linear_beta", c.situ_linear_beta},
      {"num_key_value_heads", c.num_attention_heads},
      {"num_experts", c.num_experts},
      {"num_experts_per_token", c.num_experts_per_token},
      {"num_shared_experts", c.num_shared_experts},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"routed_expert_hidden_size", c.routed_expert_hidden_size},
      {"latent_moe_use_norm", true},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", c.routed_scaling_factor},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"topk_method", "noaux_tc"},
      {"attn_res_block_size", c.attn_res_block_size},
      {"num_nextn_predict_layers", 0},
      {"tie_word_embeddings", false},
      {"linear_attn_config",
       {{"num_heads", c.kda_num_heads},
        {"head_dim", c.kda_head_dim},
        {"short_conv_kernel_size", c.kda_conv_kernel},
        {"gate_lower_bound", c.kda_gate_lower_bound},
        {"use_full_rank_gate", true},
        {"full_attn_layers", c.full_attn_layers},
        {"kda_layers", kda_layers}}},
  });
  return {
      {"architectures", {"KimiK3ForConditionalGeneration"}},
      {"model_type", "kimi_k3"},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_id},
      {"pad_token_id", c.pad_token_id},
      {"tie_word_embeddings", false},
      {"dtype", "bfloat16"},
      {"text_config", text},
  };
}

}  // namespace k3::model
