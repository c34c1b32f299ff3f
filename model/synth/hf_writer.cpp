#include "model/synth/hf_writer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/checkpoint/stored_names.h"

namespace k3::model::synth {

void HfEncoder::vector(const ParamSpec& s, const SynthRole& role) {
  store_float(std::string(kPrefix) + s.name, role.stored_f32 ? DType::kF32 : DType::kBF16, s.shape,
              c_.values(s.name, role, s.shape));
}

void HfEncoder::attn_res_score(const ParamSpec& s, const SynthRole& role) {
  const std::int64_t H = s.shape[0];
  const auto [norm, proj] = attn_res_parts(s, role);
  store_float(std::string(kPrefix) + stored_names::attn_res_norm(s.name), DType::kBF16, {H}, norm);
  store_float(std::string(kPrefix) + stored_names::attn_res_proj(s.name), DType::kBF16, {1, H},
              proj);
}

void HfEncoder::kda_decay(const ParamSpec& s, const SynthRole& role) {
  store_float(std::string(kPrefix) + stored_names::kda_a_log(s.name), DType::kF32,
              {a_log_length(s)}, kda_a_log(s, role));
}

void HfEncoder::matrix(const ParamSpec& s, const SynthRole& role) {
  store_matrix(std::string(kPrefix) + s.name, s, role, c_.values(s.name, role, s.shape));
}

void HfEncoder::mla_kv_b(const ParamSpec& s, const SynthRole& role) {
  store_float(std::string(kPrefix) + s.name, DType::kBF16, s.shape,
              c_.values(s.name, role, s.shape));
}

// One tensor per expert, each drawn as its slice of the stacked logical parameter.
void HfEncoder::routed_experts(const ParamSpec& s, const SynthRole& role) {
  const std::int64_t E = s.shape[0], out = s.shape[1], in = s.shape[2];
  const std::string which = expert_matrix(s);
  for (std::int64_t e = 0; e < E; ++e) {
    const auto v =
        c_.values(s.name, role, {out, in}, static_cast<std::size_t>(e * out * in), out * in);
    store_expert(stored_names::routed_expert(kPrefix, s.layer, e, which), {out, in}, v);
  }
}

SynthSummary HfEncoder::finish(const Vocabulary& vocab) {
  const SynthOptions& o = c_.options();
  const SynthSummary summary = write_safetensors(o, c_.tensors());
  std::ofstream(o.out / "config.json") << to_config_json(config_).dump(2) << "\n";
  write_other_files();
  // Every main-model checkpoint carries its tokenizer (pre-flight checks it).
  std::ofstream(o.out / "tiktoken.model", std::ios::binary) << vocab.to_tiktoken();
  return summary;
}

void HfEncoder::store_float(const std::string& name, DType dtype,
                            const std::vector<std::int64_t>& shape, const std::vector<float>& v) {
  c_.dense(name, dtype, shape, v);
}

void HfEncoder::store_matrix(const std::string& name, const ParamSpec& s, const SynthRole&,
                             const std::vector<float>& v) {
  c_.dense(name, DType::kBF16, s.shape, v);
}

void HfEncoder::store_expert(const std::string& stem, const std::vector<std::int64_t>& shape,
                             const std::vector<float>& v) {
  quant::QuantizedMatrix q;
  if (!c_.header_only()) q = c_.quantized(quant::Type::kMXFP4Packed, v, shape);
  c_.raw(stored_names::mxfp4_packed(stem), DType::kU8, {shape[0], shape[1] / 2}, q.data);
  c_.raw(stored_names::mxfp4_scale(stem), DType::kU8, {shape[0], shape[1] / 32}, q.e8m0);
}

const SynthWriter& hf_writer() {
  static const TargetWriter<HfEncoder> writer;
  return writer;
}

}  // namespace k3::model::synth
