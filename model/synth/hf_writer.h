// The hf format's synthetic writer: the official release's layout (moonshotai/Kimi-K3). Names
// under "language_model.", AttnRes scores and the KDA decay unfolded (norm and projection,
// A_log), one dense kv_b_proj, matrices in BF16 and routed experts in compressed-tensors MXFP4;
// safetensors shards with their index, config.json and tiktoken.model. ModelSlim's exports keep
// this layout and store the matrices their own way: ModelSlimEncoder derives from HfEncoder.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/synth/writer.h"

namespace k3::model::synth {

class HfEncoder : public TargetEncoder {
 public:
  using TargetEncoder::TargetEncoder;

  void vector(const ParamSpec& s, const SynthRole& role) override;
  void attn_res_score(const ParamSpec& s, const SynthRole& role) override;
  void kda_decay(const ParamSpec& s, const SynthRole& role) override;
  void matrix(const ParamSpec& s, const SynthRole& role) override;
  void mla_kv_b(const ParamSpec& s, const SynthRole& role) override;
  void routed_experts(const ParamSpec& s, const SynthRole& role) override;
  SynthSummary finish(const Vocabulary& vocab) override;

 protected:
  static constexpr std::string_view kPrefix = "language_model.";

  // A tensor kept in floats (BF16, or F32 where the release stores F32).
  virtual void store_float(const std::string& name, DType dtype,
                           const std::vector<std::int64_t>& shape, const std::vector<float>& v);
  // A matrix of the embedding, linear or latent-projection family: BF16.
  virtual void store_matrix(const std::string& name, const ParamSpec& s, const SynthRole& role,
                            const std::vector<float>& v);
  // One routed expert's [out, in] matrix, named by its stem (stored_names::routed_expert):
  // compressed-tensors MXFP4, weight_packed and weight_scale.
  virtual void store_expert(const std::string& stem, const std::vector<std::int64_t>& shape,
                            const std::vector<float>& v);
  // Files the format writes beside the shards, config.json and tiktoken.model: none.
  virtual void write_other_files() {}
};

}  // namespace k3::model::synth
