#include "model/wire.h"

namespace k3::model {

namespace {

// One list of ModelConfig's fields for both directions. The size check below fails to compile
// when a field is added to ModelConfig, so that it cannot be forgotten here.
template <class Config, class Visit>
void for_each_field(Config& c, Visit&& visit) {
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
  visit(c.draft_target_layers);
  visit(c.bos_token_id);
  visit(c.eos_token_id);
  visit(c.pad_token_id);
}
static_assert(sizeof(ModelConfig) == 224,
              "ModelConfig changed: list the new field in for_each_field, then update this size");

}  // namespace

void encode(WireWriter& out, const ParamSpec& s) {
  out.put(s.name);
  out.put(s.layer);
  out.put(s.family);
  out.put(s.shape);
  out.put(s.split);
  out.put(s.group);
  out.put(s.unit);
  out.put(s.expert_split_cols);
}
void decode(WireReader& in, ParamSpec& s) {
  in.get(s.name);
  in.get(s.layer);
  in.get(s.family);
  in.get(s.shape);
  in.get(s.split);
  in.get(s.group);
  in.get(s.unit);
  in.get(s.expert_split_cols);
}

void encode(WireWriter& out, const Run& r) {
  out.put(r.offset);
  out.put(r.length);
  out.put(r.stride);
  out.put(r.count);
}
void decode(WireReader& in, Run& r) {
  in.get(r.offset);
  in.get(r.length);
  in.get(r.stride);
  in.get(r.count);
}

void encode(WireWriter& out, const PartRead& r) {
  out.put(r.role);
  out.put(r.tensor);
  out.put(static_cast<std::uint64_t>(r.file));
  out.put(r.dtype);
  out.put(r.box_extent);
  out.put(r.runs);
  out.put(r.bytes);
}
void decode(WireReader& in, PartRead& r) {
  in.get(r.role);
  in.get(r.tensor);
  r.file = static_cast<std::size_t>(in.get<std::uint64_t>());
  in.get(r.dtype);
  in.get(r.box_extent);
  in.get(r.runs);
  in.get(r.bytes);
}

void encode(WireWriter& out, const PlannedParam& p) {
  encode(out, p.spec);
  out.put(p.repr.type);
  out.put(p.repr.text);
  out.put(p.repr.asked);
  out.put(p.repr.answer);
  out.put(p.box.begin);
  out.put(p.box.end);
  out.put(p.reads);
  out.put(p.bytes);
}
void decode(WireReader& in, PlannedParam& p) {
  decode(in, p.spec);
  in.get(p.repr.type);
  in.get(p.repr.text);
  in.get(p.repr.asked);
  in.get(p.repr.answer);
  in.get(p.box.begin);
  in.get(p.box.end);
  in.get(p.reads);
  in.get(p.bytes);
}

void encode(WireWriter& out, const ModelConfig& config) {
  for_each_field(config, [&](const auto& field) { out.put(field); });
}
void decode(WireReader& in, ModelConfig& config) {
  for_each_field(config, [&](auto& field) { in.get(field); });
}

void encode(WireWriter& out, const TensorEntry& t) {
  out.put(t.name);
  out.put(t.dtype);
  out.put(t.shape);
  out.put(t.offset);
  out.put(t.nbytes);
}
void decode(WireReader& in, TensorEntry& t) {
  in.get(t.name);
  in.get(t.dtype);
  in.get(t.shape);
  in.get(t.offset);
  in.get(t.nbytes);
}

void encode(WireWriter& out, const LoadPlan& plan) {
  out.put(plan.rank);
  out.put(plan.params);
  out.put(plan.bytes);
  std::vector<std::uint64_t> files(plan.files.begin(), plan.files.end());
  out.put(files);
}
void decode(WireReader& in, LoadPlan& plan) {
  in.get(plan.rank);
  in.get(plan.params);
  in.get(plan.bytes);
  std::vector<std::uint64_t> files;
  in.get(files);
  plan.files.assign(files.begin(), files.end());
}

}  // namespace k3::model
