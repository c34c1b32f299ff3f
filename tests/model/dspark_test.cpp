// The DSpark drafter SGLang serves (RadixArk/Kimi-K3-DSpark) as a checkpoint: its config.json
// (parsed, validated, written back), the presets against the published shapes, its typed
// definition and how the parallel layout splits it, and the synthetic draft end to end (detected,
// bound, planned, loaded and audited; derived from its target's weights as docs/FORMATS.md says).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/checkpoint/checkpoint.h"
#include "model/config.h"
#include "model/load/load_plan.h"
#include "model/load/loader.h"
#include "model/parameters.h"
#include "model/load/pipeline.h"
#include "model/synth/synth.h"
#include "model/load/weights.h"
#include "model/load/wire.h"
#include "quant/fp.h"
#include "tests/model/test_dirs.h"

namespace k3::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

dist::Layout tp_layout(int tp) {
  dist::LayoutSpec s;
  s.world = tp;
  s.tp = tp;
  return dist::Layout::make(s);
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::vector<std::string> names_of(const DSparkWeights<ParamSpec>& tree) {
  std::vector<std::string> names;
  for_each_weight(tree, [&](const ParamSpec& s) { names.push_back(s.name); });
  return names;
}

// The message of the InputError `f` throws ("accepted" when it throws none).
std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// ------------------------------------------------------------------------------ presets

TEST(DSparkPresets, FullIsRadixArkExactly) {
  const ModelConfig c = draft_preset_config("full");
  ASSERT_TRUE(c.is_draft());
  const DSparkConfig& d = *c.dspark;
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(d.num_key_value_heads, 16);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(d.block_size, 7);
  EXPECT_EQ(d.mask_token_id, 163824);
  EXPECT_EQ(d.target_layer_ids, (std::vector<int>{7, 23, 51, 67, 83}));
  EXPECT_EQ(d.markov_rank, 256);
  EXPECT_TRUE(d.confidence_head);
  EXPECT_TRUE(d.tap_attn_res);
  EXPECT_EQ(d.rope_factor, 16);
  EXPECT_EQ(d.rope_original_max_position, 65536);
  EXPECT_EQ(d.rope_theta, 10000);
  EXPECT_EQ(c.rms_norm_eps, preset_config("full").rms_norm_eps);

  // The published parameter count, in 62 tensors; no MLA kv_b, no split-GGUF K/V.
  const std::vector<ParamSpec> specs = kimi_k3_parameters(c, tp_layout(1));
  std::int64_t parameters = 0;
  for (const ParamSpec& s : specs) parameters += numel(s.shape);
  EXPECT_EQ(parameters, 2249289601);
  EXPECT_EQ(specs.size(), 62u);
  for (const ParamSpec& s : specs) {
    EXPECT_EQ(s.name.find("kv_b"), std::string::npos) << s.name;
    EXPECT_EQ(s.name.find("k_b."), std::string::npos) << s.name;
    EXPECT_EQ(s.name.find("v_b."), std::string::npos) << s.name;
    EXPECT_EQ(s.name.find("embed_tokens"), std::string::npos) << s.name;
    EXPECT_EQ(s.name.find("lm_head"), std::string::npos) << s.name;
    EXPECT_NE(s.family, ParamFamily::kMlaKvB) << s.name;
  }
}

TEST(DSparkPresets, TinyFitsTheTinyTarget) {
  const ModelConfig target = preset_config("tiny");
  const ModelConfig c = draft_preset_config("tiny");
  const DSparkConfig& d = *c.dspark;
  EXPECT_EQ(c.hidden_size, target.hidden_size);
  EXPECT_EQ(c.vocab_size, target.vocab_size);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(d.num_key_value_heads, 16);
  EXPECT_EQ(d.head_dim, 16);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(d.mask_token_id, 4336);
  EXPECT_EQ(d.target_layer_ids, (std::vector<int>{0, 1, 2, 4, 5}));
  EXPECT_EQ(d.markov_rank, 512);
  EXPECT_TRUE(d.confidence_head);
  for (int l : d.target_layer_ids) EXPECT_LT(l, target.num_hidden_layers);
  std::int64_t parameters = 0;
  for (const ParamSpec& s : kimi_k3_parameters(c, tp_layout(1))) parameters += numel(s.shape);
  // 5 x (q 512x512 + k, v 256x512 + o 512x512 + MLP 3x1024x512 + norms 2x512 + 2x16) + fc
  // 512x2560 + 2 norms + Markov 2x4352x512 + confidence 1024 + 1.
  EXPECT_EQ(parameters, 5 * (2 * 262144 + 2 * 131072 + 3 * 524288 + 1024 + 32) + 1310720 + 1024 +
                            2 * 2228224 + 1025);
}

// ------------------------------------------------------------------------------- config

TEST(DSparkConfigJson, RoundTripsThroughItsOwnLayout) {
  std::vector<ModelConfig> configs = {draft_preset_config("tiny"), draft_preset_config("full")};
  ModelConfig other = draft_preset_config("tiny");
  other.dspark->tap_attn_res = false;
  other.dspark->block_size = 4;
  other.dspark->confidence_head = false;
  other.dspark->confidence_with_markov = false;
  other.dspark->rope_factor = 1;
  other.dspark->rope_original_max_position = 0;
  other.dspark->rope_theta = 1e6;
  other.rms_norm_eps = 1e-6;
  configs.push_back(other);
  for (const ModelConfig& c : configs) {
    const json written = to_config_json(c);
    EXPECT_EQ(written.at("architectures"), json({"DSparkDraftModel"}));
    EXPECT_EQ(written.at("dflash_config").at("attention_mode"), "gqa");
    const ModelConfig back = parse_config_json(written, "round-trip/config.json");
    EXPECT_TRUE(back.is_draft());
    EXPECT_EQ(to_wire(back), to_wire(c)) << written.dump(1);
    EXPECT_EQ(to_config_json(back), written);
  }
  EXPECT_EQ(to_config_json(other).at("rope_parameters"),
            json({{"rope_type", "default"}, {"rope_theta", 1e6}}));
  EXPECT_EQ(to_config_json(other).at("aux_hidden_stream"), "prefix");
}

// RadixArk's layout as SpecForge writes it: rope_theta at the top level, no block_size (7), no
// aux_hidden_stream ("attn_res"), keys the reader does not need (layer_types, bos/eos ids).
TEST(DSparkConfigJson, ReadsTheRadixArkLayout) {
  const json radixark = json::parse(R"({
    "architectures": ["DSparkDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 7168,
    "intermediate_size": 14336,
    "num_hidden_layers": 5,
    "num_attention_heads": 64,
    "num_key_value_heads": 16,
    "head_dim": 64,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "vocab_size": 163840,
    "max_position_embeddings": 1048576,
    "rope_theta": 10000,
    "rope_parameters": {"rope_type": "yarn", "factor": 16.0,
                        "original_max_position_embeddings": 65536},
    "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention",
                    "full_attention"],
    "bos_token_id": 163584,
    "eos_token_id": 163586,
    "tie_word_embeddings": false,
    "torch_dtype": "bfloat16",
    "dflash_config": {"attention_mode": "gqa", "markov_rank": 256, "markov_head_type": "vanilla",
                      "mask_token_id": 163824, "target_layer_ids": [7, 23, 51, 67, 83],
                      "enable_confidence_head": true, "confidence_head_with_markov": true}
  })");
  const ModelConfig c = parse_config_json(radixark, "RadixArk/config.json");
  EXPECT_EQ(to_wire(c), to_wire(draft_preset_config("full")));
}

