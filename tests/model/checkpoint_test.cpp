// Checkpoints end to end on synthetic data: capability-selected representations (the
// production regression), every data-free rejection with its message, slices that reconstruct
// every tensor for 1, 4, 8 and 64 ranks, and a clean audit after loading.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "model/load/binding.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/synth_writers.h"
#include "model/load/load_plan.h"
#include "model/load/loader.h"
#include "model/load/pipeline.h"
#include "model/synth/synth.h"
#include "model/checkpoint/tokenizer_files.h"
#include "model/load/weights.h"
#include "model/load/wire.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "tests/model/checkpoint_edits.h"
#include "tests/model/test_dirs.h"

namespace k3::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path checkpoint_dir(FormatKind kind) { return test::synthetic_checkpoint(kind); }

// A private copy of a synthetic checkpoint that a test may damage.
fs::path copy_of(FormatKind kind, const std::string& name) {
  const fs::path dst = test::scratch_dir() / name;
  fs::remove_all(dst);
  fs::copy(checkpoint_dir(kind), dst, fs::copy_options::recursive);
  return dst;
}

dist::Layout layout_of(int world, int dp, int ep, bool dp_attention) {
  dist::LayoutSpec s;
  s.world = world;
  s.tp = dp_attention ? world : world / dp;
  s.dp = dp;
  s.ep = ep;
  s.enable_dp_attention = dp_attention;
  s.enable_dp_lm_head = dp_attention;
  s.enable_shared_experts_attn_tp = dp_attention;
  s.enable_dense_mlp_attn_tp = dp_attention;
  return dist::Layout::make(s);
}

BindResult bind_all(const Checkpoint& ck, const dist::Layout& layout) {
  return bind_parameters(ck, kimi_k3_parameters(ck.config(), layout));
}

const Binding& binding(const BindResult& r, const std::string& name) {
  for (const auto& b : r.bindings) {
    if (b.spec.name == name) return b;
  }
  throw InternalError("no binding " + name);
}

std::string problems_text(const std::vector<std::string>& problems) {
  std::string s;
  for (const auto& p : problems) s += p + "\n";
  return s;
}

// The typed definition: every parameter exactly once, in the flat table's order, each block where
// the config puts it; a loaded store maps onto the tree by the definition's names.
TEST(KimiK3Definition, TreeHoldsEveryParameterOnceWhereTheConfigPutsIt) {
  const dist::Layout one = layout_of(1, 1, 1, false);
  for (const std::string preset : {"tiny", "wide", "full"}) {
    SCOPED_TRACE(preset);
    const ModelConfig c = preset_config(preset);
    const ModelWeights<ParamSpec> tree = kimi_k3_definition(c, one);
    std::vector<std::string> names;
    for_each_weight(tree, [&](const ParamSpec& s) { names.push_back(s.name); });
    std::vector<std::string> flat;
    for (const ParamSpec& s : kimi_k3_parameters(c, one)) flat.push_back(s.name);
    EXPECT_EQ(names, flat);
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
    ASSERT_EQ(tree.layers.size(), static_cast<std::size_t>(c.num_hidden_layers));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const auto& layer = tree.layers[static_cast<std::size_t>(l)];
      EXPECT_EQ(layer.mla.has_value(), c.is_mla_layer(l)) << l;
      EXPECT_EQ(layer.kda.has_value(), !c.is_mla_layer(l)) << l;
      EXPECT_EQ(layer.mlp.has_value(), c.is_dense_layer(l)) << l;
      EXPECT_EQ(layer.moe.has_value(), !c.is_dense_layer(l)) << l;
      if (layer.mla) {
        EXPECT_EQ(layer.mla->kv_b_proj.name,
                  "model.layers." + std::to_string(l) + ".self_attn.kv_b_proj.weight");
        EXPECT_EQ(layer.mla->kv_b_proj.family, ParamFamily::kMlaKvB);
      }
    }
    // map_weights keeps the shape: the same fields, in the same order.
    const auto layers_of = map_weights(tree, [](const ParamSpec& s) { return s.layer; });
    std::vector<int> mapped, direct;
    for_each_weight(layers_of, [&](int l) { mapped.push_back(l); });
    for_each_weight(tree, [&](const ParamSpec& s) { direct.push_back(s.layer); });
    EXPECT_EQ(mapped, direct);
  }
}

