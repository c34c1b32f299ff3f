#include "model/parameters.h"

#include "common/error.h"

namespace k3::model {

using dist::GroupKind;

namespace {

ParamSpec spec(std::string name, int layer, ParamFamily family, std::vector<std::int64_t> shape,
               SplitKind split = SplitKind::kReplicated, GroupKind group = GroupKind::kWorld,
               std::int64_t unit = 1, bool expert_cols = false) {
  return {std::move(name), layer, family, std::move(shape), split, group, unit, expert_cols};
}

}  // namespace

ModelWeights<ParamSpec> kimi_k3_definition(const ModelConfig& c, const dist::Layout& layout) {
  if (c.is_draft())
    throw InternalError("kimi_k3_definition: a DSpark draft's definition is dspark_definition");
  ModelWeights<ParamSpec> w;
  const std::int64_t H = c.hidden_size, V = c.vocab_size;
  const auto A = GroupKind::kAttnTp;
  using F = ParamFamily;
  using S = SplitKind;
  // Under DP attention the embedding is vocabulary-parallel over the attention-TP group (which
  // is the TP group without DP attention); the LM head follows --enable-dp-lm-head.
  w.embed_tokens = spec("model.embed_tokens.weight", -1, F::kEmbedding, {V, H}, S::kRows, A);
  w.norm = spec("model.norm.weight", -1, F::kVector, {H});
  w.output_attn_res_score = spec("model.output_attn_res_score", -1, F::kAttnResScore, {H});
  w.lm_head = spec("lm_head.weight", -1, F::kLinear, {V, H}, S::kRows, layout.lm_head_group());

  w.layers.resize(static_cast<std::size_t>(c.num_hidden_layers));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights<ParamSpec>& layer = w.layers[static_cast<std::size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layer.input_layernorm = spec(p + "input_layernorm.weight", l, F::kVector, {H});
    layer.post_attention_layernorm =
        spec(p + "post_attention_layernorm.weight", l, F::kVector, {H});
    layer.self_attention_res_score = spec(p + "self_attention_res_score", l, F::kAttnResScore, {H});
    layer.mlp_res_score = spec(p + "mlp_res_score", l, F::kAttnResScore, {H});
    const std::string a = p + "self_attn.";
    if (c.is_mla_layer(l)) {
      const std::int64_t heads = c.num_attention_heads;
      auto& m = layer.mla.emplace();
      m.q_a_proj = spec(a + "q_a_proj.weight", l, F::kLinear, {c.q_lora_rank, H});
      m.q_a_layernorm = spec(a + "q_a_layernorm.weight", l, F::kVector, {c.q_lora_rank});
      m.q_b_proj = spec(a + "q_b_proj.weight", l, F::kLinear,
                        {heads * c.qk_head_dim(), c.q_lora_rank}, S::kRows, A, c.qk_head_dim());
      m.kv_a_proj_with_mqa = spec(a + "kv_a_proj_with_mqa.weight", l, F::kLinear,
                                  {c.kv_lora_rank + c.qk_rope_head_dim, H});
      m.kv_a_layernorm = spec(a + "kv_a_layernorm.weight", l, F::kVector, {c.kv_lora_rank});
      m.kv_b_proj = spec(a + "kv_b_proj.weight", l, F::kMlaKvB,
                         {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, S::kRows, A,
                         c.qk_nope_head_dim + c.v_head_dim);
      m.g_proj = spec(a + "g_proj.weight", l, F::kLinear, {heads * c.v_head_dim, H}, S::kRows, A,
                      c.v_head_dim);
      m.o_proj = spec(a + "o_proj.weight", l, F::kLinear, {H, heads * c.v_head_dim}, S::kCols, A,
                      c.v_head_dim);
    } else {
      const std::int64_t P = c.kda_projection_size(), D = c.kda_head_dim;
      auto& k = layer.kda.emplace();
      auto projection = [&](const char* x) {
        return spec(a + x + "_proj.weight", l, F::kLinear, {P, H}, S::kRows, A, D);
      };
      auto conv = [&](const char* x) {
        return spec(a + x + "_conv1d.weight", l, F::kVector, {P, 1, c.kda_conv_kernel}, S::kRows, A,
                    D);
      };
      k.q_proj = projection("q");
      k.q_conv1d = conv("q");
      k.k_proj = projection("k");
      k.k_conv1d = conv("k");
      k.v_proj = projection("v");
      k.v_conv1d = conv("v");
      k.f_a_proj = spec(a + "f_a_proj.weight", l, F::kLinear, {D, H});
      k.f_b_proj = spec(a + "f_b_proj.weight", l, F::kLinear, {P, D}, S::kRows, A, D);
      k.b_proj = spec(a + "b_proj.weight", l, F::kLinear, {c.kda_num_heads, H}, S::kRows, A, 1);
      k.decay = spec(a + "decay", l, F::kKdaDecay, {c.kda_num_heads}, S::kRows, A, 1);
      k.dt_bias = spec(a + "dt_bias", l, F::kVector, {P}, S::kRows, A, D);
      k.o_norm = spec(a + "o_norm.weight", l, F::kVector, {D});
      k.g_proj = spec(a + "g_proj.weight", l, F::kLinear, {P, H}, S::kRows, A, D);
      k.o_proj = spec(a + "o_proj.weight", l, F::kLinear, {H, P}, S::kCols, A, D);
    }
    // A SiTU-GLU of intermediate size I split over `group`: gate and up by rows, down by columns.
    auto glu = [&](const std::string& at, std::int64_t I, GroupKind group) {
      return MlpWeights<ParamSpec>{
          spec(at + "gate_proj.weight", l, F::kLinear, {I, H}, S::kRows, group),
          spec(at + "up_proj.weight", l, F::kLinear, {I, H}, S::kRows, group),
          spec(at + "down_proj.weight", l, F::kLinear, {H, I}, S::kCols, group)};
    };
    if (c.is_dense_layer(l)) {
      layer.mlp = glu(p + "mlp.", c.intermediate_size, layout.dense_mlp_group());
      continue;
    }
    const std::string m = p + "block_sparse_moe.";
    const std::int64_t E = c.num_experts, L = c.routed_expert_hidden_size,
                       I = c.moe_intermediate_size;
    auto& moe = layer.moe.emplace();
    moe.gate = spec(m + "gate.weight", l, F::kLinear, {E, H});
    moe.e_score_correction_bias = spec(m + "gate.e_score_correction_bias", l, F::kVector, {E});
    moe.routed_expert_down_proj =
        spec(m + "routed_expert_down_proj.weight", l, F::kLatentProjection, {L, H});
    moe.routed_expert_norm = spec(m + "routed_expert_norm.weight", l, F::kVector, {L});
    moe.routed_expert_up_proj =
        spec(m + "routed_expert_up_proj.weight", l, F::kLatentProjection, {H, L});
    moe.w1 = spec(m + "experts.w1", l, F::kRoutedExpert, {E, I, L}, S::kExperts, GroupKind::kMoeEp);
    moe.w3 = spec(m + "experts.w3", l, F::kRoutedExpert, {E, I, L}, S::kExperts, GroupKind::kMoeEp);
    moe.w2 = spec(m + "experts.w2", l, F::kRoutedExpert, {E, L, I}, S::kExperts, GroupKind::kMoeEp,
                  1, true);
    if (c.num_shared_experts > 0) {
      moe.shared_experts =
          glu(m + "shared_experts.", c.shared_intermediate_size(), layout.shared_experts_group());
    }
  }
  return w;
}

DSparkWeights<ParamSpec> dspark_definition(const ModelConfig& c, const dist::Layout& layout) {
  if (!c.is_draft()) throw InternalError("dspark_definition: the config is not a DSpark draft's");
  const DSparkConfig& d = *c.dspark;
  DSparkWeights<ParamSpec> w;
  const std::int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size;
  const std::int64_t hd = d.head_dim, q = c.num_attention_heads * hd,
                     kv = std::int64_t{d.num_key_value_heads} * hd, r = d.markov_rank;
  const auto A = GroupKind::kAttnTp;
  using F = ParamFamily;
  using S = SplitKind;
  w.fc = spec("fc.weight", -1, F::kLinear, {H, H * d.taps()});
  w.hidden_norm = spec("hidden_norm.weight", -1, F::kVector, {H});
  w.norm = spec("norm.weight", -1, F::kVector, {H});
  // The Markov head's embedding is read one row per token: replicated. Its output rows are
  // vocabulary logits, split exactly like the target's LM head rows they are added to.
  w.markov_w1 = spec("markov_head.markov_w1.weight", -1, F::kLinear, {V, r});
  w.markov_w2 = spec("markov_head.markov_w2.weight", -1, F::kLinear, {V, r}, S::kRows,
                     layout.lm_head_group());
  if (d.confidence_head) {
    const std::int64_t in = H + (d.confidence_with_markov ? r : 0);
    w.confidence_proj = spec("confidence_head.proj.weight", -1, F::kLinear, {1, in});
    w.confidence_bias = spec("confidence_head.proj.bias", -1, F::kVector, {1});
  }
  w.layers.resize(static_cast<std::size_t>(c.num_hidden_layers));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    DSparkLayerWeights<ParamSpec>& layer = w.layers[static_cast<std::size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    layer.input_layernorm = spec(p + "input_layernorm.weight", l, F::kVector, {H});
    layer.post_attention_layernorm =
        spec(p + "post_attention_layernorm.weight", l, F::kVector, {H});
    // Heads over attention TP: Q, K and V by rows (a KV-head count that does not divide is
    // refused by slice_for_rank), o_proj by columns.
    const std::string a = p + "self_attn.";
    layer.q_proj = spec(a + "q_proj.weight", l, F::kLinear, {q, H}, S::kRows, A, hd);
    layer.k_proj = spec(a + "k_proj.weight", l, F::kLinear, {kv, H}, S::kRows, A, hd);
    layer.v_proj = spec(a + "v_proj.weight", l, F::kLinear, {kv, H}, S::kRows, A, hd);
    layer.o_proj = spec(a + "o_proj.weight", l, F::kLinear, {H, q}, S::kCols, A, hd);
    layer.q_norm = spec(a + "q_norm.weight", l, F::kVector, {hd});
    layer.k_norm = spec(a + "k_norm.weight", l, F::kVector, {hd});
    const std::string m = p + "mlp.";
    layer.mlp =
        MlpWeights<ParamSpec>{spec(m + "gate_proj.weight", l, F::kLinear, {I, H}, S::kRows, A),
                              spec(m + "up_proj.weight", l, F::kLinear, {I, H}, S::kRows, A),
                              spec(m + "down_proj.weight", l, F::kLinear, {H, I}, S::kCols, A)};
  }
  return w;
}

std::vector<ParamSpec> kimi_k3_parameters(const ModelConfig& c, const dist::Layout& layout) {
  std::vector<ParamSpec> out;
  auto take = [&](ParamSpec& s) { out.push_back(std::move(s)); };
  if (c.is_draft()) {
    DSparkWeights<ParamSpec> definition = dspark_definition(c, layout);
    for_each_weight(definition, take);
  } else {
    ModelWeights<ParamSpec> definition = kimi_k3_definition(c, layout);
    for_each_weight(definition, take);
  }
  return out;
}

std::vector<std::int64_t> SliceBox::extent() const {
  std::vector<std::int64_t> e(begin.size());
  for (std::size_t i = 0; i < begin.size(); ++i) e[i] = end[i] - begin[i];
  return e;
}

bool SliceBox::full(const std::vector<std::int64_t>& shape) const {
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (begin[i] != 0 || end[i] != shape[i]) return false;
  }
  return true;
}

namespace {

// Shard `index` of `count` along a dimension of `size` in units of `unit`.
void split_dim(SliceBox& box, std::size_t dim, std::int64_t size, std::int64_t unit, int index,
               int count, const ParamSpec& spec, std::string_view group) {
  if (size % unit != 0 || (size / unit) % count != 0) {
    throw InputError("parameter " + spec.name + ": dimension " + std::to_string(dim) + " of " +
                     std::to_string(size) + " (" +
                     std::to_string(size / std::max<std::int64_t>(unit, 1)) + " units of " +
                     std::to_string(unit) + ") does not divide over the " + std::to_string(count) +
                     " ranks of the " + std::string(group) + " group");
  }
  const std::int64_t per = size / count;
  box.begin[dim] = per * index;
  box.end[dim] = per * (index + 1);
}

}  // namespace

SliceBox slice_for_rank(const ParamSpec& spec, const dist::Layout& layout, int rank) {
  SliceBox box;
  box.begin.assign(spec.shape.size(), 0);
  box.end = spec.shape;
  auto position = [&](GroupKind g) -> std::pair<int, int> {
    const dist::Shard at = layout.position(g, rank);
    return {at.index, at.count};
  };
  switch (spec.split) {
    case SplitKind::kReplicated:
      break;
    case SplitKind::kRows: {
      auto [i, n] = position(spec.group);
      split_dim(box, 0, spec.shape[0], spec.unit, i, n, spec, group_kind_name(spec.group));
      break;
    }
    case SplitKind::kCols: {
      auto [i, n] = position(spec.group);
      const std::size_t last = spec.shape.size() - 1;
      split_dim(box, last, spec.shape[last], spec.unit, i, n, spec, group_kind_name(spec.group));
      break;
    }
    case SplitKind::kExperts: {
      auto [e, ne] = position(GroupKind::kMoeEp);
      split_dim(box, 0, spec.shape[0], 1, e, ne, spec, "moe-ep");
      auto [t, nt] = position(GroupKind::kMoeTp);
      const std::size_t dim = spec.expert_split_cols ? 2 : 1;
      split_dim(box, dim, spec.shape[dim], 1, t, nt, spec, "moe-tp");
      break;
    }
  }
  return box;
}

}  // namespace k3::model
