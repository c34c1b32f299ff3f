#include "model/checkpoint/checkpoint.h"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/fan_out.h"
#include "common/regex.h"
#include "common/json.h"
#include "common/large_json.h"
#include "model/checkpoint/file.h"
#include "model/checkpoint/gguf_names.h"

namespace k3::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& path) {
  const File file = File::open_read(path);
  std::string text(file.size(), '\0');
  file.read_exact(text.data(), text.size(), 0);
  return text;
}

// A large JSON file read into a buffer simdjson parses in place.
PaddedBuffer read_padded(const fs::path& path) {
  const File file = File::open_read(path);
  PaddedBuffer text(file.size());
  file.read_exact(text.data(), file.size(), 0);
  return text;
}

template <class Interpret>
decltype(auto) read_json_file(const fs::path& path, Interpret&& interpret) {
  return read_json(read_text(path), {path.string()}, std::forward<Interpret>(interpret));
}

bool is_gguf(const fs::path& p) { return p.extension() == ".gguf"; }

}  // namespace

std::string_view scheme_name(ModelSlimScheme scheme) {
  switch (scheme) {
    case ModelSlimScheme::kFloat:
      return "FLOAT";
    case ModelSlimScheme::kW8A8:
      return "W8A8";
    case ModelSlimScheme::kW8A8Dynamic:
      return "W8A8_DYNAMIC";
    case ModelSlimScheme::kW4A8Dynamic:
      return "W4A8_DYNAMIC";
  }
  return "?";
}

namespace {

ModelSlimDescription parse_description(std::string_view text, const std::string& source,
                                       LargeJson::Padding padding) {
  const LargeJson doc(text, {source}, padding);
  return interpret_large_json(source, [&] {
    simdjson::dom::object root;
    if (doc.root().get(root)) throw InputError(source + ": expected a JSON object");
    ModelSlimDescription d;
    d.schemes.reserve(root.size(), text.size());
    for (const auto field : root) {
      const std::string_view key = field.key;
      const simdjson::dom::element v = field.value;
      if (key == "group_size") {
        std::int64_t size = 0;
        if (!v.is<std::int64_t>() || v.get(size) || size < 0 || size > (1 << 20)) {
          throw InputError(source + ": group_size is " + simdjson::minify(v) +
                           ", expected a non-negative integer");
        }
        d.group_size = static_cast<int>(size);
      } else if (key == "version" || key == "model_quant_type") {
        std::string_view value;
        if (v.get(value)) {
          throw InputError(source + ": " + std::string(key) + " is " + simdjson::minify(v) +
                           ", expected a string");
        }
        (key == "version" ? d.version : d.model_quant_type) = std::string(value);
      } else if (std::string_view scheme; !v.get(scheme)) {
        static constexpr ModelSlimScheme kKnown[] = {
            ModelSlimScheme::kFloat, ModelSlimScheme::kW8A8, ModelSlimScheme::kW8A8Dynamic,
            ModelSlimScheme::kW4A8Dynamic};
        const auto known = std::find_if(std::begin(kKnown), std::end(kKnown),
                                        [&](ModelSlimScheme s) { return scheme_name(s) == scheme; });
        if (known == std::end(kKnown)) {
          throw InputError(source + ": '" + std::string(key) + "' has scheme '" +
                           std::string(scheme) +
                           "', expected FLOAT, W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC");
        }
        d.schemes.add(key, static_cast<std::uint32_t>(*known));
      }
      // Other keys (ignore lists, packed-module maps, metadata objects) carry no per-tensor
      // scheme.
    }
    return d;
  });
}

}  // namespace

