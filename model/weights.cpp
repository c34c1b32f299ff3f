#include "model/weights.h"

#include "quant/error.h"
#include "quant/reference.h"

namespace k3::model {

std::uint64_t Weight::bytes() const {
  std::uint64_t b = data.size() + e8m0.size() +
                    4 * (scale.size() + offset.size() + group_scale.size() + group_offset.size());
  if (k_b) b += k_b->bytes();
  if (v_b) b += v_b->bytes();
  return b;
}

quant::MatrixView Weight::view() const {
  if (split_kv()) throw InternalError(name + " is split into K and V; view k_b and v_b instead");
  quant::MatrixView v;
  v.type = type;
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  v.rows = static_cast<std::size_t>(shape.empty() ? 1 : rows);
  v.cols = static_cast<std::size_t>(shape.empty() ? 1 : shape.back());
  v.data = data;
  v.e8m0 = e8m0;
  v.scale = scale;
  v.offset = offset;
  v.group_scale = group_scale;
  v.group_offset = group_offset;
  v.group_size = group_size;
  return v;
}

std::vector<float> Weight::floats() const {
  const quant::MatrixView v = view();
  std::vector<float> out(v.rows * v.cols);
  quant::dequantize(v, out);
  return out;
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

}  // namespace k3::model
