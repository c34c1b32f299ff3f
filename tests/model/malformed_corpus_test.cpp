// The project's corpus of malformed checkpoints: each case damages a private
// copy of a tiny synthetic checkpoint in one way, as a broken converter, a partial copy, a
// lying header or a hand edit would, in every format (hf, ModelSlim, GGUF, draft). The whole
// pre-flight of one rank (open, the data-free checks, bind and plan; then load and audit; the
// tokenizer, as k3eval --plan-only / --load-only and k3ckpt plan run it) must refuse it with
// one InputError (exit code 2) whose message names the damaged file, tensor or key and says
// what was expected. An accepted case, any other exception, or a crash fails; the sanitizer
// stage of tests/run.sh runs the corpus too. Every case's time is printed (target: < 1 s).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/layout.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/gguf.h"
#include "model/load/pipeline.h"
#include "tests/model/checkpoint_edits.h"
#include "tests/model/test_dirs.h"

namespace k3::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::edit_header;
using test::edit_json;
using test::read_bytes;
using test::shard_holding;
using test::write_bytes;

// ------------------------------------------------------------------------------------ files

void patch(const fs::path& p, std::size_t at, const std::string& bytes) {
  std::string s = read_bytes(p);
  s.replace(at, bytes.size(), bytes);
  write_bytes(p, s);
}

void truncate_by(const fs::path& p, std::size_t bytes) {
  std::string s = read_bytes(p);
  s.resize(s.size() - bytes);
  write_bytes(p, s);
}

std::string le(std::uint64_t v, std::size_t bytes) {
  std::string s(bytes, '\0');
  std::memcpy(s.data(), &v, bytes);
  return s;
}

// The source of every case: the fixture's tiny checkpoint of `kind` (ctest's synth_tiny
// fixtures make them first; a test binary run on its own makes them here).
fs::path fixture(FormatKind kind) {
  if (kind != FormatKind::kDraft) return test::synthetic_checkpoint(kind);
  const fs::path dir = test::scratch_dir() / "tiny-draft";
  if (!fs::exists(dir / "config.json")) {
    SynthOptions o;
    o.format = FormatKind::kDraft;
    o.out = dir;
    o.shards = 3;
    o.corpus = test::source_dir() / ".." / "shared" / "data" / "gsm8k" / "train.jsonl";
    synthesize_checkpoint(o);
  }
  return dir;
}

// --------------------------------------------------------------------------- safetensors

const char* const kIndex = "model.safetensors.index.json";

void edit_tensor(const fs::path& dir, const std::string& tensor,
                 const std::function<void(json&)>& edit) {
  edit_header(shard_holding(dir, tensor), [&](json& h) { edit(h.at(tensor)); });
}

// The damage that edits one tensor's header entry.
std::function<void(const fs::path&)> on_tensor(const std::string& tensor,
                                               std::function<void(json&)> edit) {
  return [tensor, edit](const fs::path& d) { edit_tensor(d, tensor, edit); };
}

// Header-entry edits several cases share: the shape's two dimensions swapped; the dtype one of
// twice the width with half the columns (the same bytes, read as another type).
void transpose(json& t) {
  const json s = t["shape"];
  t["shape"] = json::array({s[1], s[0]});
}
std::function<void(json&)> widened_to(const std::string& dtype) {
  return [dtype](json& t) {
    t["dtype"] = dtype;
    t["shape"][1] = t["shape"][1].get<int>() / 2;
  };
}

// Renames a stored tensor in its header and in the index (a converter's naming mistake).
void rename_tensor(const fs::path& dir, const std::string& from, const std::string& to) {
  const std::string shard = shard_holding(dir, from).filename().string();
  edit_header(dir / shard, [&](json& h) {
    h[to] = h.at(from);
    h.erase(from);
  });
  edit_json(dir / kIndex, [&](json& j) {
    j["weight_map"].erase(from);
    j["weight_map"][to] = shard;
  });
}

// -------------------------------------------------------------------------------- GGUF

std::vector<fs::path> gguf_splits(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

struct GgufTensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// Rewrites one split through the writer: `kv` edits its metadata, `tensors` its tensor list
// (names, types, shapes, bytes).
void rewrite_gguf(const fs::path& file,
                  const std::function<void(std::map<std::string, GgufValue>&)>& kv,
                  const std::function<void(std::vector<GgufTensor>&)>& tensors = {}) {
  const GgufFile g = read_gguf_header(file);
  const std::string bytes = read_bytes(file);
  std::map<std::string, GgufValue> values = g.kv;
  if (kv) kv(values);
  std::vector<GgufTensor> list;
  for (const TensorEntry& t : g.tensors)
    list.push_back({t.name, t.dtype, t.shape, bytes.substr(t.offset, t.nbytes)});
  if (tensors) tensors(list);
  GgufWriter w;
  for (const auto& [key, value] : values) w.set(key, value);
  for (const GgufTensor& t : list) {
    w.add_tensor(t.name, t.dtype, t.shape,
                 std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(t.bytes.data()),
                                               t.bytes.size()));
  }
  fs::remove(file);
  w.write(file);
}

