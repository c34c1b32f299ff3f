// A format's synthetic writer, and the part the main-model formats share: the trained
// vocabulary and the walk over the definition that hands each parameter to the format's
// encoder. Each format's writer is its own file (hf_writer.cpp, modelslim_writer.cpp,
// gguf_writer.cpp, draft_writer.cpp); model::synth_writer (model/checkpoint/synth_writers.h) is
// the one place a FormatKind is mapped to one of them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "model/synth/collector.h"
#include "model/synth/synth.h"
#include "model/tokenizer/vocabulary.h"

namespace k3::model::synth {

class SynthWriter {
 public:
  virtual ~SynthWriter() = default;
  // Writes the checkpoint that goes with `target` (the preset's model with its --set changes,
  // validated) into options.out.
  virtual SynthSummary write(const SynthOptions& options, const ModelConfig& target) const = 0;
};

// The formats' writers, each defined in its format's file.
const SynthWriter& hf_writer();
const SynthWriter& modelslim_writer();
const SynthWriter& gguf_writer();
const SynthWriter& draft_writer();

// How a main-model format stores each family of parameters (ParamFamily), made once per
// checkpoint (it may gather, as ModelSlim's description does). Each hook draws the parameter's
// logical values through the collector and collects the tensors the format stores for it.
class TargetEncoder {
 public:
  TargetEncoder(Collector& collector, const ModelConfig& config) : c_(collector), config_(config) {}
  virtual ~TargetEncoder() = default;

  virtual void vector(const ParamSpec& s, const SynthRole& role) = 0;
  virtual void attn_res_score(const ParamSpec& s, const SynthRole& role) = 0;
  virtual void kda_decay(const ParamSpec& s, const SynthRole& role) = 0;
  // The embedding, the dense-layer matrices (router included) and the latent projections.
  virtual void matrix(const ParamSpec& s, const SynthRole& role) = 0;
  virtual void mla_kv_b(const ParamSpec& s, const SynthRole& role) = 0;
  virtual void routed_experts(const ParamSpec& s, const SynthRole& role) = 0;
  // Writes the collected tensors and the format's other files (config, vocabulary).
  virtual SynthSummary finish(const Vocabulary& vocab) = 0;

 protected:
  // The logical parts of an AttnRes score as the release stores them: the norm weight [H] and
  // the projection [1, H], under stored_names::attn_res_norm / attn_res_proj.
  std::pair<std::vector<float>, std::vector<float>> attn_res_parts(const ParamSpec& s,
                                                                   const SynthRole& role) const;
  // The release's A_log [a_log_length(s)]: the decay's heads, then zeros (unused).
  std::vector<float> kda_a_log(const ParamSpec& s, const SynthRole& role) const;
  std::int64_t a_log_length(const ParamSpec& s) const;
  // The routed-expert matrix a stacked parameter's name ends with: "w1", "w2" or "w3".
  static std::string expert_matrix(const ParamSpec& s) { return s.name.substr(s.name.size() - 2); }

  Collector& c_;
  const ModelConfig& config_;
};

using EncoderFactory = std::unique_ptr<TargetEncoder> (*)(Collector&, const ModelConfig&);

// The main-model checkpoint of `target`: trains the vocabulary (SynthOptions::corpus), walks
// kimi_k3_definition in its order with each parameter's role, hands each to the encoder's hook
// for its family, and lets the encoder write the files.
SynthSummary write_target(const SynthOptions& options, const ModelConfig& target,
                          EncoderFactory make_encoder);

// A main-model format's writer: write_target with its encoder.
template <class Encoder>
class TargetWriter final : public SynthWriter {
 public:
  SynthSummary write(const SynthOptions& options, const ModelConfig& target) const override {
    return write_target(
        options, target,
        [](Collector& c, const ModelConfig& config) -> std::unique_ptr<TargetEncoder> {
          return std::make_unique<Encoder>(c, config);
        });
  }
};

}  // namespace k3::model::synth