// Each refusal names the file and the key (and, for the drafters k3eval does not read, why).
TEST(DSparkConfigJson, BadKeysNameTheFileAndTheKey) {
  struct Bad {
    std::string what;
    std::function<void(json&)> edit;
    std::vector<std::string> says;
  };
  const std::vector<Bad> cases = {
      {"speculators",
       [](json& c) { c["speculators_model_type"] = "dspark"; },
       {"key 'speculators_model_type' is \"dspark\"", "SGLang refuses"}},
      {"mla attention",
       [](json& c) { c["dflash_config"]["attention_mode"] = "mla"; },
       {"key 'dflash_config.attention_mode' is \"mla\", expected \"gqa\"",
        "the MLA DSpark drafter (K3DSparkModel) is not supported"}},
      {"mla model type",
       [](json& c) { c["model_type"] = "k3_dspark"; },
       {"the MLA DSpark drafter (K3DSparkModel, model_type k3_dspark) is not supported"}},
      {"mla architecture",
       [](json& c) { c["architectures"] = {"K3DSparkModel"}; },
       {"K3DSparkModel"}},
      {"markov head",
       [](json& c) { c["dflash_config"]["markov_head_type"] = "rnn"; },
       {"key 'dflash_config.markov_head_type' is \"rnn\", expected \"vanilla\""}},
      {"kv heads",
       [](json& c) { c["num_key_value_heads"] = 12; },
       {"num_attention_heads = 32, expected a multiple of num_key_value_heads = 12"}},
      {"taps descending",
       [](json& c) {
         c["dflash_config"]["target_layer_ids"] = {0, 2, 1};
       },
       {"dflash_config.target_layer_ids is not ascending and unique: 1 follows 2"}},
      {"taps repeated",
       [](json& c) {
         c["dflash_config"]["target_layer_ids"] = {0, 2, 2};
       },
       {"dflash_config.target_layer_ids is not ascending and unique: 2 follows 2"}},
      {"tap negative",
       [](json& c) {
         c["dflash_config"]["target_layer_ids"] = {-1, 2};
       },
       {"dflash_config.target_layer_ids entry -1 is negative"}},
      {"no taps",
       [](json& c) { c["dflash_config"]["target_layer_ids"] = json::array(); },
       {"dflash_config.target_layer_ids is empty"}},
      {"taps not integers",
       [](json& c) { c["dflash_config"]["target_layer_ids"] = {0.5}; },
       {"key 'dflash_config.target_layer_ids'", "expected an array of integers"}},
      {"mask token",
       [](json& c) { c["dflash_config"]["mask_token_id"] = 4352; },
       {"dflash_config.mask_token_id = 4352 outside the vocabulary (vocab_size 4352)"}},
      {"block size 0", [](json& c) { c["block_size"] = 0; }, {"block_size = 0, expected 1..64"}},
      {"block size 65", [](json& c) { c["block_size"] = 65; }, {"block_size = 65, expected 1..64"}},
      {"stream",
       [](json& c) { c["aux_hidden_stream"] = "residual"; },
       {"key 'aux_hidden_stream' is \"residual\", expected \"attn_res\" or \"prefix\""}},
      {"rope type",
       [](json& c) { c["rope_parameters"]["rope_type"] = "linear"; },
       {"key 'rope_parameters.rope_type' is \"linear\""}},
      {"rope theta",
       [](json& c) { c["rope_parameters"].erase("rope_theta"); },
       {"missing key 'rope_theta'"}},
      {"yarn factor",
       [](json& c) { c["rope_parameters"].erase("factor"); },
       {"missing key 'rope_parameters.factor'"}},
      {"yarn original",
       [](json& c) { c["rope_parameters"]["original_max_position_embeddings"] = 0; },
       {"rope_parameters.original_max_position_embeddings = 0, expected > 0 with YaRN"}},
      {"hidden act", [](json& c) { c["hidden_act"] = "gelu"; }, {"key 'hidden_act' is \"gelu\""}},
      {"layer types short",
       [](json& c) { c["layer_types"] = {"full_attention"}; },
       {"key 'layer_types' is [\"full_attention\"], with 1 entries, expected one per layer "
        "(num_hidden_layers = "}},
      {"sliding layer",
       [](json& c) { c["layer_types"][1] = "sliding_attention"; },
       {"key 'layer_types'", "entry 1 is \"sliding_attention\", expected \"full_attention\""}},
      {"layer types not a list",
       [](json& c) { c["layer_types"] = "full_attention"; },
       {"key 'layer_types' is \"full_attention\", expected an array of layer kinds"}},
      {"sliding window",
       [](json& c) { c["use_sliding_window"] = true; },
       {"key 'use_sliding_window' is true, expected false"}},
      {"attention bias",
       [](json& c) { c["attention_bias"] = true; },
       {"key 'attention_bias' is true, expected false"}},
      {"mlp bias", [](json& c) { c["mlp_bias"] = true; }, {"key 'mlp_bias' is true, expected false"}},
      {"head dim missing", [](json& c) { c.erase("head_dim"); }, {"missing key 'head_dim'"}},
      {"markov rank",
       [](json& c) { c["dflash_config"]["markov_rank"] = 0; },
       {"dflash_config.markov_rank = 0"}},
      {"mask missing",
       [](json& c) { c["dflash_config"].erase("mask_token_id"); },
       {"missing key 'dflash_config.mask_token_id'"}},
  };
  const fs::path dir = test::scratch_dir() / "dspark-config";
  fs::create_directories(dir);
  const fs::path file = dir / "config.json";
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    json config = to_config_json(draft_preset_config("tiny"));
    b.edit(config);
    std::ofstream(file) << config.dump(1);
    const std::string message = input_error([&] { read_config_json(file); });
    EXPECT_EQ(message.rfind(file.string() + ": ", 0), 0u) << message;
    for (const std::string& s : b.says) EXPECT_NE(message.find(s), std::string::npos) << message;
  }
}