// The wide preset keeps every width of the real model at 4 layers and 32 experts, and
// covers each kind of block: a dense KDA layer, MoE KDA layers and a MoE MLA layer.
TEST(SynthPresets, WideHasTheRealWidthsAtFourLayers) {
  const ModelConfig w = preset_config("wide");
  const ModelConfig f = preset_config("full");
  EXPECT_EQ(w.hidden_size, f.hidden_size);
  EXPECT_EQ(w.vocab_size, f.vocab_size);
  EXPECT_EQ(w.intermediate_size, f.intermediate_size);
  EXPECT_EQ(w.num_attention_heads, f.num_attention_heads);
  EXPECT_EQ(w.q_lora_rank, f.q_lora_rank);
  EXPECT_EQ(w.kv_lora_rank, f.kv_lora_rank);
  EXPECT_EQ(w.qk_nope_head_dim, f.qk_nope_head_dim);
  EXPECT_EQ(w.qk_rope_head_dim, f.qk_rope_head_dim);
  EXPECT_EQ(w.v_head_dim, f.v_head_dim);
  EXPECT_EQ(w.kda_num_heads, f.kda_num_heads);
  EXPECT_EQ(w.kda_head_dim, f.kda_head_dim);
  EXPECT_EQ(w.moe_intermediate_size, f.moe_intermediate_size);
  EXPECT_EQ(w.routed_expert_hidden_size, f.routed_expert_hidden_size);
  EXPECT_EQ(w.num_shared_experts, f.num_shared_experts);
  EXPECT_EQ(w.num_experts_per_token, f.num_experts_per_token);
  EXPECT_EQ(w.num_hidden_layers, 4);
  EXPECT_EQ(w.num_experts, 32);
  const std::vector<bool> mla = {false, false, false, true}, dense = {true, false, false, false};
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(w.is_mla_layer(l), mla[static_cast<std::size_t>(l)]) << l;
    EXPECT_EQ(w.is_dense_layer(l), dense[static_cast<std::size_t>(l)]) << l;
  }
  const ModelConfig d = draft_preset_config("wide");
  ASSERT_TRUE(d.dspark.has_value());
  EXPECT_EQ(d.dspark->target_layer_ids, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(d.hidden_size, w.hidden_size);
}

// Every format of the wide preset, written header-only (sparse), opens, binds and plans at a
// TP8/EP8 layout with no problem, its config the preset's.
TEST(SynthPresets, WideHeaderOnlyPlansInEveryFormat) {
  const dist::Layout layout = layout_of(8, 1, 8, false);
  for (FormatKind kind : {FormatKind::kHf, FormatKind::kModelSlim, FormatKind::kGguf,
                          FormatKind::kDraft}) {
    const std::string name(format_name(kind));
    SCOPED_TRACE(name);
    const fs::path dir = test::scratch_dir() / ("wide-header-only-" + name);
    fs::remove_all(dir);
    SynthOptions o;
    o.preset = "wide";
    o.format = kind;
    o.out = dir;
    o.header_only = true;
    o.corpus = test::source_dir() / ".." / "shared" / "data" / "gsm8k" / "train.jsonl";
    synthesize_checkpoint(o);
    const fs::path path = kind == FormatKind::kGguf ? dir / "kimi-k3-wide.gguf" : dir;
    const JobPlan job = plan_job(path, kind, layout);
    EXPECT_TRUE(job.bound.problems.empty()) << problems_text(job.bound.problems);
    const ModelConfig& c = job.checkpoint.config();
    if (kind == FormatKind::kDraft) {
      EXPECT_EQ(to_wire(c), to_wire(draft_preset_config("wide")));
    } else {  // GGUF stores eps as f32 and numbers the special tokens after its 4096 BPE tokens
      const ModelConfig w = preset_config("wide");
      EXPECT_EQ(c.hidden_size, w.hidden_size);
      EXPECT_EQ(c.vocab_size, w.vocab_size);
      EXPECT_EQ(c.num_hidden_layers, w.num_hidden_layers);
      EXPECT_EQ(c.full_attn_layers, w.full_attn_layers);
      EXPECT_EQ(c.attn_res_block_size, w.attn_res_block_size);
      EXPECT_EQ(c.num_experts, w.num_experts);
      EXPECT_EQ(c.num_experts_per_token, w.num_experts_per_token);
      EXPECT_EQ(c.kda_num_heads, w.kda_num_heads);
      EXPECT_EQ(c.num_attention_heads, w.num_attention_heads);
    }
    fs::remove_all(dir);
  }
}

TEST(KimiK3Definition, WeightTreeNamesAParameterThatWasNotLoaded) {
  const dist::Layout one = layout_of(1, 1, 1, false);
  try {
    weight_tree(WeightStore{}, preset_config("tiny"), one);
    FAIL() << "an empty store mapped onto the tree";
  } catch (const InternalError& e) {
    EXPECT_STREQ(e.what(), "weight model.embed_tokens.weight was not loaded");
  }
}

TEST(Formats, CapabilityTableMatchesDocs) {
  std::ifstream in(test::source_dir() / "docs" / "FORMATS.md");
  ASSERT_TRUE(in) << "docs/FORMATS.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(capability_table_markdown()), std::string::npos)
      << "docs/FORMATS.md does not contain the current table:\n"
      << capability_table_markdown();
}

TEST(Formats, EachRepresentationFamilyHasOneDecidingCapability) {
  // The production bug: ModelSlim advertises quantized latent projections and must still keep
  // its dense kv_b_proj, because only split_gguf_kv_b decides the split.
  const Format ms = Format::of(FormatKind::kModelSlim);
  EXPECT_TRUE(ms.has(Capability::kQuantizedLatentProjections));
  EXPECT_FALSE(ms.has(Capability::kSplitGgufKvB));
  EXPECT_TRUE(Format::of(FormatKind::kGguf).has(Capability::kSplitGgufKvB));
  for (FormatKind k : kAllFormats) {
    const Format f = Format::of(k);
    const int expert_caps =
        f.has(Capability::kFp4RoutedExperts) + f.has(Capability::kGgmlBlockExperts);
    EXPECT_LE(expert_caps, 1) << format_name(k);
    EXPECT_FALSE(f.has(Capability::kGgmlBlockLinears) && f.has(Capability::kModelSlimQuantization));
    EXPECT_NE(f.has(Capability::kTiktokenVocabulary), f.has(Capability::kEmbeddedVocabulary));
  }
}

