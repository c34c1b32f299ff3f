// model::Weight and model::WeightStore: a rank's loaded parameters in the representation the
// plan chose. Layer code asks a weight for its representation (type, view), never the format.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/load/bytes.h"
#include "model/parameters.h"
#include "quant/types.h"

namespace k3::model {

struct Weight {
  std::string name;  // logical name
  quant::Type type = quant::Type::kF32;
  std::vector<std::int64_t> shape;  // this rank's slice (extent of `box`)
  SliceBox box;                     // where the slice sits in the full parameter
  WeightBytes data;                 // the encoded elements, row-major (owned or mapped)
  WeightBytes e8m0;                 // compressed-tensors MXFP4 scales
  std::vector<float> scale, offset, group_scale, group_offset;  // ModelSlim
  std::size_t group_size = 0;
  // MLA kv_b stored split (capability split_gguf_kv_b): K [heads, kv_lora, nope] and
  // V [heads, v, kv_lora], each in its own type; `data` is then empty.
  std::unique_ptr<Weight> k_b, v_b;
  // Routed experts stored one tensor per expert (hf, modelslim) stay where they are, one span per
  // local expert; `data` and `e8m0` are then empty. Stacked experts (gguf) live in `data`.
  std::vector<WeightBytes> expert_data, expert_e8m0;

  bool split_kv() const { return k_b != nullptr; }
  bool per_expert_segments() const { return !expert_data.empty(); }
  // Whether the bytes of view() (or of expert(e)) are a view into a FileMapping.
  bool mapped() const;
  // Local expert `e` of a routed-expert weight [experts, out, in] as one [out, in] matrix,
  // whichever way the experts are held.
  quant::MatrixView expert(std::size_t e) const;
  std::uint64_t bytes() const;
  // A 2-D view: rows = product of all but the last dimension, cols = the last. Not for split
  // K/V (view k_b and v_b) or per-expert segments (use expert(e)).
  quant::MatrixView view() const;
  // Every element decoded to fp32, row-major (experts one after another); floats_into writes
  // them into `out`, which must hold element_count() floats (InternalError otherwise).
  std::size_t element_count() const;
  std::vector<float> floats() const;
  void floats_into(std::span<float> out) const;
};

class WeightStore {
 public:
  void add(Weight w);
  bool has(const std::string& name) const { return weights_.count(name) != 0; }
  const Weight& get(const std::string& name) const;  // InternalError naming a missing weight
  const std::map<std::string, Weight>& all() const { return weights_; }
  std::uint64_t bytes() const;

 private:
  std::map<std::string, Weight> weights_;
};

// The loaded weights as the model's typed tree (model/kimi_k3.h): each field points at the
// weight of the parameter the definition puts there. InternalError names one not loaded.
ModelWeights<const Weight*> weight_tree(const WeightStore& store, const ModelConfig& config,
                                        const dist::Layout& layout);
// The same for a DSpark draft's weights (config.dspark set).
DSparkWeights<const Weight*> dspark_weight_tree(const WeightStore& store, const ModelConfig& config,
                                                const dist::Layout& layout);

// Bytes of this rank's weights that one decode token reads at batch 1, the numerator of the
// decode roofline: every matrix and vector in full, one row of the embedding (on average over
// the vocabulary shards) and num_experts_per_token / num_experts of the routed experts (uniform
// routing: the experts of one token, spread over the expert-parallel ranks).
std::uint64_t decode_bytes_per_token(const ModelWeights<const Weight*>& tree,
                                     const ModelConfig& config);

}  // namespace k3::model