ModelSlimDescription parse_modelslim_description(const std::string& text,
                                                 const std::string& source) {
  return parse_description(text, source, LargeJson::Padding::kCopy);
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
  const bool description = fs::exists(path / "quant_model_description.json");
  if ((safetensors || description) && !fs::exists(path / "config.json")) {
    throw InputError(path.string() + ": " +
                     (safetensors ? ".safetensors shards" : "quant_model_description.json") +
                     " but no config.json (the model's configuration)");
  }
  if (description) return FormatKind::kModelSlim;
  if (safetensors) {
    // SGLang's DSpark drafter keeps its own keys in a "dflash_config" object.
    const bool draft = read_json_file(path / "config.json", [](const json& cfg) {
      return cfg.is_object() && cfg.contains("dflash_config") && cfg["dflash_config"].is_object();
    });
    return draft ? FormatKind::kDraft : FormatKind::kHf;
  }
  if (gguf) return FormatKind::kGguf;
  throw InputError(path.string() +
                   ": no checkpoint found (expected config.json with .safetensors "
                   "shards, quant_model_description.json, or .gguf files)");
}

std::vector<fs::path> gguf_split_files(const fs::path& any) {
  static const Regex kSplit(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  const std::string name = any.filename().string();
  const auto m = kSplit.full_match(name);
  if (!m) return {any};
  const std::string stem((*m)[0]);
  const int count = std::stoi(std::string((*m)[2]));
  if (count < 1) throw InputError(any.string() + ": split count 0 in the file name");
  std::vector<fs::path> out;
  for (int i = 1; i <= count; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", i, count);
    const fs::path p = any.parent_path() / (stem + buf);
    if (!fs::exists(p)) {
      throw InputError("GGUF split " + std::to_string(i) + " of " + std::to_string(count) +
                       " is missing: " + p.string());
    }
    out.push_back(p);
  }
  return out;
}

ModelConfig config_from_gguf(const GgufFile& g,
                             const std::function<const TensorEntry*(std::string_view)>& find) {
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
  // llama.cpp's router switches: sigmoid gating (2) and renormalised weights are the math the
  // engine computes; llama.cpp requires the gating key and renormalises only when told, and a
  // scale of 0 means "no scaling" there.
  if (g.u32(k("expert_gating_func")) != 2) {
    throw InputError(g.path + ": kimi-k3.expert_gating_func is " +
                     std::to_string(g.u32(k("expert_gating_func"))) +
                     ", expected 2 (sigmoid; Kimi-K3's router)");
  }
  if (!g.has(k("expert_weights_norm")) || !g.boolean(k("expert_weights_norm"))) {
    throw InputError(g.path + ": kimi-k3.expert_weights_norm is " +
                     (g.has(k("expert_weights_norm")) ? "false" : "missing") +
                     ", expected true (Kimi-K3 renormalises the chosen experts' weights)");
  }
  if (g.has(k("expert_weights_scale"))) {
    const float scale = g.f32(k("expert_weights_scale"));
    if (!(scale >= 0) || !std::isfinite(scale)) {
      throw InputError(g.path + ": kimi-k3.expert_weights_scale is " + std::to_string(scale) +
                       ", expected a number >= 0 (0: no scaling)");
    }
    c.routed_scaling_factor = scale == 0 ? 1.0 : scale;
  }
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
    const TensorEntry* decay = find("blk." + std::to_string(l) + ".ssm_a");
    if (decay && !decay->shape.empty()) c.kda_num_heads = static_cast<int>(decay->shape.back());
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

// The shards of a safetensors checkpoint, and the index's weight map (tensor -> shard) when
// there is an index.
std::vector<std::string> safetensors_files(const fs::path& dir, PackedNames& weight_map) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    // Entries name a few hundred shards many thousand times: number the names first.
    std::unordered_map<std::string_view, std::size_t> shard_of_name;
    std::vector<std::string_view> names, first_tensor;  // per shard: its name, its first entry
    PackedNames entries;
    const PaddedBuffer text = read_padded(index);
    const LargeJson doc(text.view(), {index.string()}, LargeJson::Padding::kInPlace);
    interpret_large_json(index.string(), [&] {
      simdjson::dom::object map;
      if (doc.root()["weight_map"].get(map)) {
        throw InputError(index.string() + ": expected an object with a weight_map object");
      }
      entries.reserve(map.size(), text.view().size());
      for (const auto field : map) {
        std::string_view file;
        if (field.value.get(file)) {
          throw InputError(index.string() + ": weight_map['" + std::string(field.key) +
                           "'] is not a string");
        }
        if (file.empty() || file.find('/') != std::string_view::npos || file == "." ||
            file == "..") {
          throw InputError(index.string() + ": weight_map['" + std::string(field.key) +
                           "'] is '" + std::string(file) +
                           "', expected the file name of a shard in " + dir.string());
        }
        const auto [it, added] = shard_of_name.emplace(file, names.size());
        if (added) {
          names.push_back(file);
          first_tensor.push_back(field.key);
        }
        entries.add(field.key, static_cast<std::uint32_t>(it->second));
      }
      // Shards in name order, as a directory listing would give them.
      std::vector<std::size_t> order(names.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](std::size_t a, std::size_t b) { return names[a] < names[b]; });
      std::vector<std::size_t> position(names.size());
      for (std::size_t p = 0; p < order.size(); ++p) {
        position[order[p]] = p;
        files.push_back((dir / names[order[p]]).string());
      }
      for (std::size_t i = 0; i < entries.size(); ++i)
        entries.set_value(i, static_cast<std::uint32_t>(position[entries.value(i)]));
    });
    for (std::size_t n = 0; n < names.size(); ++n) {
      const fs::path f = dir / names[n];
      if (!fs::exists(f)) {
        throw InputError(index.string() + " lists shard " + f.string() + " (for '" +
                         std::string(first_tensor[n]) + "' and others), which does not exist");
      }
    }
    weight_map = std::move(entries);
  } else {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    // One file needs no index; several cannot be checked against each other without it.
    if (files.size() > 1) {
      throw InputError(dir.string() + ": " + std::to_string(files.size()) +
                       " .safetensors shards but no model.safetensors.index.json (a sharded "
                       "checkpoint's index says which shard holds each tensor)");
    }
  }
  if (files.empty()) throw InputError(dir.string() + ": no .safetensors shards");
  return files;
}

