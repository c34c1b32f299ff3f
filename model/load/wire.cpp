#include "model/load/wire.h"

#include <concepts>
#include <type_traits>

namespace k3::model {

namespace {

// One list of ModelConfig's fields for both directions. The size check below fails to compile
// when a field is added to ModelConfig, so that it cannot be forgotten here.
template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, ModelConfig>
void for_each_field(T& c, Visit&& visit) {
  visit(c.model_type);
  visit(c.hidden_size);
  visit(c.num_hidden_layers);
  visit(c.vocab_size);
  visit(c.intermediate_size);
  visit(c.first_k_dense_replace);
  visit(c.rms_norm_eps);
  visit(c.situ_beta);
  visit(c.situ_linear_beta);
  visit(c.num_attention_heads);
  visit(c.q_lora_rank);
  visit(c.kv_lora_rank);
  visit(c.qk_nope_head_dim);
  visit(c.qk_rope_head_dim);
  visit(c.v_head_dim);
  visit(c.num_experts);
  visit(c.num_experts_per_token);
  visit(c.num_shared_experts);
  visit(c.moe_intermediate_size);
  visit(c.routed_expert_hidden_size);
  visit(c.routed_scaling_factor);
  visit(c.attn_res_block_size);
  visit(c.kda_num_heads);
  visit(c.kda_head_dim);
  visit(c.kda_conv_kernel);
  visit(c.kda_gate_lower_bound);
  visit(c.full_attn_layers);
  visit(c.dspark);
  visit(c.bos_token_id);
  visit(c.eos_token_id);
  visit(c.pad_token_id);
}
static_assert(sizeof(ModelConfig) == 304,
              "ModelConfig changed: list the new field in for_each_field, then update this size");

template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, DSparkConfig>
void for_each_field(T& d, Visit&& visit) {
  visit(d.block_size);
  visit(d.num_key_value_heads);
  visit(d.head_dim);
  visit(d.mask_token_id);
  visit(d.target_layer_ids);
  visit(d.markov_rank);
  visit(d.confidence_head);
  visit(d.tap_attn_res);
  visit(d.rope_theta);
  visit(d.rope_factor);
  visit(d.rope_original_max_position);
  visit(d.rope_beta_fast);
  visit(d.rope_beta_slow);
  visit(d.max_position_embeddings);
  visit(d.confidence_with_markov);
}
static_assert(sizeof(DSparkConfig) == 96,
              "DSparkConfig changed: list the new field in for_each_field, then update this size");

// The fields of each record, in wire order, for both directions.
template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, ParamSpec>
void for_each_field(T& s, Visit&& visit) {
  visit(s.name);
  visit(s.layer);
  visit(s.family);
  visit(s.shape);
  visit(s.split);
  visit(s.group);
  visit(s.unit);
  visit(s.expert_split_cols);
}

template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, Run>
void for_each_field(T& r, Visit&& visit) {
  visit(r.offset);
  visit(r.length);
  visit(r.stride);
  visit(r.count);
}

template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, PartRead>
void for_each_field(T& r, Visit&& visit) {
  visit(r.role);
  visit(r.tensor);
  visit(r.file);
  visit(r.dtype);
  visit(r.box_extent);
  visit(r.runs);
  visit(r.bytes);
}

template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, PlannedParam>
void for_each_field(T& p, Visit&& visit) {
  visit(p.spec);
  visit(p.repr.type);
  visit(p.repr.text);
  visit(p.repr.asked);
  visit(p.repr.answer);
  visit(p.box.begin);
  visit(p.box.end);
  visit(p.reads);
  visit(p.bytes);
}

template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, TensorEntry>
void for_each_field(T& t, Visit&& visit) {
  visit(t.name);
  visit(t.dtype);
  visit(t.shape);
  visit(t.offset);
  visit(t.nbytes);
}

template <class T, class Visit>
  requires std::same_as<std::remove_const_t<T>, LoadPlan>
void for_each_field(T& plan, Visit&& visit) {
  visit(plan.rank);
  visit(plan.params);
  visit(plan.bytes);
  visit(plan.files);
}

template <class T>
void put_fields(WireWriter& out, const T& value) {
  for_each_field(value, [&](const auto& field) { out.put_item(field); });
}
template <class T>
void get_fields(WireReader& in, T& value) {
  for_each_field(value, [&](auto& field) { in.get_item(field); });
}

}  // namespace

void encode(WireWriter& out, const ModelConfig& config) { put_fields(out, config); }
void decode(WireReader& in, ModelConfig& config) { get_fields(in, config); }
void encode(WireWriter& out, const DSparkConfig& config) { put_fields(out, config); }
void decode(WireReader& in, DSparkConfig& config) { get_fields(in, config); }
void encode(WireWriter& out, const TensorEntry& tensor) { put_fields(out, tensor); }
void decode(WireReader& in, TensorEntry& tensor) { get_fields(in, tensor); }
void encode(WireWriter& out, const LoadPlan& plan) { put_fields(out, plan); }
void decode(WireReader& in, LoadPlan& plan) { get_fields(in, plan); }
void encode(WireWriter& out, const ParamSpec& spec) { put_fields(out, spec); }
void decode(WireReader& in, ParamSpec& spec) { get_fields(in, spec); }
void encode(WireWriter& out, const Run& run) { put_fields(out, run); }
void decode(WireReader& in, Run& run) { get_fields(in, run); }
void encode(WireWriter& out, const PartRead& read) { put_fields(out, read); }
void decode(WireReader& in, PartRead& read) { get_fields(in, read); }
void encode(WireWriter& out, const PlannedParam& param) { put_fields(out, param); }
void decode(WireReader& in, PlannedParam& param) { get_fields(in, param); }

}  // namespace k3::model
