// config.json: read strictly (every missing key or wrong type named with the file) and written
// in the official release's layout, or in RadixArk/Kimi-K3-DSpark's for a draft.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/json.h"
#include "model/config.h"

namespace k3::model {

using nlohmann::json;

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
    const auto x = int32_of(v);
    if (!x) type_error(key, "a 32-bit integer", v);
    return *x;
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
  std::string string_or(const char* key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
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
      const auto i = int32_of(x);
      if (!i) type_error(key, "an array of 32-bit integers", v);
      out.push_back(*i);
    }
    return out;
  }
  Reader object(const char* key) const {
    const json& v = at(key);
    if (!v.is_object()) type_error(key, "an object", v);
    return Reader(v, source_, prefix_ + key + ".");
  }

  // An InputError naming the file and the key, for a value of the right type that is refused.
  [[noreturn]] void refuse(const char* key, const std::string& why) const {
    throw InputError(source_ + ": key '" + prefix_ + key + "' is " + shown(at(key)) + ", " + why);
  }

 private:
  // An integer's value when it fits 32 bits (an unsigned one above INT64_MAX included).
  static std::optional<int> int32_of(const json& v) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<unsigned long long>();
      if (u > static_cast<unsigned long long>(INT32_MAX)) return std::nullopt;
      return static_cast<int>(u);
    }
    const auto x = v.get<long long>();
    if (x < INT32_MIN || x > INT32_MAX) return std::nullopt;
    return static_cast<int>(x);
  }
  static std::string shown(const json& v) {
    std::string text = v.dump();
    if (text.size() > 40) text = text.substr(0, 40) + "...";
    return text;
  }
  [[noreturn]] void type_error(const char* key, const char* expected, const json& v) const {
    throw InputError(source_ + ": key '" + prefix_ + key + "' is " + shown(v) + ", expected " +
                     expected);
  }
  const json& object_;
  std::string source_;
  std::string prefix_;
};

// Sizes and gated NoPE MLA of a Kimi-K3 text config.
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

// Kimi-K3's switches with the one value the engine computes (the release's, docs/ENGINE.md "The
// math, piece by piece"): another value would be other math run silently, so it is refused.
void refuse_other_kimi_variants(const Reader& r) {
  auto fixed_bool = [&](const char* key, bool want, const char* why) {
    if (r.has(key) && r.boolean_or(key, want) != want)
      r.refuse(key, std::string("expected ") + (want ? "true" : "false") + ": " + why);
  };
  auto fixed_string = [&](const char* key, const char* want, const char* why) {
    if (r.has(key) && r.string(key) != want)
      r.refuse(key, std::string("expected \"") + want + "\": " + why);
  };
  auto fixed_integer = [&](const char* key, int want, const char* why) {
    if (r.has(key) && r.integer(key) != want)
      r.refuse(key, "expected " + std::to_string(want) + ": " + why);
  };
  fixed_string("moe_router_activation_func", "sigmoid", "the router's scores are sigmoids");
  fixed_bool("moe_renormalize", true, "the chosen experts' weights are renormalised");
  fixed_bool("latent_moe_use_norm", true,
             "the experts' weighted sum is RMS-normalised before the up projection");
  fixed_bool("mla_use_output_gate", true, "MLA's output is gated by g_proj");
  fixed_string("topk_method", "noaux_tc", "top-k of the scores plus the correction bias");
  fixed_integer("num_expert_group", 1, "one group: top-k over every expert");
  fixed_integer("topk_group", 1, "one group: top-k over every expert");
  fixed_integer("moe_layer_freq", 1, "every layer from first_k_dense_replace on is MoE");
  fixed_integer("num_nextn_predict_layers", 0, "no MTP head is implemented");
  if (r.has("routed_scaling_factor")) {
    const double f = r.number_or("routed_scaling_factor", 1.0);
    if (!(f > 0) || !std::isfinite(f)) r.refuse("routed_scaling_factor", "expected a number > 0");
  }
}

