#include "model/synth/synth.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json.h"
#include "model/checkpoint/synth_writers.h"
#include "model/synth/writer.h"

namespace k3::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The config fields k3ckpt synth --set changes by name ("vocab", the base vocabulary, sets the
// special tokens too); `depth`: the MLA layers follow (Kimi-K3's pattern).
struct SettableField {
  const char* name;
  int ModelConfig::*field;
  bool depth;
};
constexpr SettableField kSettable[] = {
    {"hidden_size", &ModelConfig::hidden_size, false},
    {"num_hidden_layers", &ModelConfig::num_hidden_layers, true},
    {"attn_res_block_size", &ModelConfig::attn_res_block_size, true},
    {"num_attention_heads", &ModelConfig::num_attention_heads, false},
    {"kda_num_heads", &ModelConfig::kda_num_heads, false},
    {"num_experts", &ModelConfig::num_experts, false},
    {"num_experts_per_token", &ModelConfig::num_experts_per_token, false},
    {"routed_expert_hidden_size", &ModelConfig::routed_expert_hidden_size, false},
    {"moe_intermediate_size", &ModelConfig::moe_intermediate_size, false},
    {"intermediate_size", &ModelConfig::intermediate_size, false},
};

// Applies `key` = `value`; true when the layer pattern must follow.
bool set_field(ModelConfig& cfg, const std::string& key, int value) {
  for (const SettableField& f : kSettable) {
    if (key != f.name) continue;
    cfg.*f.field = value;
    return f.depth;
  }
  if (key != "vocab") {
    std::string names;
    for (const SettableField& f : kSettable) names += std::string(f.name) + ", ";
    throw UsageError("--set " + key + ": not a synthesizable config field (" + names + "vocab)");
  }
  cfg.vocab_size = value + ModelConfig::kReservedSpecialTokens;
  cfg.bos_token_id = value;
  cfg.eos_token_id = value + 2;
  cfg.pad_token_id = value + ModelConfig::kReservedSpecialTokens - 1;
  return false;
}

// The preset's target with the --set changes (SynthOptions::overrides), validated. A draft goes
// with this target and is derived from its weights.
ModelConfig target_config(const SynthOptions& o) {
  ModelConfig cfg = preset_config(o.preset);
  bool depth_changed = false;
  for (const auto& [key, value] : o.overrides) depth_changed |= set_field(cfg, key, value);
  if (depth_changed && cfg.num_hidden_layers > 0 && cfg.attn_res_block_size > 0) {
    // Keep Kimi-K3's pattern: MLA every attn_res_block_size-th layer and the last one.
    cfg.full_attn_layers.clear();
    for (int l = cfg.attn_res_block_size; l < cfg.num_hidden_layers; l += cfg.attn_res_block_size)
      cfg.full_attn_layers.push_back(l);
    cfg.full_attn_layers.push_back(cfg.num_hidden_layers);
  }
  cfg.validate("k3ckpt synth --preset " + o.preset);
  return cfg;
}

}  // namespace

SynthSummary synthesize_checkpoint(const SynthOptions& o) {
  if (o.shards < 1) throw UsageError("--shards " + std::to_string(o.shards) + " must be >= 1");
  const ModelConfig target = target_config(o);
  if (o.mutant) {
    if (o.header_only) throw UsageError("a mutant needs tensor values; drop --header-only");
    synth::MutationEffect(*o.mutant, target, o.format);  // refuses a mutant the format lacks
  }
  return synth_writer(o.format).write(o, target);
}

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

}  // namespace k3::model