// The split holding `tensor`, and the tensor list edit applied to it alone.
void edit_gguf_tensor(const fs::path& dir, const std::string& tensor,
                      const std::function<void(std::vector<GgufTensor>&, std::size_t)>& edit) {
  for (const fs::path& f : gguf_splits(dir)) {
    const GgufFile g = read_gguf_header(f);
    for (std::size_t i = 0; i < g.tensors.size(); ++i) {
      if (g.tensors[i].name == tensor) {
        rewrite_gguf(f, {}, [&](std::vector<GgufTensor>& list) { edit(list, i); });
        return;
      }
    }
  }
  throw InternalError("corpus: no GGUF tensor " + tensor);
}

void edit_first_split_kv(const fs::path& dir,
                         const std::function<void(std::map<std::string, GgufValue>&)>& kv) {
  rewrite_gguf(gguf_splits(dir).front(), kv);
}

GgufValue u32(std::uint32_t v) { return {GgufType::kU32, GgufType::kU8, v}; }
GgufValue str(const std::string& v) { return {GgufType::kString, GgufType::kU8, v}; }

// Byte offset of the first occurrence of `what` in the file (a key or tensor name).
std::size_t find_in(const fs::path& p, const std::string& what) {
  const std::size_t at = read_bytes(p).find(what);
  if (at == std::string::npos) throw InternalError("corpus: '" + what + "' not in " + p.string());
  return at;
}

// --------------------------------------------------------------------------------- cases

struct Case {
  std::string name;
  FormatKind format;
  std::function<void(const fs::path&)> damage;
  // Fragments the one message must contain: the file, tensor or key it names, and the gist.
  std::vector<std::string> says;
};

// What the whole pre-flight of rank 0 of a one-rank layout says about `dir`: the InputError's
// message, or "accepted".
std::string preflight_message(const fs::path& dir) {
  const dist::Layout layout = dist::Layout::make(dist::LayoutSpec{});
  try {
    const JobPlan job = plan_job(dir, std::nullopt, layout);
    load_rank(job, layout, 0);
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), ExitCode::kInput);
    return e.what();
  }
  return "accepted";
}

// The main model's switches with one value the engine computes (model/config_json.cpp,
// refuse_other_kimi_variants), each set to another: refused by name.
template <class Add>
void add_kimi_switch_cases(Add& add) {
  auto config_key = [](const char* key, json value) {
    return [key, value](const fs::path& d) {
      edit_json(d / "config.json", [&](json& c) {
        json& t = c.contains("text_config") ? c["text_config"] : c;
        t[key] = value;
      });
    };
  };
  add("config_router_softmax", config_key("moe_router_activation_func", "softmax"),
      {"config.json", "moe_router_activation_func", "expected \"sigmoid\""});
  add("config_no_renormalize", config_key("moe_renormalize", false),
      {"config.json", "moe_renormalize", "expected true"});
  add("config_latent_without_norm", config_key("latent_moe_use_norm", false),
      {"config.json", "latent_moe_use_norm", "expected true"});
  add("config_mla_ungated", config_key("mla_use_output_gate", false),
      {"config.json", "mla_use_output_gate", "expected true"});
  add("config_topk_greedy", config_key("topk_method", "greedy"),
      {"config.json", "topk_method", "expected \"noaux_tc\""});
  add("config_expert_groups", config_key("num_expert_group", 4),
      {"config.json", "num_expert_group", "expected 1"});
  add("config_moe_every_other_layer", config_key("moe_layer_freq", 2),
      {"config.json", "moe_layer_freq", "expected 1"});
  add("config_mtp_head", config_key("num_nextn_predict_layers", 1),
      {"config.json", "num_nextn_predict_layers", "no MTP head"});
  add("config_scaling_negative", config_key("routed_scaling_factor", -1.0),
      {"config.json", "routed_scaling_factor", "expected a number > 0"});
}

