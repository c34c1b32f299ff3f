// The Kimi-K3 text model as one typed tree of weights (the release's tensors, moonshotai/Kimi-K3).
// "Section 2.x" names a part of the forward as docs/ENGINE.md, "The math, piece by piece", numbers it.
//
// `ModelWeights<T>` has one field per parameter; what a field holds depends on who asks:
//   - model/parameters.cpp fills a `ModelWeights<ParamSpec>` (kimi_k3_definition): the only place
//     a logical tensor name, shape and split rule is written;
//   - the parameter table (kimi_k3_parameters), binding, plan, loader and audit walk it flat;
//   - the engine and the reference get a `ModelWeights<const Weight*>` (model/load/weights.h,
//     weight_tree) and read `layer.mla->q_b_proj` instead of spelling names again.
// A field that a configuration does not have (an MLA block in a KDA layer, the shared experts
// of a model without them) is a disengaged std::optional. The DSpark drafter has its own tree
// (model/dspark_weights.h).
#pragma once

#include <optional>
#include <type_traits>
#include <vector>

namespace k3::model {

// Each block lists its fields once, in `fields`: f(a.x, b.x, ...) for every field x of the trees
// given (all of the same block), in the definition's order. Visiting one tree and zipping two
// (mapping a definition to loaded weights) share that list.
template <class T>
struct MlaWeights {  // gated NoPE MLA (section 2.3)
  T q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, g_proj,
      o_proj;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.q_a_proj, o.q_a_proj...);
    f(s.q_a_layernorm, o.q_a_layernorm...);
    f(s.q_b_proj, o.q_b_proj...);
    f(s.kv_a_proj_with_mqa, o.kv_a_proj_with_mqa...);
    f(s.kv_a_layernorm, o.kv_a_layernorm...);
    f(s.kv_b_proj, o.kv_b_proj...);
    f(s.g_proj, o.g_proj...);
    f(s.o_proj, o.o_proj...);
  }
};

template <class T>
struct KdaWeights {  // Kimi Delta Attention (section 2.4)
  T q_proj, q_conv1d, k_proj, k_conv1d, v_proj, v_conv1d, f_a_proj, f_b_proj, b_proj, decay,
      dt_bias, o_norm, g_proj, o_proj;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.q_proj, o.q_proj...);
    f(s.q_conv1d, o.q_conv1d...);
    f(s.k_proj, o.k_proj...);
    f(s.k_conv1d, o.k_conv1d...);
    f(s.v_proj, o.v_proj...);
    f(s.v_conv1d, o.v_conv1d...);
    f(s.f_a_proj, o.f_a_proj...);
    f(s.f_b_proj, o.f_b_proj...);
    f(s.b_proj, o.b_proj...);
    f(s.decay, o.decay...);
    f(s.dt_bias, o.dt_bias...);
    f(s.o_norm, o.o_norm...);
    f(s.g_proj, o.g_proj...);
    f(s.o_proj, o.o_proj...);
  }
};

template <class T>
struct MlpWeights {  // SiTU-GLU: the dense first layers and the shared experts
  T gate_proj, up_proj, down_proj;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.gate_proj, o.gate_proj...);
    f(s.up_proj, o.up_proj...);
    f(s.down_proj, o.down_proj...);
  }
};

template <class T>
struct MoeWeights {  // LatentMoE (section 2.5): routed experts work in the latent width
  T gate, e_score_correction_bias, routed_expert_down_proj, routed_expert_norm,
      routed_expert_up_proj;
  T w1, w3, w2;  // stacked routed experts [experts, out, in]
  std::optional<MlpWeights<T>> shared_experts;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.gate, o.gate...);
    f(s.e_score_correction_bias, o.e_score_correction_bias...);
    f(s.routed_expert_down_proj, o.routed_expert_down_proj...);
    f(s.routed_expert_norm, o.routed_expert_norm...);
    f(s.routed_expert_up_proj, o.routed_expert_up_proj...);
    f(s.w1, o.w1...);
    f(s.w3, o.w3...);
    f(s.w2, o.w2...);
    if (s.shared_experts) MlpWeights<T>::fields(f, *s.shared_experts, *o.shared_experts...);
  }
};

template <class T>
struct LayerWeights {
  T input_layernorm, post_attention_layernorm;
  std::optional<T> self_attention_res_score, mlp_res_score;  // AttnRes
  std::optional<MlaWeights<T>> mla;                          // exactly one of mla / kda
  std::optional<KdaWeights<T>> kda;
  std::optional<MlpWeights<T>> mlp;  // exactly one of mlp (dense layers) / moe
  std::optional<MoeWeights<T>> moe;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.input_layernorm, o.input_layernorm...);
    f(s.post_attention_layernorm, o.post_attention_layernorm...);
    if (s.self_attention_res_score) f(*s.self_attention_res_score, *o.self_attention_res_score...);
    if (s.mlp_res_score) f(*s.mlp_res_score, *o.mlp_res_score...);
    if (s.mla) MlaWeights<T>::fields(f, *s.mla, *o.mla...);
    if (s.kda) KdaWeights<T>::fields(f, *s.kda, *o.kda...);
    if (s.mlp) MlpWeights<T>::fields(f, *s.mlp, *o.mlp...);
    if (s.moe) MoeWeights<T>::fields(f, *s.moe, *o.moe...);
  }
};

template <class T>
struct ModelWeights {
  T embed_tokens;
  T norm;
  std::optional<T> output_attn_res_score;  // AttnRes before the LM head
  T lm_head;
  std::vector<LayerWeights<T>> layers;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.embed_tokens, o.embed_tokens...);
    f(s.norm, o.norm...);
    if (s.output_attn_res_score) f(*s.output_attn_res_score, *o.output_attn_res_score...);
    f(s.lm_head, o.lm_head...);
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      LayerWeights<T>::fields(f, s.layers[l], o.layers[l]...);
    }
  }
};

// f(field) for every field of a tree, in the definition's order.
template <class Tree, class F>
void for_each_weight(Tree& tree, F&& f) {
  std::remove_const_t<Tree>::fields(f, tree);
}

namespace detail {
// `out` takes the shape of `in`: the same layers, the same engaged optionals.
template <class U, class T>
void engage_like(std::optional<U>& out, const std::optional<T>& in) {
  if (in) out.emplace();
}
template <class U, class T>
void engage_like(LayerWeights<U>& out, const LayerWeights<T>& in) {
  engage_like(out.self_attention_res_score, in.self_attention_res_score);
  engage_like(out.mlp_res_score, in.mlp_res_score);
  engage_like(out.mla, in.mla);
  engage_like(out.kda, in.kda);
  engage_like(out.mlp, in.mlp);
  engage_like(out.moe, in.moe);
  if (in.moe) engage_like(out.moe->shared_experts, in.moe->shared_experts);
}
}  // namespace detail

// The same tree with every field mapped through fn (for example a ParamSpec to the loaded
// Weight of that name).
template <class T, class Fn>
auto map_weights(const ModelWeights<T>& in, Fn&& fn) {
  using U = std::remove_cvref_t<decltype(fn(in.embed_tokens))>;
  ModelWeights<U> out;
  detail::engage_like(out.output_attn_res_score, in.output_attn_res_score);
  out.layers.resize(in.layers.size());
  for (std::size_t l = 0; l < in.layers.size(); ++l)
    detail::engage_like(out.layers[l], in.layers[l]);
  auto assign = [&](const T& from, U& to) { to = fn(from); };
  ModelWeights<T>::fields(assign, in, out);
  return out;
}

}  // namespace k3::model
