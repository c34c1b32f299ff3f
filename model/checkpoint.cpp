#include "model/checkpoint.h"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "common/json.h"

namespace k3::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <class Interpret>
decltype(auto) read_json_file(const fs::path& path, Interpret&& interpret) {
  return read_json(read_text(path), {path.string()}, std::forward<Interpret>(interpret));
}

bool is_gguf(const fs::path& p) { return p.extension() == ".gguf"; }

}  // namespace

std::string ModelSlimDescription::scheme_of(const std::string& weight_name) const {
  auto it = schemes.find(weight_name);
  return it == schemes.end() ? "" : it->second;
}

ModelSlimDescription parse_modelslim_description(const std::string& text,
                                                 const std::string& source) {
  return read_json(text, {source}, [&](const json& root) {
    if (!root.is_object()) throw InputError(source + ": expected a JSON object");
    ModelSlimDescription d;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string& key = it.key();
      const json& v = it.value();
      if (key == "group_size") {
        if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > (1 << 20)) {
          throw InputError(source + ": group_size is " + v.dump() +
                           ", expected a non-negative integer");
        }
        d.group_size = v.get<int>();
      } else if (key == "version" || key == "model_quant_type") {
        if (!v.is_string())
          throw InputError(source + ": " + key + " is " + v.dump() + ", expected a string");
        (key == "version" ? d.version : d.model_quant_type) = v.get<std::string>();
      } else if (v.is_string()) {
        const std::string s = v.get<std::string>();
        static const char* kKnown[] = {"FLOAT", "W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC"};
        if (std::find(std::begin(kKnown), std::end(kKnown), s) == std::end(kKnown)) {
          throw InputError(source + ": '" + key + "' has scheme '" + s +
                           "', expected FLOAT, W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC");
        }
        d.schemes[key] = s;
      }
      // Other keys (ignore lists, packed-module maps, metadata objects) carry no per-tensor scheme.
    }
    return d;
  });
}

FormatKind detect_format(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError("checkpoint " + path.string() + " does not exist");
  if (fs::is_regular_file(path, ec)) {
    if (is_gguf(path)) return FormatKind::kGguf;
    throw InputError(path.string() +
                     ": a checkpoint file must be .gguf; pass a directory for safetensors");
  }
  bool gguf = false, safetensors = false;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    gguf |= is_gguf(e.path());
    safetensors |= e.path().extension() == ".safetensors";
  }
  if (fs::exists(path / "quant_model_description.json")) return FormatKind::kModelSlim;
  if (safetensors && fs::exists(path / "config.json")) {
    const std::string type = read_json_file(path / "config.json", [](const json& cfg) {
      return cfg.is_object() && cfg.contains("model_type") && cfg["model_type"].is_string()
                 ? cfg["model_type"].get<std::string>()
                 : std::string();
    });
    if (type.find("dspark") != std::string::npos) return FormatKind::kDraft;
    return FormatKind::kHf;
  }
  if (gguf) return FormatKind::kGguf;
  throw InputError(path.string() +
                   ": no checkpoint found (expected config.json with .safetensors "
                   "shards, quant_model_description.json, or .gguf files)");
}