// The DSpark drafters k3eval does not read, refused by name before anything else is parsed.
void refuse_other_drafters(const Reader& top, const std::string& source) {
  if (top.has("speculators_model_type") && top.string("speculators_model_type") == "dspark") {
    top.refuse("speculators_model_type",
               "a checkpoint of the speculators convention (slot j predicts anchor + j, slot 0 "
               "masked), which SGLang refuses too: k3eval reads the DeepSpec / SpecForge "
               "convention (slot k predicts anchor + k + 1) of RadixArk/Kimi-K3-DSpark");
  }
  bool mla = top.has("model_type") && top.at("model_type") == "k3_dspark";
  if (top.has("architectures") && top.at("architectures").is_array()) {
    for (const json& a : top.at("architectures")) mla |= a == "K3DSparkModel";
  }
  if (mla) {
    throw InputError(source +
                     ": the MLA DSpark drafter (K3DSparkModel, model_type k3_dspark) is not "
                     "supported; k3eval reads the GQA drafter SGLang serves "
                     "(RadixArk/Kimi-K3-DSpark: architectures DSparkDraftModel, dflash_config)");
  }
}

// Every drafter layer attends to its whole context (the target's taps and the block): a
// `layer_types` list that does not name each layer once, a layer of another kind (a sliding
// window) or `use_sliding_window` would be math the drafter does not compute, so it is refused.
void refuse_other_layer_types(const Reader& top, int layers) {
  if (top.boolean_or("use_sliding_window", false))
    top.refuse("use_sliding_window", "expected false: every drafter layer is full attention");
  if (!top.has("layer_types")) return;
  const json& types = top.at("layer_types");
  if (!types.is_array()) top.refuse("layer_types", "expected an array of layer kinds");
  if (types.size() != static_cast<std::size_t>(std::max(layers, 0))) {
    top.refuse("layer_types", "with " + std::to_string(types.size()) +
                                  " entries, expected one per layer (num_hidden_layers = " +
                                  std::to_string(layers) + ")");
  }
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full_attention") {
      top.refuse("layer_types", "entry " + std::to_string(i) + " is " + types[i].dump() +
                                    ", expected \"full_attention\" (the only layer kind the "
                                    "drafter computes)");
    }
  }
}

// SGLang's DSpark drafter config (RadixArk/Kimi-K3-DSpark): a flat Qwen3 config with the
// drafter's keys in "dflash_config".
ModelConfig parse_draft_config(const Reader& top, const std::string& source) {
  ModelConfig c;
  DSparkConfig& d = c.dspark.emplace();
  const Reader dflash = top.object("dflash_config");
  if (const std::string mode = dflash.string_or("attention_mode", "gqa"); mode != "gqa") {
    dflash.refuse("attention_mode",
                  "expected \"gqa\": the MLA DSpark drafter (K3DSparkModel) is not supported");
  }
  if (const std::string head = dflash.string_or("markov_head_type", "vanilla"); head != "vanilla") {
    dflash.refuse("markov_head_type",
                  "expected \"vanilla\" (the gated and rnn Markov heads are not supported)");
  }
  c.model_type = top.string_or("model_type", "qwen3");
  if (top.has("hidden_act") && top.string("hidden_act") != "silu")
    top.refuse("hidden_act", "expected \"silu\" (the drafter's SwiGLU MLP)");
  // Qwen3's switches for biases the drafter's projections do not have (nor its checkpoint).
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (top.boolean_or(bias, false))
      top.refuse(bias, "expected false: the drafter's projections have no bias");
  c.hidden_size = top.integer("hidden_size");
  c.intermediate_size = top.integer("intermediate_size");
  c.num_hidden_layers = top.integer("num_hidden_layers");
  refuse_other_layer_types(top, c.num_hidden_layers);
  c.num_attention_heads = top.integer("num_attention_heads");
  d.num_key_value_heads = top.integer("num_key_value_heads");
  d.head_dim = top.integer("head_dim");
  c.rms_norm_eps = top.number("rms_norm_eps");
  c.vocab_size = top.integer("vocab_size");
  d.max_position_embeddings = top.integer("max_position_embeddings");
  d.block_size = top.integer_or("block_size", 7);
  const std::string stream = top.string_or("aux_hidden_stream", "attn_res");
  if (stream != "attn_res" && stream != "prefix")
    top.refuse("aux_hidden_stream", "expected \"attn_res\" or \"prefix\"");
  d.tap_attn_res = stream == "attn_res";
  // RoPE: rope_parameters (theta there or at the top level), YaRN or none.
  std::string rope_type = "default";
  if (top.has("rope_parameters")) {
    const Reader rope = top.object("rope_parameters");
    rope_type = rope.string_or("rope_type", "default");
    d.rope_theta = rope.has("rope_theta") ? rope.number("rope_theta") : top.number("rope_theta");
    if (rope_type == "yarn") {
      d.rope_factor = rope.number("factor");
      d.rope_original_max_position = rope.integer("original_max_position_embeddings");
      d.rope_beta_fast = rope.number_or("beta_fast", 32);
      d.rope_beta_slow = rope.number_or("beta_slow", 1);
    } else if (rope_type != "default") {
      rope.refuse("rope_type", "expected \"yarn\" or \"default\"");
    }
  } else {
    d.rope_theta = top.number("rope_theta");
  }
  d.mask_token_id = dflash.integer("mask_token_id");
  d.target_layer_ids = dflash.integers("target_layer_ids");
  d.markov_rank = dflash.integer("markov_rank");
  d.confidence_head = dflash.boolean_or("enable_confidence_head", false);
  d.confidence_with_markov = dflash.boolean_or("confidence_head_with_markov", true);
  c.validate(source);
  return c;
}

}  // namespace

