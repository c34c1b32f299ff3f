#include "model/synth/collector.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/checkpoint/safetensors.h"
#include "model/synth/values.h"
#include "quant/fp.h"

namespace k3::model::synth {

using nlohmann::json;

namespace {

std::vector<std::uint8_t> as_bytes_bf16(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t b = quant::f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

}  // namespace

std::vector<std::uint8_t> as_bytes_f32(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());  // header-only: no values
  return out;
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<float> Collector::values(const std::string& logical, const SynthRole& role,
                                     const std::vector<std::int64_t>& shape, std::size_t first,
                                     std::int64_t count) const {
  if (options_.header_only)
    return {};  // shapes only: no values at all (the full preset is terabytes)
  std::vector<float> v(count < 0 ? static_cast<std::size_t>(numel(shape))
                                 : static_cast<std::size_t>(count));
  synth_values(options_.seed, logical, role, shape.back(), structure_, v.data(), v.size(),
               mutation_.source_index(logical, shape, first, v.size()));
  if (options_.router_margin > 0 && role.shape == SynthShape::kRouterBias && first == 0 &&
      v.size() == static_cast<std::size_t>(numel(shape)))
    fix_routing(options_.seed, logical, structure_, options_.router_margin, v);
  mutation_.on_logical(logical, shape, first, v);
  return v;
}

quant::QuantizedMatrix Collector::quantized(quant::Type type, const std::vector<float>& values,
                                            const std::vector<std::int64_t>& shape) const {
  const auto cols = static_cast<std::size_t>(shape.back());
  return quant::quantize(type, values, values.size() / cols, cols);
}

void Collector::dense(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                      const std::vector<float>& values) {
  Tensor t{name, dtype, shape, {}};
  if (!options_.header_only) {
    if (dtype == DType::kF32)
      t.data = as_bytes_f32(values);
    else if (dtype == DType::kBF16)
      t.data = as_bytes_bf16(values);
    else
      t.data = quantized(*quant_type_of(dtype), values, shape).data;
    mutation_.on_stored(name, dtype, t.data);
  }
  tensors_.push_back(std::move(t));
}

void Collector::raw(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                    std::vector<std::uint8_t> data) {
  if (options_.header_only) data.clear();
  mutation_.on_stored(name, dtype, data);
  tensors_.push_back({name, dtype, shape, std::move(data)});
}

// So --shards 351 really writes 351 files when there are enough tensors.
std::vector<int> assign_shards(const std::vector<Tensor>& tensors, int shards) {
  long double total = 0;
  for (const auto& t : tensors) total += static_cast<long double>(*tensor_bytes(t.dtype, t.shape));
  const int n = static_cast<int>(tensors.size());
  std::vector<int> out(n, 0);
  long double acc = 0;
  int prev = 0;
  for (int i = 0; i < n; ++i) {
    const auto b = static_cast<long double>(*tensor_bytes(tensors[i].dtype, tensors[i].shape));
    int s = total > 0 ? static_cast<int>((acc + b / 2) / total * shards) : 0;
    s = std::clamp(s, prev, std::min(prev + 1, shards - 1));
    s = std::max(s, shards - (n - i));  // leave enough tensors for the remaining shards
    if (i == 0) s = 0;
    out[i] = s;
    prev = s;
    acc += b;
  }
  return out;
}

SynthSummary tally(const std::vector<Tensor>& tensors) {
  SynthSummary summary;
  for (const auto& t : tensors) summary.bytes += *tensor_bytes(t.dtype, t.shape);
  summary.tensors = tensors.size();
  return summary;
}

SynthSummary write_safetensors(const SynthOptions& o, const std::vector<Tensor>& tensors) {
  SynthSummary summary = tally(tensors);
  const auto shard_of = assign_shards(tensors, o.shards);
  std::vector<SafetensorsWriter> writers(o.shards);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto& t = tensors[i];
    if (o.header_only)
      writers[shard_of[i]].add_header_only(t.name, t.dtype, t.shape);
    else
      writers[shard_of[i]].add(t.name, t.dtype, t.shape, t.data);
  }
  json weight_map = json::object();
  for (int s = 0; s < o.shards; ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, o.shards);
    writers[s].set_metadata("format", "pt");
    writers[s].write(o.out / file);
    ++summary.files;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (shard_of[i] == s) weight_map[tensors[i].name] = file;
    }
  }
  std::ofstream(o.out / "model.safetensors.index.json")
      << json{{"metadata", {{"total_size", summary.bytes}}}, {"weight_map", weight_map}}.dump(1)
      << "\n";
  return summary;
}

}  // namespace k3::model::synth