// The cases are listed without touching any file (ctest lists them before the fixtures exist):
// the names below are the synthesizer's, and a damage that cannot find its target fails loudly.
void add_safetensors_cases(std::vector<Case>& cases, FormatKind kind) {
  const std::string f(format_name(kind));
  const bool draft = kind == FormatKind::kDraft;
  const std::string prefix = draft ? "" : "language_model.model.";
  // A projection in the second shard of every format, not square (of the MLA layer; a draft's
  // GQA k_proj) and the final norm.
  const std::string proj =
      prefix + (draft ? "layers.1.self_attn.k_proj.weight" : "layers.2.self_attn.q_a_proj.weight");
  const std::string norm = prefix + "norm.weight";
  const std::string shard = "model-00002-of-00003.safetensors";
  const std::string last = "model-00003-of-00003.safetensors";
  auto add = [&](std::string name, std::function<void(const fs::path&)> damage,
                 std::vector<std::string> says) {
    cases.push_back({f + "_" + name, kind, std::move(damage), std::move(says)});
  };

  // config.json
  add("config_missing", [](const fs::path& d) { fs::remove(d / "config.json"); },
      {"config.json"});
  add("config_not_json", [](const fs::path& d) { write_bytes(d / "config.json", "{\"text_config\": {"); },
      {"config.json"});
  add("config_empty", [](const fs::path& d) { write_bytes(d / "config.json", ""); },
      {"config.json"});
  add("config_array", [](const fs::path& d) { write_bytes(d / "config.json", "[1, 2]"); },
      {"config.json"});
  auto config_key = [&](const char* key, json value) {
    return [key, value](const fs::path& d) {
      edit_json(d / "config.json", [&](json& c) {
        json& t = c.contains("text_config") ? c["text_config"] : c;
        t[key] = value;
      });
    };
  };
  add("config_hidden_size_string", config_key("hidden_size", "512"),
      {"config.json", "hidden_size"});
  add("config_hidden_size_negative", config_key("hidden_size", -512),
      {"config.json", "hidden_size"});
  add("config_hidden_size_fraction", config_key("hidden_size", 512.5),
      {"config.json", "hidden_size"});
  add("config_layers_billion", config_key("num_hidden_layers", 1000000000),
      {"config.json", "num_hidden_layers"});
  add("config_layers_zero", config_key("num_hidden_layers", 0),
      {"config.json", "num_hidden_layers"});
  add("config_hidden_size_changed", config_key("hidden_size", 384), {"hidden_size"});
  add("config_heads_changed", config_key("num_attention_heads", 12), {"expected"});
  add("config_vocab_smaller", config_key("vocab_size", 1024), {"config.json", "vocab_size"});
  add("config_eps_negative", config_key("rms_norm_eps", -1e-6), {"config.json", "rms_norm_eps"});
  // Switches with one value the engine computes: another is other math, refused by name (the
  // main model's; a draft has none of them).
  if (!draft) add_kimi_switch_cases(add);
  add("config_huge_number", [](const fs::path& d) {
        write_bytes(d / "config.json",
                    std::string(read_bytes(d / "config.json")).insert(1, "\"x\": 1e999999, "));
      },
      {"config.json"});

  // The index
  add("index_missing", [](const fs::path& d) { fs::remove(d / kIndex); }, {kIndex});
  add("index_not_json", [](const fs::path& d) { write_bytes(d / kIndex, "{\"weight_map\": "); },
      {kIndex});
  add("index_without_weight_map", [](const fs::path& d) { write_bytes(d / kIndex, "{}"); },
      {kIndex, "weight_map"});
  add("index_value_not_a_string",
      [=](const fs::path& d) { edit_json(d / kIndex, [&](json& j) { j["weight_map"][proj] = 3; }); },
      {kIndex, proj});
  add("index_names_missing_shard",
      [=](const fs::path& d) {
        edit_json(d / kIndex,
                  [&](json& j) { j["weight_map"][proj] = "model-00009-of-00009.safetensors"; });
      },
      {"model-00009-of-00009.safetensors"});
  add("index_names_wrong_shard",
      [=](const fs::path& d) {
        edit_json(d / kIndex, [&](json& j) {
          j["weight_map"][proj] = last;
        });
      },
      {proj});
  add("index_lists_unstored_tensor",
      [=](const fs::path& d) {
        edit_json(d / kIndex, [&](json& j) { j["weight_map"][proj + ".ghost"] = shard; });
      },
      {proj + ".ghost"});
  add("index_omits_stored_tensor",
      [=](const fs::path& d) { edit_json(d / kIndex, [&](json& j) { j["weight_map"].erase(proj); }); },
      {proj});
  add("index_path_escapes",
      [=](const fs::path& d) {
        edit_json(d / kIndex, [&](json& j) { j["weight_map"][proj] = "../" + shard; });
      },
      {proj});

  // Shard files
  add("shard_missing", [=](const fs::path& d) { fs::remove(d / shard); }, {shard});
  add("shard_empty", [=](const fs::path& d) { write_bytes(d / shard, ""); }, {shard});
  add("shard_truncated_in_data", [=](const fs::path& d) { truncate_by(d / shard, 4096); },
      {shard, "truncated"});
  add("shard_header_length_huge", [=](const fs::path& d) { patch(d / shard, 0, le(1ull << 60, 8)); },
      {shard});
  add("shard_header_length_zero", [=](const fs::path& d) { patch(d / shard, 0, le(0, 8)); },
      {shard});
  add("shard_header_not_json", [=](const fs::path& d) { patch(d / shard, 8, "[[[["); }, {shard});
  add("shard_header_not_utf8", [=](const fs::path& d) { patch(d / shard, 10, "\xff\xfe"); },
      {shard});
  add("shard_metadata_not_strings",
      [=](const fs::path& d) { edit_header(d / shard, [](json& h) { h["__metadata__"] = {{"format", 7}}; }); },
      {shard, "__metadata__"});

  // One tensor's header entry
  add("dtype_unknown", on_tensor(proj, [](json& t) { t["dtype"] = "Q7"; }),
      {proj, "Q7"});
  add("dtype_missing", on_tensor(proj, [](json& t) { t.erase("dtype"); }),
      {proj, "dtype"});
  add("dtype_wrong_for_role",
      on_tensor(norm, [](json& t) { t["dtype"] = "I32"; }),
      {norm});
  add("shape_missing", on_tensor(proj, [](json& t) { t.erase("shape"); }),
      {proj, "shape"});
  add("shape_negative",
      on_tensor(proj, [](json& t) { t["shape"][0] = -1; }),
      {proj});
  add("shape_transposed", on_tensor(proj, transpose), {proj});
  add("shape_extra_dimension", on_tensor(proj, [](json& t) {
        auto s = t["shape"];
        t["shape"] = json::array({1, s[0], s[1]});
      }),
      {proj});
  add("shape_disagrees_with_bytes", on_tensor(proj, [](json& t) { t["shape"][0] = t["shape"][0].get<int>() / 2; }),
      {proj});
  add("offsets_reversed", on_tensor(proj, [](json& t) {
        auto o = t["data_offsets"];
        t["data_offsets"] = json::array({o[1], o[0]});
      }),
      {proj});
  add("offsets_overlap_a_neighbour", on_tensor(proj, [](json& t) {
        auto o = t["data_offsets"];
        const auto b = o[0].get<std::uint64_t>(), e = o[1].get<std::uint64_t>();
        t["data_offsets"] = json::array({b == 0 ? 2 : b - 2, b == 0 ? e + 2 : e - 2});
      }),
      {proj});
  add("offsets_past_the_end", on_tensor(proj, [](json& t) {
        t["data_offsets"] = json::array({1ull << 40, (1ull << 40) + 64});
      }),
      {proj});
  add("offsets_not_numbers", on_tensor(proj, [](json& t) { t["data_offsets"] = json::array({"0", "64"}); }),
      {proj, "data_offsets"});

  // Tensors of the model
  add("tensor_renamed", [=](const fs::path& d) { rename_tensor(d, proj, proj + "_renamed"); },
      {proj});
  add("tensor_unexpected_extra", [=](const fs::path& d) {
        const std::string extra = prefix + "layers.1.mystery.weight";
        edit_header(d / shard, [&](json& h) {
          h[extra] = h.at(proj);  // shares the bytes: harmless, but no parameter takes it
        });
        edit_json(d / kIndex, [&](json& j) { j["weight_map"][extra] = shard; });
      },
      {"mystery"});
  add("tensor_in_two_shards", [=](const fs::path& d) {
        const std::string other = last;
        json entry;
        edit_header(d / shard, [&](json& h) { entry = h.at(proj); });
        edit_header(d / other, [&](json& h) {
          // An entry at the same offsets: a tensor of the other shard overlaps it or it is
          // past that shard's end; either way the duplicate is what must be named.
          h[proj] = entry;
        });
      },
      {proj});

  // The tokenizer (main-model checkpoints carry tiktoken.model)
  if (kind != FormatKind::kDraft) {
    add("tokenizer_missing", [](const fs::path& d) { fs::remove(d / "tiktoken.model"); },
        {"tiktoken.model"});
    add("tokenizer_bad_base64", [](const fs::path& d) {
          write_bytes(d / "tiktoken.model", "IQ== 0\n!!!notbase64 1\n");
        },
        {"tiktoken.model line 2", "base64"});
    add("tokenizer_rank_gap", [](const fs::path& d) {
          std::string t = read_bytes(d / "tiktoken.model");
          const std::size_t line2 = t.find('\n') + 1;
          t.erase(line2, t.find('\n', line2) + 1 - line2);  // drop rank 1
          write_bytes(d / "tiktoken.model", t);
        },
        {"tiktoken.model line 2", "out of order"});
    add("tokenizer_duplicate_token", [](const fs::path& d) {
          write_bytes(d / "tiktoken.model", "IQ== 0\nIQ== 1\n");
        },
        {"tiktoken.model"});
    add("tokenizer_empty", [](const fs::path& d) { write_bytes(d / "tiktoken.model", ""); },
        {"tiktoken.model"});
    add("tokenizer_larger_than_vocab", [](const fs::path& d) {
          std::string t = read_bytes(d / "tiktoken.model");
          std::size_t n = static_cast<std::size_t>(std::count(t.begin(), t.end(), '\n'));
          // 300 more multi-byte tokens: more ids than the embedding has rows.
          for (int i = 0; i < 300; ++i) {
            const std::string token = "zq" + std::to_string(i) + "x";
            static const char* b64 =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            std::string enc;
            for (std::size_t k = 0; k < token.size(); k += 3) {
              const std::uint32_t v = (std::uint32_t(std::uint8_t(token[k])) << 16) |
                                      (k + 1 < token.size() ? std::uint8_t(token[k + 1]) << 8 : 0) |
                                      (k + 2 < token.size() ? std::uint8_t(token[k + 2]) : 0);
              enc += b64[(v >> 18) & 63];
              enc += b64[(v >> 12) & 63];
              enc += k + 1 < token.size() ? b64[(v >> 6) & 63] : '=';
              enc += k + 2 < token.size() ? b64[v & 63] : '=';
            }
            t += enc + " " + std::to_string(n++) + "\n";
          }
          write_bytes(d / "tiktoken.model", t);
        },
        {"tiktoken.model", "vocab_size"});
  }
}