// Every format writes synthetic checkpoints, each through its own unit: synth_writer is the one
// map from a kind to its writer.
TEST(Formats, EachFormatHasItsOwnSyntheticWriter) {
  std::set<const synth::SynthWriter*> writers;
  for (FormatKind k : kAllFormats) writers.insert(&synth_writer(k));
  EXPECT_EQ(writers.size(), kAllFormats.size());
}

TEST(ProductionRegression, ModelSlimKeepsDenseKvBWhileQuantizingLatentProjections) {
  const Checkpoint ck = Checkpoint::open(checkpoint_dir(FormatKind::kModelSlim));
  EXPECT_EQ(ck.format().kind(), FormatKind::kModelSlim);
  const BindResult r = bind_all(ck, layout_of(1, 1, 1, false));
  ASSERT_TRUE(r.problems.empty()) << problems_text(r.problems);
  const Binding& kv = binding(r, "model.layers.2.self_attn.kv_b_proj.weight");
  EXPECT_EQ(kv.repr.asked, Capability::kSplitGgufKvB);
  EXPECT_FALSE(kv.repr.answer);
  EXPECT_EQ(kv.repr.type, quant::Type::kBF16);
  ASSERT_EQ(kv.parts.size(), 1u);
  EXPECT_EQ(kv.parts[0].tensors[0], "language_model.model.layers.2.self_attn.kv_b_proj.weight");
  const Binding& latent =
      binding(r, "model.layers.1.block_sparse_moe.routed_expert_down_proj.weight");
  EXPECT_EQ(latent.repr.asked, Capability::kQuantizedLatentProjections);
  EXPECT_TRUE(latent.repr.answer);
  EXPECT_EQ(latent.repr.type, quant::Type::kModelSlimInt8);
  EXPECT_EQ(binding(r, "model.layers.1.block_sparse_moe.experts.w1").repr.type,
            quant::Type::kModelSlimInt4);

  // And it loads and audits clean.
  const dist::Layout layout = layout_of(1, 1, 1, false);
  const LoadPlan plan = make_load_plan(ck, r.bindings, layout, 0);
  const LoadResult loaded = load(ck, plan);
  EXPECT_TRUE(audit(ck, plan, loaded.weights).empty());
  EXPECT_FALSE(loaded.weights.get("model.layers.2.self_attn.kv_b_proj.weight").split_kv());
}

TEST(ProductionRegression, HfExpertsAreCompressedTensorsMxfp4) {
  const Checkpoint ck = Checkpoint::open(checkpoint_dir(FormatKind::kHf));
  const BindResult r = bind_all(ck, layout_of(1, 1, 1, false));
  ASSERT_TRUE(r.problems.empty()) << problems_text(r.problems);
  const Binding& w2 = binding(r, "model.layers.3.block_sparse_moe.experts.w2");
  EXPECT_EQ(w2.repr.asked, Capability::kFp4RoutedExperts);
  EXPECT_EQ(w2.repr.type, quant::Type::kMXFP4Packed);
  EXPECT_EQ(binding(r, "model.layers.2.self_attn.kv_b_proj.weight").repr.type, quant::Type::kBF16);
}

// The data-free checks: each damaged checkpoint is rejected with its message, before any
// tensor data is read (bind_parameters() reads headers only).
std::string first_problem(const fs::path& dir) {
  try {
    const Checkpoint ck = Checkpoint::open(dir);
    const BindResult r = bind_all(ck, layout_of(1, 1, 1, false));
    return r.problems.empty() ? "no problem" : r.problems.front();
  } catch (const InputError& e) {
    return e.what();
  }
}

TEST(ProductionRegression, GgufSplitsKvIntoQ4_0KAndQ2_KV) {
  const Checkpoint ck = Checkpoint::open(checkpoint_dir(FormatKind::kGguf));
  EXPECT_EQ(ck.files().size(), 3u);
  const BindResult r = bind_all(ck, layout_of(1, 1, 1, false));
  ASSERT_TRUE(r.problems.empty()) << problems_text(r.problems);
  const Binding& kv = binding(r, "model.layers.5.self_attn.kv_b_proj.weight");
  EXPECT_EQ(kv.repr.asked, Capability::kSplitGgufKvB);
  EXPECT_TRUE(kv.repr.answer);
  ASSERT_EQ(kv.parts.size(), 2u);
  EXPECT_EQ(kv.parts[0].tensors[0], "blk.5.attn_k_b.weight");
  EXPECT_EQ(kv.parts[0].dtype, DType::kQ4_0);
  EXPECT_EQ(kv.parts[1].tensors[0], "blk.5.attn_v_b.weight");
  EXPECT_EQ(kv.parts[1].dtype, DType::kQ2_K);
  const dist::Layout layout = layout_of(1, 1, 1, false);
  const LoadPlan plan = make_load_plan(ck, r.bindings, layout, 0);
  const LoadResult loaded = load(ck, plan);
  EXPECT_TRUE(audit(ck, plan, loaded.weights).empty());
  const Weight& w = loaded.weights.get("model.layers.5.self_attn.kv_b_proj.weight");
  ASSERT_TRUE(w.split_kv());
  EXPECT_EQ(w.k_b->type, quant::Type::kQ4_0);
  EXPECT_EQ(w.v_b->type, quant::Type::kQ2_K);
}

