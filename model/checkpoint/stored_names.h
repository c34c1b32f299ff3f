// The names a format stores beside, or instead of, a logical parameter's own, each written once:
// the binding reads them (binding.cpp) and the synthetic writers write them (synth/*_writer.cpp).
// The one-to-one GGUF names are gguf_name (gguf_names.h); the logical names are
// kimi_k3_definition's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace k3::model::stored_names {

namespace detail {
inline std::string without_suffix(std::string_view name, std::string_view suffix) {
  if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix)
    name.remove_suffix(suffix.size());
  return std::string(name);
}
}  // namespace detail

// AttnRes scores stored unfolded (hf, modelslim): "<x>_res_score" is "<x>_res_norm.weight" times
// "<x>_res_proj.weight" [1, hidden].
inline std::string attn_res_norm(std::string_view score) {
  return detail::without_suffix(score, "_score") + "_norm.weight";
}
inline std::string attn_res_proj(std::string_view score) {
  return detail::without_suffix(score, "_score") + "_proj.weight";
}

// The KDA decay stored as the release's A_log: "<...>.self_attn.decay" -> "<...>.self_attn.A_log".
inline std::string kda_a_log(std::string_view decay) {
  return detail::without_suffix(decay, "decay") + "A_log";
}

// ModelSlim's quantization parameters beside "<x>.weight": "<x>.weight" + the part's suffix.
inline constexpr std::string_view kModelSlimScale = "_scale";
inline constexpr std::string_view kModelSlimOffset = "_offset";
inline constexpr std::string_view kModelSlimGroupScale = "_scale_second";
inline constexpr std::string_view kModelSlimGroupOffset = "_offset_second";
inline std::string modelslim(std::string_view weight, std::string_view part) {
  return std::string(weight) + std::string(part);
}

// One routed expert's matrix in the safetensors formats, without its suffix:
// "<prefix>model.layers.L.block_sparse_moe.experts.E.w1"; ModelSlim and BF16 add ".weight",
// compressed-tensors MXFP4 adds mxfp4_packed / mxfp4_scale.
inline std::string routed_expert(std::string_view prefix, int layer, std::int64_t expert,
                                 std::string_view which) {
  return std::string(prefix) + "model.layers." + std::to_string(layer) +
         ".block_sparse_moe.experts." + std::to_string(expert) + "." + std::string(which);
}
inline std::string mxfp4_packed(std::string_view stem) {
  return std::string(stem) + ".weight_packed";
}
inline std::string mxfp4_scale(std::string_view stem) {
  return std::string(stem) + ".weight_scale";
}

// llama.cpp's MLA kv_b of one layer: split into K and V, or (refused beside them) dense.
inline std::string gguf_k_b(int layer) {
  return "blk." + std::to_string(layer) + ".attn_k_b.weight";
}
inline std::string gguf_v_b(int layer) {
  return "blk." + std::to_string(layer) + ".attn_v_b.weight";
}
inline std::string gguf_kv_b(int layer) {
  return "blk." + std::to_string(layer) + ".attn_kv_b.weight";
}

}  // namespace k3::model::stored_names
