// The DSpark drafter as one typed tree of weights, like model/kimi_k3.h for the target (the GQA
// drafter SGLang serves, RadixArk/Kimi-K3-DSpark; docs/FORMATS.md, "The DSpark draft").
// model/parameters.cpp fills a DSparkWeights<ParamSpec> (dspark_definition), the engine reads a
// DSparkWeights<const Weight*> (dspark_weight_tree). Stored names carry no "model." prefix; the
// drafter has no embedding and no LM head of its own (it uses the target's).
#pragma once

#include <optional>
#include <type_traits>
#include <vector>

#include "model/kimi_k3.h"

namespace k3::model {

template <class T>
struct DSparkLayerWeights {  // one Qwen3-style pre-norm layer: GQA with q/k norms, SwiGLU MLP
  T input_layernorm, post_attention_layernorm;
  T q_proj, k_proj, v_proj, o_proj, q_norm, k_norm;
  MlpWeights<T> mlp;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.input_layernorm, o.input_layernorm...);
    f(s.post_attention_layernorm, o.post_attention_layernorm...);
    f(s.q_proj, o.q_proj...);
    f(s.k_proj, o.k_proj...);
    f(s.v_proj, o.v_proj...);
    f(s.o_proj, o.o_proj...);
    f(s.q_norm, o.q_norm...);
    f(s.k_norm, o.k_norm...);
    MlpWeights<T>::fields(f, s.mlp, o.mlp...);
  }
};

template <class T>
struct DSparkWeights {
  T fc;           // [hidden, taps x hidden]: the concatenated taps -> the context feature
  T hidden_norm;  // RMSNorm of the context feature
  T norm;         // the final norm before the target's LM head
  T markov_w1;    // [vocab, rank]: the previous token's embedding in the Markov head
  T markov_w2;    // [vocab, rank]: rank -> vocabulary logits bias
  // [1, hidden + markov_rank] and [1] when dflash_config.enable_confidence_head: stored by
  // SGLang's checkpoint, unused by its default (static) verify and by k3eval.
  std::optional<T> confidence_proj, confidence_bias;
  std::vector<DSparkLayerWeights<T>> layers;
  template <class F, class Self, class... Other>
  static void fields(F& f, Self& s, Other&... o) {
    f(s.fc, o.fc...);
    f(s.hidden_norm, o.hidden_norm...);
    f(s.norm, o.norm...);
    f(s.markov_w1, o.markov_w1...);
    f(s.markov_w2, o.markov_w2...);
    if (s.confidence_proj) f(*s.confidence_proj, *o.confidence_proj...);
    if (s.confidence_bias) f(*s.confidence_bias, *o.confidence_bias...);
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      DSparkLayerWeights<T>::fields(f, s.layers[l], o.layers[l]...);
    }
  }
};

// The same tree with every field mapped through fn.
template <class T, class Fn>
auto map_weights(const DSparkWeights<T>& in, Fn&& fn) {
  using U = std::remove_cvref_t<decltype(fn(in.fc))>;
  DSparkWeights<U> out;
  detail::engage_like(out.confidence_proj, in.confidence_proj);
  detail::engage_like(out.confidence_bias, in.confidence_bias);
  out.layers.resize(in.layers.size());
  auto assign = [&](const T& from, U& to) { to = fn(from); };
  DSparkWeights<T>::fields(assign, in, out);
  return out;
}

}  // namespace k3::model
