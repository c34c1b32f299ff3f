#include "model/load/weights.h"

#include <algorithm>

#include "common/error.h"
#include "quant/reference.h"

namespace k3::model {

std::uint64_t Weight::bytes() const {
  std::uint64_t b = data.size() + e8m0.size() +
                    4 * (scale.size() + offset.size() + group_scale.size() + group_offset.size());
  for (const auto& x : expert_data) b += x.size();
  for (const auto& x : expert_e8m0) b += x.size();
  if (k_b) b += k_b->bytes();
  if (v_b) b += v_b->bytes();
  return b;
}

quant::MatrixView Weight::view() const {
  if (split_kv()) throw InternalError(name + " is split into K and V; view k_b and v_b instead");
  if (per_expert_segments())
    throw InternalError(name + " holds one segment per expert; use expert(e)");
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return quant::view_of(*this, type, static_cast<std::size_t>(shape.empty() ? 1 : rows),
                        static_cast<std::size_t>(shape.empty() ? 1 : shape.back()));
}

bool Weight::mapped() const {
  return per_expert_segments() ? expert_data.front().mapped() : data.mapped();
}

quant::MatrixView Weight::expert(std::size_t e) const {
  if (shape.size() != 3) throw InternalError(name + " is not a routed-expert weight");
  const auto experts = static_cast<std::size_t>(shape[0]);
  const auto out = static_cast<std::size_t>(shape[1]);
  const auto in = static_cast<std::size_t>(shape[2]);
  if (e >= experts)
    throw InternalError(name + ": expert " + std::to_string(e) + " of " + std::to_string(experts));
  quant::MatrixView v;
  v.type = type;
  v.rows = out;
  v.cols = in;
  if (per_expert_segments()) {
    v.data = expert_data[e];
    if (!expert_e8m0.empty()) v.e8m0 = expert_e8m0[e];
  } else {
    const std::size_t bytes = quant::data_bytes(type, out, in);
    v.data = data.span().subspan(e * bytes, bytes);
    if (!e8m0.empty()) v.e8m0 = e8m0.span().subspan(e * out * (in / 32), out * (in / 32));
  }
  auto rows_of = [&](const std::vector<float>& all) {
    if (all.empty()) return std::span<const float>();
    const std::size_t per = all.size() / experts;
    return std::span<const float>(all).subspan(e * per, per);
  };
  v.scale = rows_of(scale);
  v.offset = rows_of(offset);
  v.group_scale = rows_of(group_scale);
  v.group_offset = rows_of(group_offset);
  v.group_size = group_size;
  return v;
}

std::size_t Weight::element_count() const {
  std::size_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::vector<float> Weight::floats() const {
  std::vector<float> out(element_count());
  floats_into(out);
  return out;
}

void Weight::floats_into(std::span<float> out) const {
  if (out.size() != element_count()) {
    throw InternalError(name + ": " + std::to_string(element_count()) +
                        " elements decoded into room for " + std::to_string(out.size()));
  }
  if (per_expert_segments()) {
    // Every expert has the same shape: each is decoded straight into its place.
    const std::size_t experts = static_cast<std::size_t>(shape.at(0));
    const std::size_t per = out.size() / experts;
    for (std::size_t e = 0; e < experts; ++e)
      quant::dequantize(expert(e), out.subspan(e * per, per));
    return;
  }
  quant::dequantize(view(), out);
}

void WeightStore::add(Weight w) {
  const std::string name = w.name;
  if (!weights_.emplace(name, std::move(w)).second) {
    throw InternalError("weight " + name + " loaded twice");
  }
}

const Weight& WeightStore::get(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) throw InternalError("weight " + name + " was not loaded");
  return it->second;
}

std::uint64_t WeightStore::bytes() const {
  std::uint64_t b = 0;
  for (const auto& [n, w] : weights_) b += w.bytes();
  return b;
}

std::uint64_t decode_bytes_per_token(const ModelWeights<const Weight*>& tree,
                                     const ModelConfig& config) {
  std::uint64_t all = 0;
  for_each_weight(tree, [&](const Weight* w) { all += w->bytes(); });
  std::uint64_t experts = 0;
  for (const LayerWeights<const Weight*>& layer : tree.layers) {
    if (!layer.moe) continue;
    for (const Weight* w : {layer.moe->w1, layer.moe->w3, layer.moe->w2}) experts += w->bytes();
  }
  const std::uint64_t embedding = tree.embed_tokens->bytes();
  const auto k = static_cast<std::uint64_t>(config.num_experts_per_token);
  const auto e = static_cast<std::uint64_t>(std::max(1, config.num_experts));
  const auto vocab = static_cast<std::uint64_t>(std::max(1, config.vocab_size));
  return all - experts - embedding + experts * k / e + embedding / vocab;
}

ModelWeights<const Weight*> weight_tree(const WeightStore& store, const ModelConfig& config,
                                        const dist::Layout& layout) {
  return map_weights(kimi_k3_definition(config, layout),
                     [&](const ParamSpec& spec) { return &store.get(spec.name); });
}

DSparkWeights<const Weight*> dspark_weight_tree(const WeightStore& store, const ModelConfig& config,
                                                const dist::Layout& layout) {
  return map_weights(dspark_definition(config, layout),
                     [&](const ParamSpec& spec) { return &store.get(spec.name); });
}

}  // namespace k3::model