std::vector<fs::path> gguf_split_files(const fs::path& any) {
  static const std::regex kSplit(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  const std::string name = any.filename().string();
  if (!std::regex_match(name, m, kSplit)) return {any};
  const int count = std::stoi(m[3].str());
  if (count < 1) throw InputError(any.string() + ": split count 0 in the file name");
  std::vector<fs::path> out;
  for (int i = 1; i <= count; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", i, count);
    const fs::path p = any.parent_path() / (m[1].str() + buf);
    if (!fs::exists(p)) {
      throw InputError("GGUF split " + std::to_string(i) + " of " + std::to_string(count) +
                       " is missing: " + p.string());
    }
    out.push_back(p);
  }
  return out;
}

ModelConfig config_from_gguf(const GgufFile& g,
                             const std::map<std::string, StoredTensor>& tensors) {
  const std::string arch = g.string("general.architecture");
  if (arch != "kimi-k3") {
    throw InputError(g.path + ": general.architecture is '" + arch + "', expected 'kimi-k3'");
  }
  auto k = [](const char* key) { return std::string("kimi-k3.") + key; };
  ModelConfig c;
  c.hidden_size = static_cast<int>(g.u32(k("embedding_length")));
  c.num_hidden_layers = static_cast<int>(g.u32(k("block_count")));
  c.intermediate_size = static_cast<int>(g.u32(k("feed_forward_length")));
  c.first_k_dense_replace = static_cast<int>(g.u32(k("leading_dense_block_count")));
  c.rms_norm_eps = g.f32(k("attention.layer_norm_rms_epsilon"));
  c.num_attention_heads = static_cast<int>(g.u32(k("attention.head_count")));
  c.q_lora_rank = static_cast<int>(g.u32(k("attention.q_lora_rank")));
  c.kv_lora_rank = static_cast<int>(g.u32(k("attention.kv_lora_rank")));
  c.qk_rope_head_dim = static_cast<int>(g.u32(k("rope.dimension_count")));
  c.qk_nope_head_dim = static_cast<int>(g.u32(k("attention.key_length_mla"))) - c.qk_rope_head_dim;
  c.v_head_dim = static_cast<int>(g.u32(k("attention.value_length_mla")));
  c.num_experts = static_cast<int>(g.u32(k("expert_count")));
  c.num_experts_per_token = static_cast<int>(g.u32(k("expert_used_count")));
  c.num_shared_experts = static_cast<int>(g.u32(k("expert_shared_count")));
  c.moe_intermediate_size = static_cast<int>(g.u32(k("expert_feed_forward_length")));
  c.routed_expert_hidden_size = static_cast<int>(g.u32(k("expert_latent_length")));
  if (g.has(k("expert_weights_scale"))) c.routed_scaling_factor = g.f32(k("expert_weights_scale"));
  c.attn_res_block_size = static_cast<int>(g.u32(k("attn_res.block_size")));
  c.situ_beta = g.f32(k("activation.situ_beta"));
  c.situ_linear_beta = g.f32(k("activation.situ_linear_beta"));
  c.kda_conv_kernel = static_cast<int>(g.u32(k("ssm.conv_kernel")));
  c.kda_head_dim = static_cast<int>(g.u32(k("kda.head_dim")));
  if (g.has(k("kda.gate_lower_bound"))) c.kda_gate_lower_bound = g.f32(k("kda.gate_lower_bound"));
  const auto kv_heads = g.integers(k("attention.head_count_kv"));
  if (static_cast<int>(kv_heads.size()) != c.num_hidden_layers) {
    throw InputError(g.path + ": kimi-k3.attention.head_count_kv has " +
                     std::to_string(kv_heads.size()) + " entries for " +
                     std::to_string(c.num_hidden_layers) + " layers");
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (kv_heads[l] != 0) c.full_attn_layers.push_back(l + 1);  // 0 marks a KDA layer
  }
  // The KDA head count is not a key of its own: read it off a KDA layer's decay vector.
  c.kda_num_heads = 0;
  for (int l = 0; l < c.num_hidden_layers && c.kda_num_heads == 0; ++l) {
    auto it = tensors.find("blk." + std::to_string(l) + ".ssm_a");
    if (it != tensors.end() && !it->second.entry.shape.empty()) {
      c.kda_num_heads = static_cast<int>(it->second.entry.shape.back());
    }
  }
  const auto tokens = g.at("tokenizer.ggml.tokens");
  c.vocab_size = static_cast<int>(tokens.value.size());
  if (g.has(k("vocab_size"))) c.vocab_size = static_cast<int>(g.u32(k("vocab_size")));
  c.bos_token_id = g.has("tokenizer.ggml.bos_token_id")
                       ? static_cast<int>(g.u32("tokenizer.ggml.bos_token_id"))
                       : c.vocab_size - ModelConfig::kReservedSpecialTokens;
  c.eos_token_id = g.has("tokenizer.ggml.eos_token_id")
                       ? static_cast<int>(g.u32("tokenizer.ggml.eos_token_id"))
                       : c.bos_token_id + 2;
  c.pad_token_id = g.has("tokenizer.ggml.padding_token_id")
                       ? static_cast<int>(g.u32("tokenizer.ggml.padding_token_id"))
                       : c.vocab_size - 1;
  c.validate(g.path);
  return c;
}

namespace {

// Reads every safetensors header in parallel (351 shards must take seconds, not minutes) and
// indexes the tensors; a name in two shards is an error naming both.
void index_safetensors(const std::vector<std::string>& files,
                       std::map<std::string, StoredTensor>& out) {
  std::vector<SafetensorsHeader> headers(files.size());
  std::vector<std::string> errors(files.size());
  oneapi::tbb::parallel_for(std::size_t{0}, files.size(), [&](std::size_t i) {
    try {
      headers[i] = read_safetensors_header(files[i]);
    } catch (const Error& e) {
      errors[i] = e.what();
    }
  });
  for (const auto& e : errors) {
    if (!e.empty()) throw InputError(e);  // the first shard in order, deterministically
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    for (auto& t : headers[i].tensors) {
      auto [it, inserted] = out.emplace(t.name, StoredTensor{i, t});
      if (!inserted) {
        throw InputError("tensor '" + t.name + "' is stored twice: in " + files[it->second.file] +
                         " and " + files[i]);
      }
    }
  }
}

std::vector<std::string> safetensors_files(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    read_json_file(index, [&](const json& j) {
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
        throw InputError(index.string() + ": expected an object with a weight_map object");
      }
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          throw InputError(index.string() + ": weight_map['" + it.key() + "'] is not a string");
        const std::string f = (dir / it.value().get<std::string>()).string();
        if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
      }
    });
    for (const auto& f : files) {
      if (!fs::exists(f))
        throw InputError(index.string() + " lists shard " + f + ", which does not exist");
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw InputError(dir.string() + ": no .safetensors shards");
  return files;
}

// Every entry of the index's weight_map names a tensor that its shard really holds.
void check_weight_map(const fs::path& dir, const std::map<std::string, StoredTensor>& tensors,
                      const std::vector<std::string>& files) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) return;
  read_json_file(index, [&](const json& j) {
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      auto t = tensors.find(it.key());
      const std::string f = (dir / it.value().get<std::string>()).string();
      if (t == tensors.end() || files[t->second.file] != f) {
        throw InputError(index.string() + ": weight_map puts '" + it.key() + "' in " + f +
                         (t == tensors.end() ? ", but no shard holds it"
                                             : ", but it is in " + files[t->second.file]));
      }
    }
  });
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& path, std::optional<FormatKind> load_format) {
  const FormatKind kind = load_format ? *load_format : detect_format(path);
  Checkpoint ck(Format::of(kind));
  ck.root_ = path.string();
  if (kind == FormatKind::kGguf) {
    fs::path first = path;
    if (fs::is_directory(path)) {
      std::vector<fs::path> ggufs;
      for (const auto& e : fs::directory_iterator(path)) {
        if (is_gguf(e.path())) ggufs.push_back(e.path());
      }
      std::sort(ggufs.begin(), ggufs.end());
      if (ggufs.empty()) throw InputError(path.string() + ": --load-format gguf but no .gguf file");
      first = ggufs.front();
    }
    const auto parts = gguf_split_files(first);
    std::vector<GgufFile> headers(parts.size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      headers[i] = read_gguf_header(parts[i]);
      ck.files_.push_back(parts[i].string());
      for (auto& t : headers[i].tensors) {
        auto [it, inserted] = ck.tensors_.emplace(t.name, StoredTensor{i, t});
        if (!inserted) {
          throw InputError("tensor '" + t.name + "' is stored twice: in " +
                           ck.files_[it->second.file] + " and " + parts[i].string());
        }
      }
    }
    ck.config_ = config_from_gguf(headers.front(), ck.tensors_);
    ck.gguf_ = std::move(headers.front());
    return ck;
  }
  if (!fs::is_directory(path)) {
    throw InputError(path.string() + ": --load-format " + std::string(format_name(kind)) +
                     " needs a checkpoint directory");
  }
  ck.files_ = safetensors_files(path);
  index_safetensors(ck.files_, ck.tensors_);
  check_weight_map(path, ck.tensors_, ck.files_);
  ck.config_ = read_config_json(path / "config.json");
  if (ck.config_.is_draft() != (kind == FormatKind::kDraft)) {
    throw InputError((path / "config.json").string() + ": model_type '" + ck.config_.model_type +
                     "' does not fit --load-format " + std::string(format_name(kind)));
  }
  if (kind == FormatKind::kModelSlim) {
    const fs::path d = path / "quant_model_description.json";
    ck.modelslim_ = parse_modelslim_description(read_text(d), d.string());
  }
  // The official release names everything under "language_model."; accept flat exports too.
  ck.prefix_ =
      ck.tensors_.count("language_model.model.embed_tokens.weight") ? "language_model." : "";
  return ck;
}

const StoredTensor* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::uint64_t Checkpoint::tensor_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [name, t] : tensors_) total += t.entry.nbytes;
  return total;
}

}  // namespace k3::model