// Rewrites a one-file copy of the synthetic GGUF with `retype` applied to one tensor.
fs::path gguf_with(const std::string& name, const std::string& tensor, DType new_type) {
  const fs::path src_dir = checkpoint_dir(FormatKind::kGguf);
  GgufWriter w;
  const GgufFile first = read_gguf_header(src_dir / "kimi-k3-tiny-00001-of-00003.gguf");
  for (const auto& [key, value] : first.kv) {
    if (key.rfind("split.", 0) != 0) w.set(key, value);
  }
  for (int part = 1; part <= 3; ++part) {
    const fs::path file = src_dir / ("kimi-k3-tiny-0000" + std::to_string(part) + "-of-00003.gguf");
    const GgufFile g = read_gguf_header(file);
    std::ifstream in(file, std::ios::binary);
    for (const TensorEntry& t : g.tensors) {
      std::vector<std::uint8_t> bytes(t.nbytes);
      in.seekg(static_cast<std::streamoff>(t.offset));
      in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (t.name != tensor) {
        w.add_tensor(t.name, t.dtype, t.shape, bytes);
        continue;
      }
      quant::MatrixView v;
      v.type = *quant_type_of(t.dtype);
      v.cols = static_cast<std::size_t>(t.shape.back());
      v.rows = t.nbytes / quant::row_bytes(v.type, v.cols);
      v.data = bytes;
      std::vector<float> values(v.rows * v.cols);
      quant::dequantize(v, values);
      const auto q = quant::quantize(*quant_type_of(new_type), values, v.rows, v.cols);
      w.add_tensor(t.name, new_type, t.shape, q.data);
    }
  }
  const fs::path out = test::scratch_dir() / name;
  fs::remove_all(out);
  fs::create_directories(out);
  w.write(out / "kimi-k3-tiny.gguf");
  return out;
}

TEST(DataFreeChecks, GgufKStoredAsQ8_0) {
  const fs::path dir = gguf_with("gguf-k-q8", "blk.2.attn_k_b.weight", DType::kQ8_0);
  EXPECT_EQ(first_problem(dir),
            "format gguf: capability split_gguf_kv_b: MLA K projection 'blk.2.attn_k_b.weight' "
            "must remain GGUF Q4_0, got Q8_0");
}

TEST(DataFreeChecks, GgufLatentProjectionMayBeAnyGgmlType) {
  // quantized_latent_projections is true for GGUF: a Q4_0 latent projection is accepted as is.
  const fs::path dir = gguf_with("gguf-latent-q4", "blk.1.ffn_routed_down.weight", DType::kQ4_0);
  EXPECT_EQ(first_problem(dir), "no problem");
}

using test::edit_header;
using test::shard_holding;

TEST(DataFreeChecks, ModelSlimWithoutKvBProj) {
  const fs::path dir = copy_of(FormatKind::kModelSlim, "ms-no-kvb");
  const std::string name = "language_model.model.layers.5.self_attn.kv_b_proj.weight";
  // Rename the tensor (same size), as a converter that dropped kv_b_proj would leave it.
  edit_header(shard_holding(dir, name), [&](json& h) {
    h["language_model.model.layers.5.self_attn.kv_b_proj_dropped.weight"] = h[name];
    h.erase(name);
  });
  json index = json::parse(std::ifstream(dir / "model.safetensors.index.json"));
  index["weight_map"]["language_model.model.layers.5.self_attn.kv_b_proj_dropped.weight"] =
      index["weight_map"][name];
  index["weight_map"].erase(name);
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  const std::string p = first_problem(dir);
  EXPECT_EQ(
      p,
      "format modelslim: missing tensor '" + name +
          "' for model.layers.5.self_attn.kv_b_proj.weight, expected [1024, 256] (split_gguf_kv_b "
          "is false for format modelslim, so kv_b_proj must be one dense tensor)");
}

TEST(DataFreeChecks, DescriptionDisagreesWithTensors) {
  const fs::path dir = copy_of(FormatKind::kModelSlim, "ms-bad-description");
  json d = json::parse(std::ifstream(dir / "quant_model_description.json"));
  d["language_model.model.layers.0.self_attn.q_proj.weight"] = "FLOAT";  // stored as int8
  std::ofstream(dir / "quant_model_description.json") << d.dump();
  EXPECT_EQ(
      first_problem(dir),
      "format modelslim: tensor 'language_model.model.layers.0.self_attn.q_proj.weight' is I8, but "
      "quant_model_description.json says FLOAT (expected F32, F16 or BF16)");

  d["language_model.model.layers.0.self_attn.q_proj.weight"] = "W9A9";
  std::ofstream(dir / "quant_model_description.json") << d.dump();
  EXPECT_EQ(
      first_problem(dir),
      (dir / "quant_model_description.json").string() +
          ": 'language_model.model.layers.0.self_attn.q_proj.weight' has scheme 'W9A9', expected "
          "FLOAT, W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC");
}