void add_modelslim_cases(std::vector<Case>& cases) {
  const char* const kDesc = "quant_model_description.json";
  const std::string layers = "language_model.model.layers.";
  const std::string w8 = layers + "1.self_attn.q_proj.weight";                 // W8A8_DYNAMIC
  const std::string w4 = layers + "1.block_sparse_moe.experts.3.w2.weight";    // W4A8_DYNAMIC
  const std::string kvb = layers + "2.self_attn.kv_b_proj.weight";             // FLOAT
  auto add = [&](std::string name, std::function<void(const fs::path&)> damage,
                 std::vector<std::string> says) {
    cases.push_back({"modelslim_" + name, FormatKind::kModelSlim, std::move(damage), std::move(says)});
  };
  auto describe = [kDesc](std::function<void(json&)> edit) {
    return [kDesc, edit](const fs::path& d) { edit_json(d / kDesc, edit); };
  };
  add("description_missing", [kDesc](const fs::path& d) { fs::remove(d / kDesc); }, {kDesc});
  add("description_not_json", [kDesc](const fs::path& d) { write_bytes(d / kDesc, "{\"a\": "); },
      {kDesc});
  add("description_array", [kDesc](const fs::path& d) { write_bytes(d / kDesc, "[]"); }, {kDesc});
  add("description_scheme_unknown", describe([=](json& j) { j[w8] = "W9A9"; }), {w8, "W9A9"});
  add("description_scheme_not_string", describe([=](json& j) { j[w8] = 8; }), {kDesc, w8});
  add("description_says_float_for_int8", describe([=](json& j) { j[w8] = "FLOAT"; }),
      {w8, "FLOAT"});
  add("description_says_w4_for_int8", describe([=](json& j) { j[w8] = "W4A8_DYNAMIC"; }), {w8});
  add("description_entry_missing", describe([=](json& j) { j.erase(w8); }), {w8, kDesc});
  add("description_lists_unstored", describe([=](json& j) { j[w8 + ".ghost"] = "W8A8_DYNAMIC"; }),
      {w8 + ".ghost"});
  add("description_kv_b_quantized", describe([=](json& j) { j[kvb] = "W8A8_DYNAMIC"; }),
      {kvb, "dense"});
  add("kv_b_proj_missing", [=](const fs::path& d) { rename_tensor(d, kvb, kvb + "_dropped"); },
      {kvb, "split_gguf_kv_b"});
  add("weight_scale_missing", [=](const fs::path& d) {
        rename_tensor(d, w8 + "_scale", w8 + "_scale_lost");
      },
      {"weight_scale"});
  add("weight_offset_wrong_dtype", on_tensor(w8 + "_offset", [](json& t) { t["dtype"] = "I8"; }),
      {"weight_offset"});
  add("int4_packed_shape_wrong", on_tensor(w4, [](json& t) {
        auto s = t["shape"];
        t["shape"] = json::array({s[0].get<int>() * 2, s[1].get<int>() / 2});
      }),
      {w4});
  add("int8_weight_stored_float", on_tensor(w8, widened_to("BF16")), {w8});
}

