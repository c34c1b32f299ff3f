// The modelslim format's synthetic writer: a ModelSlim W4A8 export (Ascend's msModelSlim) of the
// release. The release's names and layout (HfEncoder), with every stored tensor given its scheme
// in quant_model_description.json: FLOAT for vectors, kv_b_proj, the embedding, the LM head and
// the routers; W8A8_DYNAMIC (int8 per row) for the other matrices; W4A8_DYNAMIC (int4, two per
// byte along the output dimension) for the routed experts.
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/checkpoint/stored_names.h"
#include "model/synth/hf_writer.h"

namespace k3::model::synth {

namespace {

using nlohmann::json;

class ModelSlimEncoder final : public HfEncoder {
 public:
  using HfEncoder::HfEncoder;

 private:
  void store_float(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                   const std::vector<float>& v) override {
    description_[name] = "FLOAT";
    HfEncoder::store_float(name, dtype, shape, v);
  }

  void store_matrix(const std::string& name, const ParamSpec& s, const SynthRole& role,
                    const std::vector<float>& v) override {
    const bool keep_float = s.family == ParamFamily::kEmbedding ||
                            role.shape == SynthShape::kLmHead || role.shape == SynthShape::kRouter;
    linear(name, s.shape, v, keep_float ? "FLOAT" : "W8A8_DYNAMIC");
  }

  void store_expert(const std::string& stem, const std::vector<std::int64_t>& shape,
                    const std::vector<float>& v) override {
    linear(stem + ".weight", shape, v, "W4A8_DYNAMIC");
  }

  void write_other_files() override {
    std::ofstream(c_.options().out / "quant_model_description.json")
        << description_.dump(1) << "\n";
  }

  // A linear weight: FLOAT (BF16), or int8 / packed int4 with a per-row scale and offset.
  void linear(const std::string& name, const std::vector<std::int64_t>& shape,
              const std::vector<float>& v, const std::string& scheme) {
    if (scheme == "FLOAT") return store_float(name, DType::kBF16, shape, v);
    description_[name] = scheme;
    const bool int4 = scheme == "W4A8_DYNAMIC";
    std::vector<std::int64_t> wshape = shape;
    if (int4) wshape[0] /= 2;
    quant::QuantizedMatrix q;
    if (!c_.header_only())
      q = c_.quantized(int4 ? quant::Type::kModelSlimInt4 : quant::Type::kModelSlimInt8, v, shape);
    c_.raw(name, DType::kI8, wshape, q.data);
    c_.raw(stored_names::modelslim(name, stored_names::kModelSlimScale), DType::kF32, {shape[0], 1},
           as_bytes_f32(q.scale));
    std::vector<float> offset(q.scale.size(), 0.0f);
    if (!q.offset.empty()) offset = q.offset;
    c_.raw(stored_names::modelslim(name, stored_names::kModelSlimOffset), DType::kF32,
           {shape[0], 1}, as_bytes_f32(offset));
  }

  json description_ = {
      {"model_quant_type", "W4A8_DYNAMIC"}, {"version", "1.0.0"}, {"group_size", 0}};
};

}  // namespace

const SynthWriter& modelslim_writer() {
  static const TargetWriter<ModelSlimEncoder> writer;
  return writer;
}

}  // namespace k3::model::synth