// The description and the tensors agree in both directions.
TEST(DataFreeChecks, DescriptionCoversExactlyTheStoredWeights) {
  const fs::path dir = copy_of(FormatKind::kModelSlim, "ms-description-coverage");
  json d = json::parse(std::ifstream(dir / "quant_model_description.json"));
  d.erase("language_model.model.layers.1.input_layernorm.weight");
  d["language_model.model.layers.1.mlp.lost_proj.weight"] = "W8A8_DYNAMIC";
  std::ofstream(dir / "quant_model_description.json") << d.dump();
  const Checkpoint ck = Checkpoint::open(dir);
  const BindResult r = bind_all(ck, layout_of(1, 1, 1, false));
  const std::string text = problems_text(r.problems);
  EXPECT_NE(text.find("format modelslim: quant_model_description.json lists "
                      "'language_model.model.layers.1.mlp.lost_proj.weight' (W8A8_DYNAMIC), which "
                      "no shard holds"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("format modelslim: tensor 'language_model.model.layers.1.input_layernorm.weight' "
                "in "),
      std::string::npos)
      << text;
  EXPECT_NE(text.find(" has no entry in quant_model_description.json"), std::string::npos) << text;
  EXPECT_EQ(r.problems.size(), 2u) << text;
}

TEST(DataFreeChecks, ModelSlimKvBMarkedQuantized) {
  const fs::path dir = copy_of(FormatKind::kModelSlim, "ms-kvb-quantized");
  json d = json::parse(std::ifstream(dir / "quant_model_description.json"));
  d["language_model.model.layers.2.self_attn.kv_b_proj.weight"] = "W8A8_DYNAMIC";
  std::ofstream(dir / "quant_model_description.json") << d.dump();
  EXPECT_EQ(first_problem(dir),
            "format modelslim: quant_model_description.json marks "
            "'language_model.model.layers.2.self_attn.kv_b_proj.weight' as W8A8_DYNAMIC; Kimi-K3's "
            "ModelSlim "
            "kv_b_proj must be a dense FLOAT tensor");
}

TEST(DataFreeChecks, ShapeDisagreesWithConfig) {
  const fs::path dir = copy_of(FormatKind::kHf, "hf-bad-config");
  json cfg = json::parse(std::ifstream(dir / "config.json"));
  cfg["text_config"]["q_lora_rank"] = 96;
  std::ofstream(dir / "config.json") << cfg.dump();
  EXPECT_EQ(first_problem(dir),
            "format hf: tensor 'language_model.model.layers.2.self_attn.q_a_proj.weight' has shape "
            "[128, 512], "
            "expected [96, 512] from config.json");
}

// A config far beyond its tensors is refused from config + headers at once, before any
// per-layer or per-expert structure is sized from it.
TEST(DataFreeChecks, AbsurdConfigValuesAreRefusedAtOnce) {
  const fs::path dir = copy_of(FormatKind::kHf, "hf-absurd-config");
  const json original = json::parse(std::ifstream(dir / "config.json"));
  auto open_with = [&](const char* key, long long value) {
    json cfg = original;
    cfg["text_config"][key] = value;
    std::ofstream(dir / "config.json") << cfg.dump();
    std::string message = "accepted";
    try {
      Checkpoint::open(dir);
    } catch (const InputError& e) {
      message = e.what();
    }
    return message;
  };
  const std::string config = (dir / "config.json").string();
  EXPECT_EQ(
      open_with("num_hidden_layers", 1000000000),
      config + ": invalid Kimi-K3 config: num_hidden_layers = 1000000000, expected at most 4096");
  EXPECT_EQ(open_with("num_experts", 4000000000LL),
            config + ": key 'text_config.num_experts' is 4000000000, expected a 32-bit integer");
  EXPECT_EQ(open_with("moe_intermediate_size", 1 << 21),
            config +
                ": invalid Kimi-K3 config: moe_intermediate_size = 2097152, expected at most "
                "1048576");
  // Within the limits, but far beyond what the tensors hold.
  const std::string beyond = open_with("num_experts", 60000);
  EXPECT_EQ(beyond.rfind(config + ": the config declares at least ", 0), 0u) << beyond;
  EXPECT_NE(beyond.find("a layer, expert or head count is far beyond what the checkpoint stores"),
            std::string::npos);
  // Every synthetic checkpoint stores comfortably more than the bound asks.
  for (FormatKind kind : {FormatKind::kHf, FormatKind::kModelSlim, FormatKind::kGguf}) {
    const Checkpoint ck = Checkpoint::open(checkpoint_dir(kind));
    EXPECT_LT(ck.config().least_parameter_count() * 2 / 8, 0.8 * double(ck.tensor_bytes()))
        << format_name(kind);
  }
}

TEST(DataFreeChecks, DtypeDisagreesWithItsRole) {
  const fs::path dir = copy_of(FormatKind::kHf, "hf-bad-dtype");
  const std::string name =
      "language_model.model.layers.1.block_sparse_moe.experts.7.w3.weight_scale";
  edit_header(shard_holding(dir, name), [&](json& h) { h[name]["dtype"] = "I8"; });
  EXPECT_EQ(first_problem(dir), "format hf: capability fp4_routed_experts: '" + name +
                                    "' must be U8 (compressed-tensors MXFP4), got I8");
}

TEST(DataFreeChecks, TruncatedShard) {
  const fs::path dir = copy_of(FormatKind::kHf, "hf-truncated");
  const fs::path shard = dir / "model-00002-of-00003.safetensors";
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 1000);
  const std::string p = first_problem(dir);
  EXPECT_EQ(p.rfind(shard.string() + ": file is truncated: tensor '", 0), 0u) << p;
  EXPECT_NE(p.find("' ends at byte " + std::to_string(size) + " but the file has " +
                   std::to_string(size - 1000) + " bytes"),
            std::string::npos)
      << p;
}