ModelConfig parse_config_json(const json& root, const std::string& source) {
  if (!root.is_object()) throw InputError(source + ": expected a JSON object");
  Reader top(root, source, "");
  refuse_other_drafters(top, source);
  if (top.has("dflash_config")) return parse_draft_config(top, source);
  const bool nested = top.has("text_config");
  Reader r = nested ? top.object("text_config") : top;
  ModelConfig c;
  c.model_type = r.has("model_type") ? r.string("model_type") : "kimi_linear";
  read_shared_fields(r, c, source);
  refuse_other_kimi_variants(r);
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

// A Kimi-K3 text config's sizes and gated NoPE MLA.
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

// RadixArk/Kimi-K3-DSpark's layout.
json draft_config_json(const ModelConfig& c) {
  const DSparkConfig& d = *c.dspark;
  json rope = {{"rope_type", "default"}, {"rope_theta", d.rope_theta}};
  if (d.rope_factor != 1 || d.rope_original_max_position != 0) {
    rope = {{"rope_type", "yarn"},
            {"factor", d.rope_factor},
            {"original_max_position_embeddings", d.rope_original_max_position},
            {"rope_theta", d.rope_theta},
            {"beta_fast", d.rope_beta_fast},
            {"beta_slow", d.rope_beta_slow}};
  }
  return {
      {"architectures", {"DSparkDraftModel"}},
      {"model_type", c.model_type},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", d.num_key_value_heads},
      {"head_dim", d.head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", c.rms_norm_eps},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", d.max_position_embeddings},
      {"layer_types",
       std::vector<std::string>(static_cast<std::size_t>(c.num_hidden_layers), "full_attention")},
      {"rope_parameters", rope},
      {"block_size", d.block_size},
      {"aux_hidden_stream", d.tap_attn_res ? "attn_res" : "prefix"},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"dflash_config",
       {{"attention_mode", "gqa"},
        {"markov_rank", d.markov_rank},
        {"markov_head_type", "vanilla"},
        {"mask_token_id", d.mask_token_id},
        {"target_layer_ids", d.target_layer_ids},
        {"enable_confidence_head", d.confidence_head},
        {"confidence_head_with_markov", d.confidence_with_markov}}},
  };
}

}  // namespace

json to_config_json(const ModelConfig& c) {
  if (c.is_draft()) return draft_config_json(c);
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
