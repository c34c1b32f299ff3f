// model::synthesize_checkpoint: writes a checkpoint with the real Kimi-K3 architecture and
// tensor names, random weights from one seed, in any supported format. The formats encode the
// same logical weights, so they can be compared number for number.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/checkpoint/format.h"
#include "model/synth/mutants.h"

namespace k3::model {

struct SynthOptions {
  std::string preset = "tiny";  // tiny | wide | full
  FormatKind format = FormatKind::kHf;
  std::filesystem::path out;
  std::uint64_t seed = 0;
  int shards = 1;
  bool header_only = false;  // shapes and headers only; tensor bytes are sparse holes
  // JSONL corpus for the tiny preset's trained BPE vocabulary (every string value of every line,
  // e.g. GSM8K's train.jsonl). The full preset writes no tiktoken.model (it is never run).
  std::filesystem::path corpus;
  // Config fields replacing the preset's (hidden_size, num_hidden_layers, num_attention_heads,
  // kda_num_heads, num_experts, routed_expert_hidden_size, moe_intermediate_size, base vocabulary
  // "vocab"): k3ckpt synth --set name=value. The result is validated like any config.json.
  std::vector<std::pair<std::string, int>> overrides;
  // > 0: each MoE layer's e_score_correction_bias gets this added for num_experts_per_token
  // experts chosen from the seed, so every token's top-k is fixed with that margin (scores are in
  // (0, 1)). Routing then no longer flips under rounding, and formats or engines can be compared
  // by their logits (random routers' near-ties make the default model chaotic).
  double router_margin = 0.0;
  // One planted error (model/synth/mutants.h): the mutation run's checkpoints.
  std::optional<Mutation> mutant;
};

struct SynthSummary {
  int files = 0;
  std::uint64_t tensors = 0;
  std::uint64_t bytes = 0;
};

SynthSummary synthesize_checkpoint(const SynthOptions& options);

// The strings of a JSONL corpus: every string value of every line's object, in order. A line
// that is not a JSON object is an InputError naming the file and line.
std::vector<std::string> read_jsonl_corpus(const std::filesystem::path& path);

// What the well-conditioned weights need to know of the model beyond a tensor's name and shape
// (docs/ENGINE.md, "The synthetic model").
struct SynthStructure {
  int num_experts = 0;        // routing directions (0: none)
  int experts_per_token = 0;  // directions each token's embedding carries
  int ordinary_tokens = 0;    // token ids below this may be frequent tokens of the LM head
};

// What a tensor's synthetic values look like, chosen by its place in the model's typed tree
// (values.cpp, synth_roles), never by its name.
enum class SynthShape {
  kMatrix,      // roughly normal, variance gain^2 / fan_in
  kNormWeight,  // 1 + 0.1 u
  kDecayLog,    // the KDA A_log: log(1 + 1.5 (u + 1))
  kBias,        // 0.05 u (dt_bias)
  kRouterBias,  // the router's score-correction bias: kBias, plus SynthOptions::router_margin
  kConvTaps,    // 0.5 u
  kEmbedding,   // unit RMS plus the token's routing directions
  kRouter,      // each row one routing direction (a plain matrix when routing does not fit)
  kLmHead,      // frequent tokens' rows longer
};
struct SynthRole {
  SynthShape shape = SynthShape::kMatrix;
  float gain = 1.0f;        // kMatrix
  bool stored_f32 = false;  // the release stores it F32 (conv taps, dt_bias, o_norm, the bias)
};

// The logical (unquantized) value of tensor `name` with `role`, element `i` of `n`: deterministic
// in (seed, name, i), so every format and every rank sees the same weights (the name only seeds
// them). `fan_in` is the last dimension (a row's length).
void synth_values(std::uint64_t seed, const std::string& name, const SynthRole& role,
                  std::int64_t fan_in, const SynthStructure& structure, float* out, std::size_t n,
                  std::size_t first_index = 0);

}  // namespace k3::model