void add_hf_cases(std::vector<Case>& cases) {
  const std::string expert = "language_model.model.layers.1.block_sparse_moe.experts.7.w3.";
  const std::string scale = expert + "weight_scale";
  const std::string packed = expert + "weight_packed";
  const std::string kvb = "language_model.model.layers.2.self_attn.kv_b_proj.weight";
  auto add = [&](std::string name, std::function<void(const fs::path&)> damage,
                 std::vector<std::string> says) {
    cases.push_back({"hf_" + name, FormatKind::kHf, std::move(damage), std::move(says)});
  };
  add("mxfp4_scale_not_u8",
      on_tensor(scale, [](json& t) { t["dtype"] = "I8"; }),
      {scale, "U8"});
  add("mxfp4_scale_missing", [=](const fs::path& d) { rename_tensor(d, scale, scale + "_x"); },
      {scale});
  add("mxfp4_packed_shape_wrong", on_tensor(packed, transpose), {packed});
  add("expert_missing", [=](const fs::path& d) { rename_tensor(d, packed, packed + "_gone"); },
      {packed});
  add("kv_b_proj_bf16_as_f32", on_tensor(kvb, widened_to("F32")), {kvb});
}

void add_draft_cases(std::vector<Case>& cases) {
  auto add = [&](std::string name, std::function<void(const fs::path&)> damage,
                 std::vector<std::string> says) {
    cases.push_back({"draft_" + name, FormatKind::kDraft, std::move(damage), std::move(says)});
  };
  auto config = [](std::function<void(json&)> edit) {
    return [edit](const fs::path& d) { edit_json(d / "config.json", edit); };
  };
  const std::string taps = "dflash_config.target_layer_ids";
  add("target_layers_not_a_list", config([](json& c) { c["dflash_config"]["target_layer_ids"] = 3; }),
      {"config.json", taps});
  add("target_layers_missing", config([](json& c) { c["dflash_config"].erase("target_layer_ids"); }),
      {"config.json", taps});
  add("target_layer_negative", config([](json& c) { c["dflash_config"]["target_layer_ids"][0] = -1; }),
      {"config.json", taps, "negative"});
  add("target_layers_descending",
      config([](json& c) { c["dflash_config"]["target_layer_ids"] = {0, 2, 1, 4, 5}; }),
      {"config.json", taps, "ascending"});
  add("target_layers_repeated",
      config([](json& c) { c["dflash_config"]["target_layer_ids"] = {0, 1, 1, 4, 5}; }),
      {"config.json", taps, "unique"});
  add("target_layers_too_many", config([](json& c) {
        json& ids = c["dflash_config"]["target_layer_ids"];
        ids = json::array();
        for (int i = 0; i < 100000; ++i) ids.push_back(i);
      }),
      {"config.json", taps});
  add("target_layer_beyond_32_bits",
      config([](json& c) { c["dflash_config"]["target_layer_ids"][4] = 1ull << 40; }),
      {"config.json", taps});
  add("dflash_config_removed", config([](json& c) { c.erase("dflash_config"); }), {"config.json"});
  add("dflash_config_not_an_object", config([](json& c) { c["dflash_config"] = "gqa"; }),
      {"config.json"});
  add("speculators_convention",
      config([](json& c) { c["speculators_model_type"] = "dspark"; }),
      {"config.json", "speculators_model_type", "SGLang refuses"});
  add("mla_attention_mode", config([](json& c) { c["dflash_config"]["attention_mode"] = "mla"; }),
      {"config.json", "dflash_config.attention_mode", "K3DSparkModel"});
  add("mla_model_type", config([](json& c) { c["model_type"] = "k3_dspark"; }),
      {"config.json", "K3DSparkModel", "not supported"});
  add("markov_head_gated",
      config([](json& c) { c["dflash_config"]["markov_head_type"] = "gated"; }),
      {"config.json", "dflash_config.markov_head_type"});
  add("kv_heads_not_dividing", config([](json& c) { c["num_key_value_heads"] = 12; }),
      {"config.json", "num_key_value_heads"});
  add("kv_heads_zero", config([](json& c) { c["num_key_value_heads"] = 0; }),
      {"config.json", "num_key_value_heads"});
  add("mask_token_outside_vocabulary",
      config([](json& c) { c["dflash_config"]["mask_token_id"] = 4352; }),
      {"config.json", "dflash_config.mask_token_id"});
  add("mask_token_negative", config([](json& c) { c["dflash_config"]["mask_token_id"] = -1; }),
      {"config.json", "dflash_config.mask_token_id"});
  add("block_size_zero", config([](json& c) { c["block_size"] = 0; }),
      {"config.json", "block_size"});
  add("block_size_huge", config([](json& c) { c["block_size"] = 65; }),
      {"config.json", "block_size"});
  add("layer_types_one_for_all", config([](json& c) { c["layer_types"] = {"full_attention"}; }),
      {"config.json", "layer_types", "one per layer"});
  add("layer_types_sliding",
      config([](json& c) { c["layer_types"][0] = "sliding_attention"; }),
      {"config.json", "layer_types", "sliding_attention"});
  add("aux_hidden_stream_unknown", config([](json& c) { c["aux_hidden_stream"] = "residual"; }),
      {"config.json", "aux_hidden_stream"});
  add("rope_type_unknown", config([](json& c) { c["rope_parameters"]["rope_type"] = "linear"; }),
      {"config.json", "rope_parameters.rope_type"});
  add("rope_theta_missing", config([](json& c) { c["rope_parameters"].erase("rope_theta"); }),
      {"config.json", "rope_theta"});
  add("yarn_factor_below_one", config([](json& c) { c["rope_parameters"]["factor"] = 0.5; }),
      {"config.json", "rope_parameters.factor"});
  add("head_dim_changed", config([](json& c) { c["head_dim"] = 32; }),
      {"layers.0.self_attn.q_proj.weight", "expected [1024, 512]"});
  add("markov_rank_changed", config([](json& c) { c["dflash_config"]["markov_rank"] = 256; }),
      {"markov_head.markov_w1.weight", "expected [4352, 256]"});
  add("confidence_head_disabled",
      config([](json& c) { c["dflash_config"]["enable_confidence_head"] = false; }),
      {"unexpected tensor 'confidence_head.proj.weight'", "DSpark drafter"});
  add("markov_output_missing", [](const fs::path& d) {
        rename_tensor(d, "markov_head.markov_w2.weight", "markov_head.markov_w2.weight_gone");
      },
      {"markov_head.markov_w2.weight"});
  add("mla_kv_b_stored", [](const fs::path& d) {
        rename_tensor(d, "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.kv_b_proj.weight");
      },
      {"layers.0.self_attn.k_proj.weight", "layers.0.self_attn.kv_b_proj.weight"});
}