// ---------------------------------------------------------------------------- definition

TEST(DSparkDefinition, FlatListIsTheTreeInOrderWithRadixArkNames) {
  const ModelConfig c = draft_preset_config("tiny");
  const DSparkWeights<ParamSpec> tree = dspark_definition(c, tp_layout(1));
  std::vector<std::string> flat;
  for (const ParamSpec& s : kimi_k3_parameters(c, tp_layout(1))) flat.push_back(s.name);
  const std::vector<std::string> names = names_of(tree);
  EXPECT_EQ(names, flat);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  const std::vector<std::string> first = {"fc.weight",
                                          "hidden_norm.weight",
                                          "norm.weight",
                                          "markov_head.markov_w1.weight",
                                          "markov_head.markov_w2.weight",
                                          "confidence_head.proj.weight",
                                          "confidence_head.proj.bias",
                                          "layers.0.input_layernorm.weight",
                                          "layers.0.post_attention_layernorm.weight",
                                          "layers.0.self_attn.q_proj.weight",
                                          "layers.0.self_attn.k_proj.weight",
                                          "layers.0.self_attn.v_proj.weight",
                                          "layers.0.self_attn.o_proj.weight",
                                          "layers.0.self_attn.q_norm.weight",
                                          "layers.0.self_attn.k_norm.weight",
                                          "layers.0.mlp.gate_proj.weight",
                                          "layers.0.mlp.up_proj.weight",
                                          "layers.0.mlp.down_proj.weight"};
  ASSERT_GE(names.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 18), first);
  EXPECT_EQ(tree.confidence_proj->shape, (std::vector<std::int64_t>{1, 1024}));
  EXPECT_EQ(tree.fc.shape, (std::vector<std::int64_t>{512, 2560}));
  EXPECT_EQ(tree.markov_w1.family, ParamFamily::kLinear);
  EXPECT_EQ(tree.layers.at(4).o_proj.shape, (std::vector<std::int64_t>{512, 512}));

  ModelConfig without = c;
  without.dspark->confidence_head = false;
  const DSparkWeights<ParamSpec> bare = dspark_definition(without, tp_layout(1));
  EXPECT_FALSE(bare.confidence_proj || bare.confidence_bias);
  EXPECT_EQ(names_of(bare).size(), names.size() - 2);

  EXPECT_THROW(kimi_k3_definition(c, tp_layout(1)), InternalError);
  EXPECT_THROW(dspark_definition(preset_config("tiny"), tp_layout(1)), InternalError);
}