// A split's own split.no / split.count (llama.cpp's gguf-split keys) agree with its place among
// the files found: a renamed or mixed-up split would otherwise load the wrong tensors silently.
void check_split_keys(const GgufFile& g, std::size_t position, std::size_t count) {
  const bool has_no = g.has("split.no"), has_count = g.has("split.count");
  if (!has_no && !has_count) {
    if (count > 1) {
      throw InputError(g.path + ": split " + std::to_string(position + 1) + " of " +
                       std::to_string(count) + " by its file name, but it has no split.no / " +
                       "split.count keys");
    }
    return;
  }
  const auto number = [&](const char* key) {
    const GgufValue& v = g.at(key);
    if (!v.value.is_number_unsigned()) {
      throw InputError(g.path + ": GGUF key '" + key + "' is " +
                       std::string(gguf_type_name(v.type)) + ", expected an unsigned integer");
    }
    return v.value.get<std::uint64_t>();
  };
  const std::uint64_t no = has_no ? number("split.no") : 0;
  const std::uint64_t total = has_count ? number("split.count") : 1;
  if (total != count || no != position) {
    throw InputError(g.path + ": split.no " + std::to_string(no) + " of split.count " +
                     std::to_string(total) + ", but the file name makes it split " +
                     std::to_string(position) + " (0-based) of " + std::to_string(count));
  }
}

fs::path first_gguf_file(const fs::path& path) {
  if (!fs::is_directory(path)) return path;
  std::vector<fs::path> ggufs;
  for (const auto& e : fs::directory_iterator(path)) {
    if (is_gguf(e.path())) ggufs.push_back(e.path());
  }
  std::sort(ggufs.begin(), ggufs.end());
  if (ggufs.empty()) throw InputError(path.string() + ": --load-format gguf but no .gguf file");
  return ggufs.front();
}

}  // namespace

bool header_holds_config(FormatKind kind, std::size_t f) {
  return kind == FormatKind::kGguf && f == 0;
}