void add_gguf_cases(std::vector<Case>& cases) {
  const std::string first = "kimi-k3-tiny-00001-of-00003.gguf";
  const std::string second = "kimi-k3-tiny-00002-of-00003.gguf";
  const std::string k_b = "blk.2.attn_k_b.weight";
  const std::string v_b = "blk.2.attn_v_b.weight";
  const std::string norm = "blk.1.attn_norm.weight";
  auto add = [&](std::string name, std::function<void(const fs::path&)> damage,
                 std::vector<std::string> says) {
    cases.push_back({"gguf_" + name, FormatKind::kGguf, std::move(damage), std::move(says)});
  };
  auto in = [](const std::string& file, std::function<void(const fs::path&)> f) {
    return [file, f](const fs::path& d) { f(d / file); };
  };
  // Bytes of the fixed header (magic, version, tensor count, kv count).
  add("bad_magic", in(second, [](const fs::path& p) { patch(p, 0, "GGML"); }), {second, "magic"});
  add("version_4", in(second, [](const fs::path& p) { patch(p, 4, le(4, 4)); }),
      {second, "version"});
  add("version_byte_swapped", in(second, [](const fs::path& p) { patch(p, 4, le(0x03000000, 4)); }),
      {second, "byte-swapped"});
  add("tensor_count_huge", in(second, [](const fs::path& p) { patch(p, 8, le(1ull << 50, 8)); }),
      {second, "tensor count"});
  add("kv_count_huge", in(second, [](const fs::path& p) { patch(p, 16, le(1ull << 50, 8)); }),
      {second});
  add("kv_count_short", in(first, [](const fs::path& p) { patch(p, 16, le(3, 8)); }), {first});
  add("truncated_header", in(second, [](const fs::path& p) {
        write_bytes(p, read_bytes(p).substr(0, 200));
      }),
      {second});
  add("truncated_data", in(second, [](const fs::path& p) { truncate_by(p, 4096); }), {second});
  add("empty_file", in(second, [](const fs::path& p) { write_bytes(p, ""); }), {second});
  add("key_length_huge", in(first, [](const fs::path& p) { patch(p, 24, le(1ull << 40, 8)); }),
      {first});
  add("value_type_unknown", in(first, [](const fs::path& p) {
        // general.architecture's value type follows its key.
        const std::size_t at = find_in(p, "general.architecture") + 20;
        patch(p, at, le(99, 4));
      }),
      {first});
  add("string_length_huge", in(first, [](const fs::path& p) {
        const std::size_t at = find_in(p, "general.architecture") + 24;
        patch(p, at, le(1ull << 40, 8));
      }),
      {first});
  add("tensor_type_unknown", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        const std::string& name = g.tensors[1].name;
        // name, n_dims (4), ne (8 each), then the type (4).
        const std::size_t at = find_in(p, name) + name.size() + 4 + 8 * g.tensors[1].shape.size();
        patch(p, at, le(77, 4));
      }),
      {second});
  add("tensor_dims_five", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        const std::string& name = g.tensors[0].name;
        patch(p, find_in(p, name) + name.size(), le(5, 4));
      }),
      {second});
  add("tensor_offset_misaligned", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        const TensorEntry& t = g.tensors[1];
        const std::size_t at = find_in(p, t.name) + t.name.size() + 4 + 8 * t.shape.size() + 4;
        patch(p, at, le(t.offset - g.data_start + 1, 8));
      }),
      {second, "alignment"});
  add("tensor_offset_past_end", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        const TensorEntry& t = g.tensors.back();
        const std::size_t at = find_in(p, t.name) + t.name.size() + 4 + 8 * t.shape.size() + 4;
        patch(p, at, le(1ull << 40, 8));
      }),
      {second});
  add("tensors_overlap", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        const TensorEntry& t = g.tensors[2];
        const std::size_t at = find_in(p, t.name) + t.name.size() + 4 + 8 * t.shape.size() + 4;
        patch(p, at, le(g.tensors[1].offset - g.data_start, 8));
      }),
      {second, "overlap"});
  add("alignment_not_power_of_two", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["general.alignment"] = u32(48); });
      },
      {first, "alignment"});
  // Metadata
  add("architecture_llama", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["general.architecture"] = str("llama"); });
      },
      {"llama"});
  add("architecture_missing", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv.erase("general.architecture"); });
      },
      {"general.architecture"});
  add("block_count_missing", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv.erase("kimi-k3.block_count"); });
      },
      {"kimi-k3.block_count"});
  add("block_count_string", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["kimi-k3.block_count"] = str("six"); });
      },
      {"kimi-k3.block_count"});
  // The router's switches: llama.cpp's softmax gating, or weights left unnormalised, is math the
  // engine does not compute.
  add("gating_softmax", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["kimi-k3.expert_gating_func"] = u32(1); });
      },
      {first, "kimi-k3.expert_gating_func is 1, expected 2 (sigmoid"});
  add("weights_norm_missing", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv.erase("kimi-k3.expert_weights_norm"); });
      },
      {first, "kimi-k3.expert_weights_norm is missing, expected true"});
  add("weights_norm_false", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) {
          kv["kimi-k3.expert_weights_norm"] = GgufValue{GgufType::kBool, GgufType::kU8, false};
        });
      },
      {first, "kimi-k3.expert_weights_norm is false, expected true"});
  add("block_count_billion", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["kimi-k3.block_count"] = u32(1000000000); });
      },
      {first, "1000000000"});
  add("embedding_length_changed", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["kimi-k3.embedding_length"] = u32(384); });
      },
      {"expected"});
  add("expert_count_changed", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["kimi-k3.expert_count"] = u32(32); });
      },
      {"expected"});
  add("head_count_kv_short", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) {
          GgufValue v = kv.at("kimi-k3.attention.head_count_kv");
          v.value.erase(v.value.size() - 1);
          kv["kimi-k3.attention.head_count_kv"] = v;
        });
      },
      {"head_count_kv"});
  add("split_count_wrong", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["split.count"] = {GgufType::kU16, GgufType::kU8, 4}; });
      },
      {"split"});
  add("split_file_missing", [second](const fs::path& d) { fs::remove(d / second); }, {second});
  add("split_numbers_swapped", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["split.no"] = {GgufType::kU16, GgufType::kU8, 1}; });
      },
      {"split.no"});
  // Tokenizer keys (in the first split)
  add("tokenizer_tokens_missing", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv.erase("tokenizer.ggml.tokens"); });
      },
      {first, "tokenizer.ggml.tokens"});
  add("tokenizer_types_short", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) {
          GgufValue v = kv.at("tokenizer.ggml.token_type");
          v.value.erase(v.value.size() - 1);
          kv["tokenizer.ggml.token_type"] = v;
        });
      },
      {first, "token_type"});
  add("tokenizer_model_unknown", [](const fs::path& d) {
        edit_first_split_kv(d, [](auto& kv) { kv["tokenizer.ggml.model"] = str("sentencepiece"); });
      },
      {first, "sentencepiece"});
  // Tensors
  add("k_b_stored_q8_0", [k_b](const fs::path& d) {
        edit_gguf_tensor(d, k_b, [](std::vector<GgufTensor>& l, std::size_t i) {
          l[i].dtype = DType::kQ8_0;  // a valid Q8_0 payload of the same shape: 34 B per 32
          std::int64_t elems = 1;
          for (const std::int64_t n : l[i].shape) elems *= n;
          l[i].bytes.assign(static_cast<std::size_t>(elems / 32 * 34), '\0');
        });
      },
      {k_b, "Q4_0"});
  add("v_b_missing", [v_b](const fs::path& d) {
        edit_gguf_tensor(d, v_b, [](std::vector<GgufTensor>& l, std::size_t i) {
          l[i].name = "blk.2.attn_v_b_lost.weight";
        });
      },
      {v_b});
  add("norm_shape_wrong", [norm](const fs::path& d) {
        edit_gguf_tensor(d, norm, [](std::vector<GgufTensor>& l, std::size_t i) {
          l[i].shape[0] /= 2;
          l[i].bytes.resize(l[i].bytes.size() / 2);
        });
      },
      {norm});
  add("norm_stored_as_i32", [norm](const fs::path& d) {
        edit_gguf_tensor(d, norm, [](std::vector<GgufTensor>& l, std::size_t i) {
          l[i].dtype = DType::kI32;
        });
      },
      {norm});
  add("tensor_duplicated", [norm](const fs::path& d) {
        edit_gguf_tensor(d, norm, [](std::vector<GgufTensor>& l, std::size_t i) {
          GgufTensor copy = l[i];
          l.push_back(copy);
        });
      },
      {norm});
  add("unexpected_tensor", [norm](const fs::path& d) {
        edit_gguf_tensor(d, norm, [](std::vector<GgufTensor>& l, std::size_t i) {
          GgufTensor copy = l[i];
          copy.name = "blk.1.mystery.weight";
          l.push_back(copy);
        });
      },
      {"blk.1.mystery.weight"});
  add("tensor_name_length_huge", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        // The 8-byte length field just before the second tensor's name.
        patch(p, find_in(p, g.tensors[1].name) - 8, le(1ull << 40, 8));
      }),
      {second});
  add("tensor_name_not_utf8", in(second, [](const fs::path& p) {
        const GgufFile g = read_gguf_header(p);
        patch(p, find_in(p, g.tensors[1].name), "\xff\xfe");
      }),
      {second});
  add("split_keys_missing", [second](const fs::path& d) {
        rewrite_gguf(d / second, [](auto& kv) {
          kv.erase("split.no");
          kv.erase("split.count");
        });
      },
      {second, "split.no"});
}