// Heads (Q, K, V by rows, o_proj by columns), the MLP and markov_w2 split over attention TP;
// the rest is replicated.
TEST(DSparkDefinition, SplitsOverAttentionTp2And16) {
  const ModelConfig c = draft_preset_config("tiny");
  for (int tp : {2, 16}) {
    SCOPED_TRACE(tp);
    const dist::Layout layout = tp_layout(tp);
    const DSparkWeights<ParamSpec> tree = dspark_definition(c, layout);
    for (int rank = 0; rank < tp; ++rank) {
      auto box = [&](const ParamSpec& s) { return slice_for_rank(s, layout, rank); };
      auto rows = [&](const ParamSpec& s, std::int64_t all) {
        const SliceBox b = box(s);
        EXPECT_EQ(b.begin[0], all / tp * rank) << s.name;
        EXPECT_EQ(b.end[0] - b.begin[0], all / tp) << s.name;
        EXPECT_EQ(b.end[1] - b.begin[1], s.shape[1]) << s.name;
      };
      auto cols = [&](const ParamSpec& s, std::int64_t all) {
        const SliceBox b = box(s);
        EXPECT_EQ(b.begin[1], all / tp * rank) << s.name;
        EXPECT_EQ(b.end[1] - b.begin[1], all / tp) << s.name;
        EXPECT_EQ(b.end[0] - b.begin[0], s.shape[0]) << s.name;
      };
      for (const DSparkLayerWeights<ParamSpec>& l : tree.layers) {
        rows(l.q_proj, 512);
        rows(l.k_proj, 256);
        rows(l.v_proj, 256);
        cols(l.o_proj, 512);
        rows(l.mlp.gate_proj, 1024);
        rows(l.mlp.up_proj, 1024);
        cols(l.mlp.down_proj, 1024);
        for (const ParamSpec* s : {&l.q_norm, &l.k_norm, &l.input_layernorm})
          EXPECT_TRUE(box(*s).full(s->shape)) << s->name;
      }
      rows(tree.markov_w2, 4352);
      for (const ParamSpec* s : {&tree.fc, &tree.markov_w1, &tree.norm, &tree.hidden_norm,
                                 &*tree.confidence_proj, &*tree.confidence_bias})
        EXPECT_TRUE(box(*s).full(s->shape)) << s->name;
    }
  }
  // 32 Q heads divide over attention-TP 32, 16 KV heads do not.
  const dist::Layout layout = tp_layout(32);
  const DSparkWeights<ParamSpec> tree = dspark_definition(c, layout);
  EXPECT_NO_THROW(slice_for_rank(tree.layers[0].q_proj, layout, 0));
  EXPECT_EQ(input_error([&] { slice_for_rank(tree.layers[0].k_proj, layout, 5); }),
            "parameter layers.0.self_attn.k_proj.weight: dimension 0 of 256 (16 units of 16) does "
            "not divide over the 32 ranks of the attn-tp group");
}