std::string Checkpoint::stored_name(const std::string& logical) const {
  if (format_.kind() == FormatKind::kGguf) return gguf_name(logical, config_);
  return prefix_ + logical;
}

bool Checkpoint::holds_model_tensor(const std::string& name) const {
  if (format_.kind() == FormatKind::kGguf || format_.kind() == FormatKind::kDraft) return true;
  if (name.rfind(prefix_, 0) != 0) return false;
  // Without a prefix (a flat export) the text model's names start with "model." or "lm_head.".
  return !prefix_.empty() || name.rfind("model.", 0) == 0 || name.rfind("lm_head.", 0) == 0;
}

std::vector<std::string> header_files(const fs::path& path, FormatKind kind) {
  std::vector<std::string> files;
  if (kind == FormatKind::kGguf) {
    for (const fs::path& part : gguf_split_files(first_gguf_file(path)))
      files.push_back(part.string());
    return files;
  }
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return files;
  for (const auto& e : fs::directory_iterator(path)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

Checkpoint Checkpoint::discover(const fs::path& path, std::optional<FormatKind> load_format) {
  const FormatKind kind = load_format ? *load_format : detect_format(path);
  Checkpoint ck(Format::of(kind));
  ck.root_ = path.string();
  if (kind == FormatKind::kGguf) {
    for (const fs::path& part : gguf_split_files(first_gguf_file(path)))
      ck.files_.push_back(part.string());
    return ck;  // the config lives in the first file's header
  }
  if (!fs::is_directory(path)) {
    throw InputError(path.string() + ": --load-format " + std::string(format_name(kind)) +
                     " needs a checkpoint directory");
  }
  ck.files_ = safetensors_files(path, ck.weight_map_);
  ck.config_ = read_config_json(path / "config.json");
  if (ck.config_.is_draft() != (kind == FormatKind::kDraft)) {
    throw InputError((path / "config.json").string() +
                     (ck.config_.is_draft()
                          ? ": a DSpark draft's config (it has a dflash_config)"
                          : ": a Kimi-K3 model's config (no dflash_config, not a DSpark draft)") +
                     " does not fit --load-format " + std::string(format_name(kind)));
  }
  if (kind == FormatKind::kModelSlim) {
    const fs::path d = path / "quant_model_description.json";
    ck.modelslim_ =
        parse_description(read_padded(d).view(), d.string(), LargeJson::Padding::kInPlace);
  }
  return ck;
}

ShardHeader Checkpoint::read_shard_header(std::size_t file) const {
  if (file >= files_.size())
    throw InternalError("read_shard_header: no file " + std::to_string(file));
  ShardHeader h;
  if (format_.kind() == FormatKind::kGguf) {
    GgufFile g = read_gguf_header(files_[file]);
    check_split_keys(g, file, files_.size());
    h.tensors = std::move(g.tensors);
    g.tensors.clear();
    if (file == 0) h.gguf = std::move(g);
  } else {
    h.tensors = read_safetensors_header(files_[file]).tensors;
  }
  return h;
}

void Checkpoint::add_headers(std::vector<ShardHeader> headers) {
  if (headers.size() != files_.size()) {
    throw InternalError("add_headers: " + std::to_string(headers.size()) + " headers for " +
                        std::to_string(files_.size()) + " files");
  }
  std::size_t count = 0;
  for (const ShardHeader& h : headers) count += h.tensors.size();
  if (count >= std::numeric_limits<std::uint32_t>::max()) {
    throw InputError(root_ + ": " + std::to_string(count) + " tensors; at most 2^32 - 1 are read");
  }
  tensors_.clear();
  tensors_.reserve(count);  // no reallocation below: by_name_ views the names in place
  for (std::size_t i = 0; i < headers.size(); ++i) {
    for (TensorEntry& t : headers[i].tensors) {
      tensor_bytes_ += t.nbytes;
      tensors_.push_back(StoredTensor{i, std::move(t)});
    }
    headers[i].tensors = {};
  }
  by_name_.clear();
  by_name_.reserve(count);
  for (std::size_t n = 0; n < tensors_.size(); ++n) {
    const auto [it, inserted] =
        by_name_.emplace(tensors_[n].entry.name, static_cast<std::uint32_t>(n));
    if (!inserted) {
      throw InputError("tensor '" + tensors_[n].entry.name + "' is stored twice: in " +
                       files_[tensors_[it->second].file] + " and " + files_[tensors_[n].file]);
    }
  }
  if (format_.kind() == FormatKind::kGguf) {
    if (!headers.front().gguf)
      throw InternalError("add_headers: the first GGUF file's metadata is missing");
    config_ = config_from_gguf(*headers.front().gguf, [this](std::string_view name) {
      const StoredTensor* t = find(name);
      return t ? &t->entry : nullptr;
    });
    gguf_ = std::move(headers.front().gguf);
  } else {
    // The index and the shards agree in both directions: every entry of the weight_map names
    // a tensor that its shard really holds, and every stored tensor has an entry. The first
    // disagreement is reported.
    const std::string index = (fs::path(root_) / "model.safetensors.index.json").string();
    const bool indexed = !weight_map_.empty();  // a single shard may come without an index
    std::vector<std::uint8_t> listed(tensors_.size(), 0);
    std::atomic<std::size_t> first_wrong{weight_map_.size()};
    fan_out(weight_map_.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t e = begin; e < end; ++e) {
        const StoredTensor* t = find(weight_map_.name(e));
        if (t && t->file == weight_map_.value(e)) {
          std::atomic_ref<std::uint8_t>(listed[ordinal(*t)]).store(1, std::memory_order_relaxed);
          continue;
        }
        std::size_t seen = first_wrong.load();
        while (e < seen && !first_wrong.compare_exchange_weak(seen, e)) {
        }
        return;
      }
    });
    if (const std::size_t e = first_wrong.load(); e < weight_map_.size()) {
      const std::string_view tensor = weight_map_.name(e);
      const std::size_t file = weight_map_.value(e);
      const StoredTensor* t = find(tensor);
      throw InputError(index + ": weight_map puts '" + std::string(tensor) + "' in " +
                       files_[file] +
                       (!t ? ", but no shard holds it" : ", but it is in " + files_[t->file]));
    }
    if (indexed) {
      const auto unlisted = std::find(listed.begin(), listed.end(), std::uint8_t{0});
      if (unlisted != listed.end()) {
        const StoredTensor& t = tensors_[static_cast<std::size_t>(unlisted - listed.begin())];
        throw InputError(index + ": weight_map has no entry for '" + t.entry.name + "', which " +
                         files_[t.file] + " holds");
      }
    }
    weight_map_.clear();
    // ModelSlim stores a weight_offset beside each integer weight; the official release never
    // does. Without its description such a checkpoint is detected as hf and every integer
    // weight would be reported one by one: say what is missing instead.
    if (format_.kind() == FormatKind::kHf) {
      constexpr std::string_view kOffset = ".weight_offset";
      for (const StoredTensor& t : tensors_) {
        if (t.entry.name.ends_with(kOffset)) {
          throw InputError(root_ + ": '" + t.entry.name + "' in " + files_[t.file] +
                           " is a ModelSlim weight_offset, but quant_model_description.json is "
                           "missing (a ModelSlim checkpoint needs its description)");
        }
      }
    }
    // The official release names everything under "language_model."; accept flat exports too.
    prefix_ = find("language_model.model.embed_tokens.weight") ? "language_model." : "";
  }
  join_modelslim_schemes();
  // No stored form packs a weight into fewer than 2 bits (Q2_K takes 2.625): a config that
  // declares more weights than the tensors can hold names counts the files do not have.
  constexpr double kLeastBitsPerWeight = 2.0;
  const double least_bytes = config_.least_parameter_count() * kLeastBitsPerWeight / 8;
  if (least_bytes > static_cast<double>(tensor_bytes_)) {
    const std::string source = format_.kind() == FormatKind::kGguf
                                   ? files_.front()
                                   : (fs::path(root_) / "config.json").string();
    char text[256];
    std::snprintf(text, sizeof text,
                  ": the config declares at least %.3g weights (%.3f GiB at %.0f bits each), but "
                  "the %zu tensors hold %.3f GiB; a layer, expert or head count is far beyond "
                  "what the checkpoint stores",
                  config_.least_parameter_count(), least_bytes / double(1ull << 30),
                  kLeastBitsPerWeight, tensors_.size(),
                  static_cast<double>(tensor_bytes_) / double(1ull << 30));
    throw InputError(source + text);
  }
}

