#include "model/checkpoint/gguf_names.h"

#include <utility>
#include <vector>

#include "common/error.h"
#include "common/regex.h"

namespace k3::model {

namespace {

// Logical (official release) names to llama.cpp's kimi-k3 GGUF names.
const std::vector<std::pair<std::string, std::string>>& layer_gguf_names() {
  static const std::vector<std::pair<std::string, std::string>> kMap = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attention_res_score", "attn_res_score.weight"},
      {"mlp_res_score", "ffn_res_score.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_conv1d.weight", "ssm_conv1d_q.weight"},
      {"self_attn.k_conv1d.weight", "ssm_conv1d_k.weight"},
      {"self_attn.v_conv1d.weight", "ssm_conv1d_v.weight"},
      {"self_attn.f_a_proj.weight", "ssm_f_a.weight"},
      {"self_attn.f_b_proj.weight", "ssm_f_b.weight"},
      {"self_attn.b_proj.weight", "ssm_beta.weight"},
      {"self_attn.decay", "ssm_a"},
      {"self_attn.dt_bias", "ssm_dt.bias"},
      {"self_attn.o_norm.weight", "ssm_norm.weight"},
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"block_sparse_moe.routed_expert_down_proj.weight", "ffn_routed_down.weight"},
      {"block_sparse_moe.routed_expert_up_proj.weight", "ffn_routed_up.weight"},
      {"block_sparse_moe.routed_expert_norm.weight", "ffn_routed_norm.weight"},
      {"block_sparse_moe.experts.w1", "ffn_gate_exps.weight"},
      {"block_sparse_moe.experts.w3", "ffn_up_exps.weight"},
      {"block_sparse_moe.experts.w2", "ffn_down_exps.weight"},
      {"block_sparse_moe.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"block_sparse_moe.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"block_sparse_moe.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
  };
  return kMap;
}

}  // namespace

std::string gguf_name(const std::string& logical, const ModelConfig& config) {
  if (logical == "model.embed_tokens.weight") return "token_embd.weight";
  if (logical == "model.norm.weight") return "output_norm.weight";
  if (logical == "model.output_attn_res_score") return "output_res_score.weight";
  if (logical == "lm_head.weight") return "output.weight";
  static const Regex kLayer(R"(model\.layers\.(\d+)\.(.+))");
  if (const auto m = kLayer.full_match(logical)) {
    const std::string layer((*m)[0]);
    const std::string_view rest = (*m)[1];
    if (rest == "self_attn.g_proj.weight") {
      return "blk." + layer +
             (config.is_mla_layer(std::stoi(layer)) ? ".attn_gate.weight" : ".ssm_g.weight");
    }
    for (const auto& [from, to] : layer_gguf_names()) {
      if (rest == from) return "blk." + layer + "." + to;
    }
  }
  throw InternalError("no GGUF name for parameter " + logical);
}

}  // namespace k3::model