TEST(DataFreeChecks, HeaderOffsetsPastTheEndOrOverlapping) {
  const fs::path dir = copy_of(FormatKind::kHf, "hf-bad-offsets");
  const fs::path shard = dir / "model-00001-of-00003.safetensors";
  const SafetensorsHeader before = read_safetensors_header(shard);
  const TensorEntry& a = before.tensors[0];
  const TensorEntry& b = before.tensors[1];
  edit_header(
      shard,
      [&](json& h) {
        // b claims a's bytes: same size needed, so give b a's offsets only if sizes match; else
        // move.
        auto off = h[b.name]["data_offsets"];
        h[b.name]["data_offsets"] = {off[0].get<std::uint64_t>() - 2,
                                     off[1].get<std::uint64_t>() - 2};
      });
  std::string p = first_problem(dir);
  EXPECT_EQ(p, shard.string() + ": tensors '" + a.name + "' and '" + b.name +
                   "' overlap at file byte " + std::to_string(b.offset - 2))
      << p;

  const fs::path dir2 = copy_of(FormatKind::kHf, "hf-past-end");
  const fs::path shard2 = dir2 / "model-00003-of-00003.safetensors";
  const SafetensorsHeader h2 = read_safetensors_header(shard2);
  const TensorEntry& last = h2.tensors.back();
  edit_header(
      shard2,
      [&](json& h) {
        auto off = h[last.name]["data_offsets"];
        h[last.name]["data_offsets"] = {off[0].get<std::uint64_t>() + 64,
                                        off[1].get<std::uint64_t>() + 64};
      });
  p = first_problem(dir2);
  EXPECT_NE(
      p.find(shard2.string() + ": file is truncated: tensor '" + last.name + "' ends at byte"),
      std::string::npos)
      << p;
}

std::string plan_error(const dist::LayoutSpec& spec) {
  const Checkpoint ck = Checkpoint::open(checkpoint_dir(FormatKind::kHf));
  const dist::Layout layout = dist::Layout::make(spec);
  const BindResult r = bind_all(ck, layout);
  EXPECT_TRUE(r.problems.empty());
  try {
    make_load_plan(ck, r.bindings, layout, 1);
  } catch (const InputError& e) {
    return e.what();
  }
  return "planned";
}

