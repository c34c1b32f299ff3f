#include "model/synth/writer.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "model/checkpoint/stored_names.h"
#include "model/synth/values.h"
#include "model/tokenizer/bpe_trainer.h"

namespace k3::model::synth {

std::pair<std::vector<float>, std::vector<float>> TargetEncoder::attn_res_parts(
    const ParamSpec& s, const SynthRole& role) const {
  const std::int64_t H = s.shape[0];
  return {c_.values(stored_names::attn_res_norm(s.name), SynthRole{SynthShape::kNormWeight}, {H}),
          c_.values(stored_names::attn_res_proj(s.name), role, {1, H})};
}

// The release stores A_log at least kda_head_dim long.
std::int64_t TargetEncoder::a_log_length(const ParamSpec& s) const {
  return std::max<std::int64_t>(s.shape[0], config_.kda_head_dim);
}

std::vector<float> TargetEncoder::kda_a_log(const ParamSpec& s, const SynthRole& role) const {
  const std::int64_t heads = s.shape[0];
  auto v = c_.values(stored_names::kda_a_log(s.name), role, {a_log_length(s)});
  for (std::int64_t i = heads; i < static_cast<std::int64_t>(v.size()); ++i)
    v[i] = 0.0f;  // unused, as in the release
  return v;
}

namespace {

// The tiny preset tokenizes for real: a BPE vocabulary trained on the corpus, of exactly the
// config's base size. Larger presets get a 4096-token vocabulary (GGUF pads its token list to
// vocab_size; tiktoken.model holds the 4096 tokens, their ids below vocab_size).
Vocabulary trained_vocabulary(const SynthOptions& o, const ModelConfig& cfg) {
  if (o.corpus.empty())
    throw UsageError(
        "k3ckpt synth needs --corpus (a JSONL text corpus such as GSM8K's train.jsonl)");
  BpeTrainOptions train;
  train.vocab_size = o.preset == "tiny" ? cfg.base_vocab_size() : 4096;
  Vocabulary vocab = train_bpe(read_jsonl_corpus(o.corpus), train);
  if (vocab.base_size() != train.vocab_size) {
    throw InputError("corpus " + o.corpus.string() + " yields only " +
                     std::to_string(vocab.base_size()) + " BPE tokens, the preset needs " +
                     std::to_string(train.vocab_size));
  }
  return vocab;
}

}  // namespace

SynthSummary write_target(const SynthOptions& o, const ModelConfig& cfg,
                          EncoderFactory make_encoder) {
  const Vocabulary vocab = trained_vocabulary(o, cfg);
  dist::LayoutSpec one;
  const ModelWeights<ParamSpec> definition = kimi_k3_definition(cfg, dist::Layout::make(one));
  const ModelWeights<SynthRole> roles = synth_roles(definition);
  std::filesystem::create_directories(o.out);
  Collector c(o, structure_of(cfg),
              o.mutant ? MutationEffect(*o.mutant, cfg, o.format) : MutationEffect{});
  const std::unique_ptr<TargetEncoder> encoder = make_encoder(c, cfg);
  // Every parameter with its synthetic role, in the definition's order.
  auto emit = [&](const ParamSpec& s, const SynthRole& role) {
    switch (s.family) {
      case ParamFamily::kVector:
        return encoder->vector(s, role);
      case ParamFamily::kAttnResScore:
        return encoder->attn_res_score(s, role);
      case ParamFamily::kKdaDecay:
        return encoder->kda_decay(s, role);
      case ParamFamily::kEmbedding:
      case ParamFamily::kLinear:
      case ParamFamily::kLatentProjection:
        return encoder->matrix(s, role);
      case ParamFamily::kMlaKvB:
        return encoder->mla_kv_b(s, role);
      case ParamFamily::kRoutedExpert:
        return encoder->routed_experts(s, role);
    }
  };
  ModelWeights<ParamSpec>::fields(emit, definition, roles);
  if (c.mutation().active() && !c.mutation().applied())
    throw InternalError("mutant '" + o.mutant->name + "' changed no tensor of the " +
                        std::string(format_name(o.format)) + " checkpoint");
  return encoder->finish(vocab);
}

}  // namespace k3::model::synth