const std::vector<Case>& corpus() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> c;
    for (FormatKind kind : {FormatKind::kHf, FormatKind::kModelSlim, FormatKind::kDraft})
      add_safetensors_cases(c, kind);
    add_modelslim_cases(c);
    add_hf_cases(c);
    add_draft_cases(c);
    add_gguf_cases(c);
    return c;
  }();
  return cases;
}

// A fresh copy of the case's fixture (hard links: only what a case damages is rewritten).
fs::path fresh_copy(const Case& c) {
  const fs::path dst = test::scratch_dir() / "corpus" / c.name;
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(fixture(c.format)))
    fs::create_hard_link(e.path(), dst / e.path().filename());
  return dst;
}

class MalformedCheckpoint : public ::testing::TestWithParam<std::size_t> {};

TEST(MalformedCorpus, HoldsAtLeast100CasesInEveryFormat) {
  std::map<FormatKind, int> per_format;
  for (const Case& c : corpus()) ++per_format[c.format];
  EXPECT_GE(corpus().size(), 100u);
  for (FormatKind kind : kAllFormats) EXPECT_GE(per_format[kind], 1) << format_name(kind);
}

// The undamaged copies pass, so every rejection below is the damage's.
TEST(MalformedCorpus, UndamagedCopiesPass) {
  for (FormatKind kind : kAllFormats) {
    Case c{"undamaged_" + std::string(format_name(kind)), kind, {}, {}};
    EXPECT_EQ(preflight_message(fresh_copy(c)), "accepted") << format_name(kind);
  }
}

TEST_P(MalformedCheckpoint, IsRefusedWithOneMessageNamingWhatIsWrong) {
  const Case& c = corpus().at(GetParam());
  const fs::path dir = fresh_copy(c);
  c.damage(dir);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = preflight_message(dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s (%.3f s): %s\n", c.name.c_str(), seconds, message.c_str());
  ASSERT_NE(message, "accepted") << c.name;
  for (const std::string& s : c.says) EXPECT_NE(message.find(s), std::string::npos) << s;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Corpus, MalformedCheckpoint,
                         ::testing::Range<std::size_t>(0, corpus().size()),
                         [](const auto& param_info) { return corpus().at(param_info.param).name; });

}  // namespace
}  // namespace k3::model