TEST(DataFreeChecks, LayoutCannotSplitHeadsOrExperts) {
  dist::LayoutSpec s;
  s.world = 6;
  s.tp = 6;  // 16 heads over attention-TP 6
  std::string m = plan_error(s);
  EXPECT_NE(
      m.find(
          "rank 1, format hf: parameter model.layers.0.self_attn.q_proj.weight: dimension 0 of 512 "
          "(16 units of 32) does not divide over the 6 ranks of the attn-tp group"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("... and "), std::string::npos) << "long lists are cut: " << m;

  // Heads divide (attention-TP 1 under DP attention) but 64 experts do not divide over EP 3.
  s.dp = 6;
  s.ep = 3;
  s.enable_dp_attention = true;
  s.enable_dp_lm_head = true;
  s.enable_dense_mlp_attn_tp = true;
  s.enable_shared_experts_attn_tp = true;
  m = plan_error(s);
  EXPECT_EQ(m.rfind("15 problem(s) planning the load:\n  rank 1, format hf: parameter "
                    "model.layers.1.block_sparse_moe.experts.w1: dimension 0 of 64 (64 units of 1) "
                    "does not divide "
                    "over the 3 ranks of the moe-ep group",
                    0),
            0u)
      << m;
}

TEST(Vocabulary, GgufAndTiktokenFilesGiveTheSameIds) {
  const Tokenizer from_tiktoken = open_tokenizer(checkpoint_dir(FormatKind::kHf));
  const Tokenizer from_gguf = open_tokenizer(checkpoint_dir(FormatKind::kGguf));
  const Tokenizer from_split =
      open_tokenizer(checkpoint_dir(FormatKind::kGguf) / "kimi-k3-tiny-00002-of-00003.gguf");
  EXPECT_EQ(from_tiktoken.size(), 4352);
  EXPECT_EQ(from_gguf.size(), 4352);
  EXPECT_EQ(from_tiktoken.stop_id(), 4098);
  EXPECT_EQ(from_gguf.stop_id(), 4098);
  const auto texts =
      read_jsonl_corpus(test::source_dir() / ".." / "shared" / "data" / "gsm8k" / "test.jsonl");
  ASSERT_EQ(texts.size(), 2 * 1319u);
  for (const std::string& t : texts) {
    const auto ids = from_tiktoken.encode(t);
    ASSERT_EQ(from_gguf.encode(t), ids) << t;
    ASSERT_EQ(from_split.encode(t), ids) << t;
    ASSERT_EQ(from_gguf.decode(ids), t);
  }
}

// The whole model as one rank loads it: what every layout's slices must rebuild. Each
// tensor's values are materialized once for all layouts (under the sanitizers a fresh buffer's
// page faults are most of the cost).
struct WholeModel {
  Checkpoint ck;
  LoadResult whole;
  mutable std::map<std::string, std::vector<float>> values;  // by key, as first compared
  // Each layout's rebuilt tensors and per-element copy counts, by key: kept from one layout to
  // the next and cleared, so their pages are touched once (under the sanitizers a fresh
  // buffer's page faults were about a quarter of the test).
  mutable std::map<std::string, std::vector<float>> rebuilt;
  mutable std::map<std::string, std::vector<int>> covered;
  mutable std::vector<float> slice_values;  // one slice's values at a time
  const std::vector<float>& values_of(const std::string& key, const Weight& w) const {
    auto it = values.find(key);
    if (it == values.end()) it = values.emplace(key, w.floats()).first;
    return it->second;
  }
};
WholeModel load_whole(FormatKind kind) {
  Checkpoint ck = Checkpoint::open(checkpoint_dir(kind));
  const BindResult bound = bind_all(ck, layout_of(1, 1, 1, false));
  if (!bound.problems.empty()) throw InputError(problems_text(bound.problems));
  const LoadPlan plan = make_load_plan(ck, bound.bindings, layout_of(1, 1, 1, false), 0);
  LoadResult whole = load(ck, plan);
  return {std::move(ck), std::move(whole), {}, {}, {}, {}};
}

// The union of every rank's slices equals the whole tensor, element for element: each element
// bit-identical, and held by exactly one rank (split) or by every rank alike (replicated).
void check_reconstruction(const WholeModel& model, FormatKind kind, const dist::Layout& layout) {
  SCOPED_TRACE(std::string(format_name(kind)) + " " + layout.summary());
  const Checkpoint& ck = model.ck;
  const BindResult bound = bind_all(ck, layout);
  ASSERT_TRUE(bound.problems.empty());
  auto& rebuilt = model.rebuilt;
  auto& covered = model.covered;
  for (auto& [key, values] : rebuilt) std::fill(values.begin(), values.end(), 0.0f);
  for (auto& [key, copies] : covered) std::fill(copies.begin(), copies.end(), 0);
  for (int r = 0; r < layout.world(); ++r) {
    const LoadPlan plan = make_load_plan(ck, bound.bindings, layout, r);
    const LoadResult part = load(ck, plan);
    ASSERT_TRUE(audit(ck, plan, part.weights).empty())
        << problems_text(audit(ck, plan, part.weights));
    for (const auto& [name, w] : part.weights.all()) {
      const Weight& full = model.whole.weights.get(name);
      // Copies the slice into its place in the full tensor, one innermost run at a time.
      auto place = [&](const Weight& slice, const Weight& fullw, const std::string& key,
                       const std::vector<std::int64_t>& begin) {
        std::vector<float>& scratch = model.slice_values;
        scratch.resize(std::max(scratch.size(), slice.element_count()));
        const std::span<float> local(scratch.data(), slice.element_count());
        slice.floats_into(local);
        auto& dst = rebuilt[key];
        auto& cov = covered[key];
        std::size_t total = 1;
        for (auto d : fullw.shape) total *= static_cast<std::size_t>(d);
        dst.resize(total, 0.0f);
        cov.resize(total, 0);
        const auto& ext = slice.shape;
        if (ext.empty() || local.empty()) return;
        const auto run = static_cast<std::size_t>(ext.back());
        std::vector<std::int64_t> idx(ext.size(), 0);  // the run's start; idx.back() stays 0
        for (std::size_t i = 0; i < local.size(); i += run) {
          std::size_t flat = 0;
          for (std::size_t d = 0; d < ext.size(); ++d)
            flat = flat * fullw.shape[d] + (begin[d] + idx[d]);
          std::copy_n(local.begin() + i, run, dst.begin() + flat);
          for (std::size_t j = 0; j < run; ++j) ++cov[flat + j];
          for (std::size_t d = ext.size() - 1; d-- > 0;) {
            if (++idx[d] < ext[d]) break;
            idx[d] = 0;
          }
        }
      };
      if (w.split_kv()) {
        const std::int64_t head0 = w.box.begin[0] / (w.box.extent()[0] / w.k_b->shape[0]);
        place(*w.k_b, *full.k_b, name + ".k_b", {head0, 0, 0});
        place(*w.v_b, *full.v_b, name + ".v_b", {head0, 0, 0});
      } else {
        place(w, full, name, w.box.begin);
      }
    }
  }
  for (const auto& [key, values] : rebuilt) {
    const std::string name =
        key.substr(0, key.rfind(".k_b") == key.size() - 4 || key.rfind(".v_b") == key.size() - 4
                          ? key.size() - 4
                          : key.size());
    const Weight& full = model.whole.weights.get(name);
    const Weight& src =
        key == name ? full
                    : (key.back() == 'b' && key[key.size() - 3] == 'k' ? *full.k_b : *full.v_b);
    const std::vector<float>& expected = model.values_of(key, src);
    ASSERT_EQ(values.size(), expected.size()) << key;
    const auto& cov = covered[key];
    // Replicated parameters are held by every rank; split ones by exactly one.
    const int copies = cov.empty() ? 0 : cov[0];
    ASSERT_GT(copies, 0) << key << " is held by no rank of this layout";
    const auto uneven = std::find_if(cov.begin(), cov.end(), [&](int c) { return c != copies; });
    ASSERT_TRUE(uneven == cov.end())
        << key << " element " << (uneven - cov.begin()) << " covered " << *uneven << " times, "
        << "element 0 " << copies << " times";
    if (std::memcmp(values.data(), expected.data(), values.size() * sizeof(float)) != 0) {
      std::size_t i = 0;
      while (std::memcmp(&values[i], &expected[i], sizeof(float)) == 0) ++i;
      FAIL() << key << " element " << i << ": rebuilt " << values[i] << ", whole " << expected[i];
    }
  }
}

// One test per format: each loads every slice of four layouts (minutes under the sanitizers).
void reconstruct_at_1_4_8_64_ranks(FormatKind kind) {
  const WholeModel model = load_whole(kind);
  check_reconstruction(model, kind, layout_of(1, 1, 1, false));
  check_reconstruction(model, kind, layout_of(4, 2, 4, true));
  // 8 ranks as two replicas of TP4; safetensors formats also split each expert over MoE-TP 2,
  // which GGUF's Q3_K expert rows of 256 cannot (see KQuantColumnsCannotSplitInsideABlock).
  check_reconstruction(model, kind, layout_of(8, 2, kind == FormatKind::kGguf ? 4 : 2, false));
  check_reconstruction(model, kind, layout_of(64, 4, 64, true));
}

TEST(Slices, ReconstructEveryHfTensorAt1_4_8_64Ranks) {
  reconstruct_at_1_4_8_64_ranks(FormatKind::kHf);
}
TEST(Slices, ReconstructEveryModelSlimTensorAt1_4_8_64Ranks) {
  reconstruct_at_1_4_8_64_ranks(FormatKind::kModelSlim);
}
TEST(Slices, ReconstructEveryGgufTensorAt1_4_8_64Ranks) {
  reconstruct_at_1_4_8_64_ranks(FormatKind::kGguf);
}

// What the planning rank sends is what the rank would have planned itself.
TEST(Pipeline, ConfigsAndPlansSurviveTheWire) {
  for (FormatKind kind : {FormatKind::kHf, FormatKind::kModelSlim, FormatKind::kGguf}) {
    const dist::Layout layout = layout_of(8, 2, 8, true);
    const JobPlan job = plan_job(checkpoint_dir(kind), std::nullopt, layout);
    const std::string config = to_wire(job.checkpoint.config());
    EXPECT_EQ(to_wire(from_wire<ModelConfig>(config)), config) << format_name(kind);
    EXPECT_EQ(from_wire<ModelConfig>(config).num_experts, job.checkpoint.config().num_experts);
    for (int rank = 0; rank < layout.world(); ++rank) {
      const LoadPlan plan = make_load_plan(job.checkpoint, job.bound.bindings, layout, rank);
      const std::string bytes = to_wire(plan);
      const LoadPlan back = from_wire<LoadPlan>(bytes);
      EXPECT_EQ(to_wire(back), bytes);
      ASSERT_EQ(back.params.size(), plan.params.size());
      EXPECT_EQ(back.bytes, plan.bytes);
      EXPECT_EQ(back.files, plan.files);
      for (std::size_t i = 0; i < plan.params.size(); ++i) {
        EXPECT_EQ(back.params[i].spec.name, plan.params[i].spec.name);
        EXPECT_EQ(back.params[i].repr.text, plan.params[i].repr.text);
        EXPECT_EQ(back.params[i].box.begin, plan.params[i].box.begin);
        ASSERT_EQ(back.params[i].reads.size(), plan.params[i].reads.size());
        for (std::size_t r = 0; r < plan.params[i].reads.size(); ++r) {
          EXPECT_EQ(back.params[i].reads[r].tensor, plan.params[i].reads[r].tensor);
          EXPECT_EQ(back.params[i].reads[r].runs.size(), plan.params[i].reads[r].runs.size());
        }
      }
    }
  }
}

TEST(Slices, KQuantColumnsCannotSplitInsideABlock) {
  const Checkpoint ck = Checkpoint::open(checkpoint_dir(FormatKind::kGguf));
  const dist::Layout layout = layout_of(8, 2, 2, false);  // MoE-TP 2 splits the 256 expert columns
  const BindResult r = bind_all(ck, layout);
  try {
    make_load_plan(ck, r.bindings, layout, 0);
    FAIL() << "split a Q3_K block";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "rank 0, format gguf: parameter model.layers.1.block_sparse_moe.experts.w2 "
                  "(blk.1.ffn_down_exps.weight): columns [0, 128) of a Q3_K row do not fall on its "
                  "256-element "
                  "block boundaries"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace k3::model
