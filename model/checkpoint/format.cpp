#include "model/checkpoint/format.h"

namespace k3::model {

std::string_view capability_name(Capability c) {
  switch (c) {
    case Capability::kSplitGgufKvB:
      return "split_gguf_kv_b";
    case Capability::kQuantizedLatentProjections:
      return "quantized_latent_projections";
    case Capability::kFp4RoutedExperts:
      return "fp4_routed_experts";
    case Capability::kGgmlBlockExperts:
      return "ggml_block_experts";
    case Capability::kModelSlimQuantization:
      return "modelslim_quantization";
    case Capability::kGgmlBlockLinears:
      return "ggml_block_linears";
    case Capability::kFoldedAttnResScores:
      return "folded_attn_res_scores";
    case Capability::kFoldedKdaDecay:
      return "folded_kda_decay";
    case Capability::kTiktokenVocabulary:
      return "tiktoken_vocabulary";
    case Capability::kEmbeddedVocabulary:
      return "embedded_vocabulary";
    case Capability::kDraftModel:
      return "draft_model";
    case Capability::kCount:
      break;
  }
  return "unknown";
}

std::string_view format_name(FormatKind kind) {
  switch (kind) {
    case FormatKind::kHf:
      return "hf";
    case FormatKind::kModelSlim:
      return "modelslim";
    case FormatKind::kGguf:
      return "gguf";
    case FormatKind::kDraft:
      return "draft";
  }
  return "unknown";
}

std::optional<FormatKind> format_from_name(std::string_view name) {
  for (FormatKind k : kAllFormats) {
    if (format_name(k) == name) return k;
  }
  return std::nullopt;
}

Format::Format(FormatKind kind, std::initializer_list<Capability> caps) : kind_(kind) {
  for (Capability c : caps) caps_.set(static_cast<std::size_t>(c));
}

// The one place where formats receive capabilities.
Format Format::of(FormatKind kind) {
  using C = Capability;
  switch (kind) {
    case FormatKind::kHf:
      // The official release: BF16 everywhere except compressed-tensors MXFP4 routed experts.
      return Format(kind, {C::kFp4RoutedExperts, C::kTiktokenVocabulary});
    case FormatKind::kModelSlim:
      // ModelSlim W4A8/W8A8: quantizes linears and the latent projections, but keeps MLA
      // kv_b_proj as one dense FLOAT tensor: no split_gguf_kv_b.
      return Format(kind, {C::kQuantizedLatentProjections, C::kModelSlimQuantization,
                           C::kTiktokenVocabulary});
    case FormatKind::kGguf:
      return Format(kind, {C::kSplitGgufKvB, C::kQuantizedLatentProjections, C::kGgmlBlockExperts,
                           C::kGgmlBlockLinears, C::kFoldedAttnResScores, C::kFoldedKdaDecay,
                           C::kEmbeddedVocabulary});
    case FormatKind::kDraft:
      return Format(kind, {C::kTiktokenVocabulary, C::kDraftModel});
  }
  return Format(kind, {});
}

std::string Format::capability_list() const {
  std::string out;
  for (std::size_t i = 0; i < static_cast<std::size_t>(Capability::kCount); ++i) {
    if (!caps_.test(i)) continue;
    if (!out.empty()) out += ", ";
    out += capability_name(static_cast<Capability>(i));
  }
  return out.empty() ? "none" : out;
}

std::string capability_table_markdown() {
  std::string out = "| capability |";
  for (FormatKind k : kAllFormats) out += " " + std::string(format_name(k)) + " |";
  out += "\n|---|";
  for (std::size_t i = 0; i < kAllFormats.size(); ++i) out += "---|";
  out += "\n";
  for (std::size_t c = 0; c < static_cast<std::size_t>(Capability::kCount); ++c) {
    out += "| `" + std::string(capability_name(static_cast<Capability>(c))) + "` |";
    for (FormatKind k : kAllFormats) {
      out += Format::of(k).has(static_cast<Capability>(c)) ? " yes |" : " - |";
    }
    out += "\n";
  }
  return out;
}

}  // namespace k3::model
