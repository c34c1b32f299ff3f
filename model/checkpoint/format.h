// model::Format: a checkpoint format as a value with named capabilities.
//
// Every capability is false unless the format truly has it, and every representation choice in
// the model asks exactly one capability (see binding.cpp). The production failure behind k3eval
// was a split-K/V choice keyed off ModelSlim's quantized latent projections; here the split is
// its own capability that only GGUF has. docs/FORMATS.md renders the table below.
#pragma once

#include <array>
#include <bitset>
#include <optional>
#include <string>
#include <string_view>

namespace k3::model {

enum class FormatKind { kHf, kModelSlim, kGguf, kDraft };
inline constexpr std::array<FormatKind, 4> kAllFormats = {FormatKind::kHf, FormatKind::kModelSlim,
                                                          FormatKind::kGguf, FormatKind::kDraft};

enum class Capability {
  // MLA kv_b is stored split: attn_k_b [H, kv_lora, nope] in Q4_0 and attn_v_b [H, v, kv_lora]
  // in Q2_K (llama.cpp's kimi-k3). Without it kv_b_proj is one dense tensor.
  kSplitGgufKvB,
  // The LatentMoE projections (routed_expert_down_proj / up_proj) may be stored quantized.
  // Without it they must be dense floats.
  kQuantizedLatentProjections,
  // Routed experts in compressed-tensors MXFP4: weight_packed (u8 nibbles) + weight_scale (E8M0).
  kFp4RoutedExperts,
  // Routed experts stacked per layer and projection in ggml block types (Q2_K, Q3_K, MXFP4, ...).
  kGgmlBlockExperts,
  // Linear weights follow quant_model_description.json: FLOAT, or ModelSlim int8/int4 with
  // weight_scale / weight_offset tensors.
  kModelSlimQuantization,
  // Non-expert matrices in ggml block types (Q8_0, ...) or F16/F32, as the file declares.
  kGgmlBlockLinears,
  // AttnRes norm weight times projection stored premultiplied as one score vector.
  kFoldedAttnResScores,
  // KDA A_log stored as ssm_a = -exp(A_log[:heads]).
  kFoldedKdaDecay,
  // The vocabulary is a tiktoken.model file beside the weights.
  kTiktokenVocabulary,
  // The vocabulary is inside the weight file (tokenizer.ggml.*).
  kEmbeddedVocabulary,
  // The checkpoint is a DSpark drafter (SGLang's GQA drafter: config.json with a dflash_config,
  // BF16 safetensors without embedding or LM head), loaded beside the main model.
  kDraftModel,
  kCount,
};

std::string_view capability_name(Capability c);  // snake_case: "split_gguf_kv_b"
std::string_view format_name(FormatKind kind);   // "hf", "modelslim", "gguf", "draft"
std::optional<FormatKind> format_from_name(std::string_view name);

class Format {
 public:
  static Format of(FormatKind kind);

  FormatKind kind() const { return kind_; }
  std::string_view name() const { return format_name(kind_); }
  bool has(Capability c) const { return caps_.test(static_cast<std::size_t>(c)); }
  // "split_gguf_kv_b, quantized_latent_projections, ..." (only the true ones).
  std::string capability_list() const;

 private:
  Format(FormatKind kind, std::initializer_list<Capability> caps);
  FormatKind kind_;
  std::bitset<static_cast<std::size_t>(Capability::kCount)> caps_;
};

// Markdown table of formats x capabilities (docs/FORMATS.md is generated from it and a test
// keeps the two identical).
std::string capability_table_markdown();

}  // namespace k3::model