// ---------------------------------------------------------------------------- checkpoint

fs::path synthetic_draft() {
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

TEST(DSparkCheckpoint, SynthesizedDraftIsDetectedBoundLoadedAndAuditedClean) {
  const fs::path dir = synthetic_draft();
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.format().kind(), FormatKind::kDraft);
  EXPECT_TRUE(ck.format().has(Capability::kDraftModel));
  EXPECT_TRUE(ck.config().is_draft());
  EXPECT_EQ(to_wire(ck.config()), to_wire(draft_preset_config("tiny")));
  EXPECT_EQ(ck.tensors().size(), 62u);
  EXPECT_EQ(ck.name_prefix(), "");
  for (const StoredTensor& t : ck.tensors()) EXPECT_EQ(t.entry.dtype, DType::kBF16) << t.entry.name;

  for (int tp : {1, 4}) {
    SCOPED_TRACE(tp);
    const dist::Layout layout = tp_layout(tp);
    const JobPlan job = plan_job(dir, std::nullopt, layout);
    EXPECT_TRUE(job.bound.problems.empty());
    EXPECT_TRUE(job.bound.ignored.empty());
    for (int rank = 0; rank < tp; ++rank) {
      const LoadPlan plan = make_load_plan(job.checkpoint, job.bound.bindings, layout, rank);
      const LoadResult loaded = load(job.checkpoint, plan);
      EXPECT_TRUE(audit(job.checkpoint, plan, loaded.weights).empty());
      // The typed tree resolves every field to the loaded weight of its name.
      const DSparkWeights<const Weight*> w =
          dspark_weight_tree(loaded.weights, job.checkpoint.config(), layout);
      const std::vector<std::string> names =
          names_of(dspark_definition(job.checkpoint.config(), layout));
      std::vector<std::string> resolved;
      for_each_weight(w, [&](const Weight* weight) {
        ASSERT_NE(weight, nullptr);
        resolved.push_back(weight->name);
      });
      EXPECT_EQ(resolved, names);
      EXPECT_EQ(loaded.weights.all().size(), names.size());
      EXPECT_EQ(w.layers[0].k_proj->shape, (std::vector<std::int64_t>{256 / tp, 512}));
      EXPECT_EQ(w.markov_w2->shape, (std::vector<std::int64_t>{4352 / tp, 512}));
      EXPECT_EQ(w.fc->type, quant::Type::kBF16);
      EXPECT_EQ(w.norm->type, quant::Type::kF32);
    }
  }
}