Checkpoint Checkpoint::open(const fs::path& path, std::optional<FormatKind> load_format) {
  Checkpoint ck = discover(path, load_format);
  // Every header in parallel (351 shards must take seconds, not minutes); the first failing
  // file in order is reported, deterministically.
  std::vector<ShardHeader> headers(ck.files().size());
  std::vector<std::string> errors(ck.files().size());
  oneapi::tbb::parallel_for(std::size_t{0}, ck.files().size(), [&](std::size_t i) {
    try {
      headers[i] = ck.read_shard_header(i);
    } catch (const Error& e) {
      errors[i] = e.what();
    }
  });
  for (const auto& e : errors) {
    if (!e.empty()) throw InputError(e);
  }
  ck.add_headers(std::move(headers));
  return ck;
}

Checkpoint Checkpoint::view(std::string root, FormatKind kind, ModelConfig config,
                            std::vector<std::string> files, std::string name_prefix) {
  Checkpoint ck(Format::of(kind));
  ck.root_ = std::move(root);
  ck.config_ = std::move(config);
  ck.files_ = std::move(files);
  ck.prefix_ = std::move(name_prefix);
  return ck;
}

const StoredTensor* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void Checkpoint::join_modelslim_schemes() {
  scheme_codes_.clear();
  absent_schemes_.clear();
  if (!modelslim_) return;
  scheme_codes_.assign(tensors_.size(), kNoScheme);
  const PackedNames& schemes = modelslim_->schemes;
  // The lookups on the node's cores; the codes in file order, so a repeated name's last wins.
  constexpr std::uint32_t kAbsent = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> ordinals(schemes.size(), kAbsent);
  fan_out(schemes.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t e = begin; e < end; ++e) {
      if (const StoredTensor* t = find(schemes.name(e)))
        ordinals[e] = static_cast<std::uint32_t>(ordinal(*t));
    }
  });
  for (std::size_t e = 0; e < schemes.size(); ++e) {
    const auto scheme = static_cast<ModelSlimScheme>(schemes.value(e));
    if (ordinals[e] != kAbsent) {
      scheme_codes_[ordinals[e]] = static_cast<std::uint8_t>(scheme);
    } else {
      absent_schemes_.insert_or_assign(std::string(schemes.name(e)), scheme);
    }
  }
}

std::optional<ModelSlimScheme> Checkpoint::scheme_of(const StoredTensor& t) const {
  if (scheme_codes_.empty()) return std::nullopt;
  const std::uint8_t code = scheme_codes_[ordinal(t)];
  if (code == kNoScheme) return std::nullopt;
  return static_cast<ModelSlimScheme>(code);
}

std::optional<ModelSlimScheme> Checkpoint::scheme_of(std::string_view weight_name) const {
  if (const StoredTensor* t = find(weight_name)) return scheme_of(*t);
  const auto it = absent_schemes_.find(std::string(weight_name));
  if (it == absent_schemes_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<std::string, ModelSlimScheme>> Checkpoint::schemes_of_absent_tensors() const {
  std::vector<std::pair<std::string, ModelSlimScheme>> out(absent_schemes_.begin(),
                                                           absent_schemes_.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t Checkpoint::tensor_bytes() const { return tensor_bytes_; }

}  // namespace k3::model