// docs/FORMATS.md, "The DSpark draft": the Markov head holds the target's logits for a stream
// equal to the previous token's embedding, the final norm is 1/16 of the target's, fc
// averages the taps. Checked against the tiny hf target of the same seed (both stored BF16).
TEST(DSparkCheckpoint, SyntheticDraftIsDerivedFromItsTargetsWeights) {
  const dist::Layout one = tp_layout(1);
  const LoadResult draft = load_rank(plan_job(synthetic_draft(), std::nullopt, one), one, 0);
  const LoadResult target =
      load_rank(plan_job(test::synthetic_checkpoint(FormatKind::kHf), std::nullopt, one), one, 0);
  const std::int64_t H = 512, V = 4352;
  const std::vector<float> w1 = draft.weights.get("markov_head.markov_w1.weight").floats();
  const std::vector<float> w2 = draft.weights.get("markov_head.markov_w2.weight").floats();
  const std::vector<float> fc = draft.weights.get("fc.weight").floats();
  const std::vector<float> norm = draft.weights.get("norm.weight").floats();
  const std::vector<float> E = target.weights.get("model.embed_tokens.weight").floats();
  const std::vector<float> lm = target.weights.get("lm_head.weight").floats();
  const std::vector<float> g = target.weights.get("model.norm.weight").floats();
  const double eps = preset_config("tiny").rms_norm_eps;

  for (std::int64_t d = 0; d < H; ++d) EXPECT_NEAR(norm[d], 0.0625f * g[d], 5e-4f * g[d]) << d;
  for (std::int64_t i = 0; i < H; i += 37) {
    for (std::int64_t j = 0; j < 5 * H; ++j) {
      ASSERT_EQ(fc[i * 5 * H + j], j % H == i ? quant::bf16_to_f32(quant::f32_to_bf16(0.2f)) : 0.0f)
          << i << ", " << j;
    }
  }
  int argmax_agree = 0, tokens = 0;
  for (std::int64_t x = 0; x < V; x += 97, ++tokens) {
    const float* e = E.data() + x * H;
    double squares = 0;
    for (std::int64_t d = 0; d < H; ++d) squares += double(e[d]) * e[d];
    const double inv_rms = 1 / std::sqrt(squares / H + eps);
    std::vector<double> bigram(V), markov(V);
    double largest = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      for (std::int64_t d = 0; d < H; ++d) {
        bigram[v] += double(lm[v * H + d]) * g[d] * e[d] * inv_rms;
        markov[v] += double(w2[v * H + d]) * w1[x * H + d];
      }
      largest = std::max(largest, std::abs(bigram[v]));
    }
    for (std::int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(markov[v], bigram[v], 0.02 * largest) << "token " << x << ", logit " << v;
    argmax_agree += std::max_element(markov.begin(), markov.end()) - markov.begin() ==
                    std::max_element(bigram.begin(), bigram.end()) - bigram.begin();
  }
  EXPECT_EQ(argmax_agree, tokens);
}

TEST(DSparkCheckpoint, LoadFormatMustFitTheConfig) {
  const fs::path draft = synthetic_draft();
  const fs::path hf = test::synthetic_checkpoint(FormatKind::kHf);
  EXPECT_EQ(input_error([&] { Checkpoint::open(draft, FormatKind::kHf); }),
            (draft / "config.json").string() +
                ": a DSpark draft's config (it has a dflash_config) does not fit --load-format hf");
  EXPECT_EQ(input_error([&] { Checkpoint::open(hf, FormatKind::kDraft); }),
            (hf / "config.json").string() +
                ": a Kimi-K3 model's config (no dflash_config, not a DSpark draft) does not fit "
                "--load-format draft");
}

// The full preset's draft is written header-only (its shapes, no values) and plans at the
// production layout (attention-TP 16: one KV head per rank).
TEST(DSparkCheckpoint, FullHeaderOnlyDraftPlansAtTheProductionLayout) {
  const fs::path dir = test::scratch_dir() / "full-draft-header-only";
  fs::remove_all(dir);
  SynthOptions o;
  o.preset = "full";
  o.format = FormatKind::kDraft;
  o.out = dir;
  o.header_only = true;
  const SynthSummary summary = synthesize_checkpoint(o);
  EXPECT_EQ(summary.tensors, 62u);
  EXPECT_EQ(summary.bytes, 2ull * 2249289601ull);
  dist::LayoutSpec s;
  s.world = 64;
  s.tp = 64;
  s.dp = 4;
  s.ep = 64;
  s.enable_dp_attention = true;
  s.enable_dp_lm_head = true;
  const dist::Layout layout = dist::Layout::make(s);
  const JobPlan job = plan_job(dir, std::nullopt, layout);
  EXPECT_EQ(to_wire(job.checkpoint.config()), to_wire(draft_preset_config("full")));
  const LoadPlan plan = make_load_plan(job.checkpoint, job.bound.bindings, layout, 17);
  EXPECT_EQ(plan.params.size(), 62u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace k3::model
