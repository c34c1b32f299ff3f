#include "model/synth/mutants.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "model/checkpoint/gguf_names.h"
#include "model/checkpoint/stored_names.h"
#include "quant/fp.h"

namespace k3::model {

namespace {

constexpr FormatKind kHf = FormatKind::kHf, kModelSlim = FormatKind::kModelSlim,
                     kGguf = FormatKind::kGguf;
const std::vector<FormatKind> kTargets = {kHf, kModelSlim, kGguf};

}  // namespace

const std::vector<MutantInfo>& mutant_catalog() {
  static const std::vector<MutantInfo> catalog = {
      {"mla_o_proj", "the MLA output projection (o_proj) scaled by 1 + amount", 0.2, kTargets},
      {"kda_o_proj", "the KDA output projection (o_proj) scaled by 1 + amount", 0.2, kTargets},
      {"dense_mlp_down", "the dense MLP's down_proj scaled by 1 + amount", 0.2, kTargets},
      {"shared_expert_down", "the shared expert's down_proj scaled by 1 + amount", 0.2, kTargets},
      {"routed_expert_down", "routed expert 0's w2 (latent output) scaled by 1 + amount", 0.2,
       kTargets},
      {"latent_up_proj", "LatentMoE's routed_expert_up_proj (latent to hidden) scaled by 1 + amount",
       0.2, kTargets},
      {"attn_res_proj", "the attention's AttnRes score projection scaled by 1 + amount", 0.2,
       kTargets},
      {"lm_head", "the LM head scaled by 1 + amount", 0.2, kTargets},
      {"embedding", "the token embedding scaled by 1 + amount", 0.2, kTargets},
      {"norm_sign", "the MLA layer's input_layernorm weight negated", 0.0, kTargets},
      {"expert_swap", "routed experts 0 and 1 swapped (w1, w2 and w3)", 0.0, kTargets},
      {"router_bias", "expert 0's e_score_correction_bias shifted by + amount", 0.5, kTargets},
      {"kda_decay", "the KDA decay rate exp(A_log) scaled by 1 + amount", 0.1, kTargets},
      {"modelslim_scale",
       "the MLA o_proj's W8A8 per-channel weight_scale scaled by 1 + amount (ModelSlim only)", 0.1,
       {kModelSlim}},
      {"gguf_block_scale",
       "the first Q8_0 block's scale of the MLA o_proj scaled by 1 + amount (GGUF only)", 0.1,
       {kGguf}},
      {"draft_rope_base", "the DSpark draft's rotary base (rope_theta) scaled by 1 + amount", 0.05,
       {FormatKind::kDraft}},
  };
  return catalog;
}

const MutantInfo& find_mutant(std::string_view name) {
  std::string names;
  for (const MutantInfo& m : mutant_catalog()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + std::string(m.name);
  }
  throw UsageError("mutant '" + std::string(name) + "' is not one of " + names);
}

namespace synth {

namespace {

// The layer of a kind nearest the middle of the model (the lower one on a tie): an error there
// has half the model before it and half after.
int middle_layer(const ModelConfig& c, bool (*of_kind)(const ModelConfig&, int), const char* kind) {
  int best = -1;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (!of_kind(c, l)) continue;
    const int mid = c.num_hidden_layers / 2;
    if (best < 0 || std::abs(l - mid) < std::abs(best - mid)) best = l;
  }
  if (best < 0) throw UsageError(std::string("the model has no ") + kind + " layer to mutate");
  return best;
}

bool is_mla(const ModelConfig& c, int l) { return c.is_mla_layer(l); }
bool is_kda(const ModelConfig& c, int l) { return !c.is_mla_layer(l); }
bool is_dense(const ModelConfig& c, int l) { return c.is_dense_layer(l); }
bool is_moe(const ModelConfig& c, int l) { return !c.is_dense_layer(l) && c.num_experts > 0; }

std::string layer(int l) { return "model.layers." + std::to_string(l) + "."; }

}  // namespace

MutationEffect::MutationEffect(const Mutation& m, const ModelConfig& c, FormatKind format) {
  const MutantInfo& info = find_mutant(m.name);
  if (std::find(info.formats.begin(), info.formats.end(), format) == info.formats.end())
    throw UsageError("mutant '" + m.name + "' does not apply to the " +
                     std::string(format_name(format)) + " format");
  amount_ = m.amount.value_or(info.default_amount);
  if (!std::isfinite(amount_)) throw UsageError("mutant '" + m.name + "': amount must be finite");
  const std::string& n = m.name;
  // The layers a mutant names, found only for the mutants that name one (a draft has none).
  auto mla = [&] { return layer(middle_layer(c, is_mla, "MLA")); };
  auto kda = [&] { return layer(middle_layer(c, is_kda, "KDA")); };
  auto moe = [&] { return layer(middle_layer(c, is_moe, "MoE")) + "block_sparse_moe."; };
  kind_ = Kind::kScale;
  if (n == "mla_o_proj") logical_ = {mla() + "self_attn.o_proj.weight"};
  if (n == "kda_o_proj") logical_ = {kda() + "self_attn.o_proj.weight"};
  if (n == "dense_mlp_down")
    logical_ = {layer(middle_layer(c, is_dense, "dense")) + "mlp.down_proj.weight"};
  if (n == "shared_expert_down") {
    if (c.num_shared_experts == 0) throw UsageError("the model has no shared expert to mutate");
    logical_ = {moe() + "shared_experts.down_proj.weight"};
  }
  if (n == "routed_expert_down") {
    // One expert: the weighted sum of the experts is RMS-normalised before the up projection
    // (section 2.5), so scaling every expert alike would change nothing.
    kind_ = Kind::kScaleExpert;
    logical_ = {moe() + "experts.w2"};
    element_ = 0;
    expert_size_ = static_cast<std::size_t>(c.moe_intermediate_size) *
                   static_cast<std::size_t>(c.routed_expert_hidden_size);
  }
  if (n == "latent_up_proj") logical_ = {moe() + "routed_expert_up_proj.weight"};
  if (n == "attn_res_proj") logical_ = {stored_names::attn_res_proj(mla() + "self_attention_res_score")};
  if (n == "lm_head") logical_ = {"lm_head.weight"};
  if (n == "embedding") logical_ = {"model.embed_tokens.weight"};
  if (n == "norm_sign") {
    kind_ = Kind::kNegate;
    logical_ = {mla() + "input_layernorm.weight"};
  }
  if (n == "expert_swap") {
    if (c.num_experts < 2) throw UsageError("the model has fewer than 2 experts to swap");
    kind_ = Kind::kSwapExperts;
    logical_ = {moe() + "experts.w1", moe() + "experts.w2", moe() + "experts.w3"};
    element_ = 0;
    other_ = 1;
  }
  if (n == "router_bias") {
    kind_ = Kind::kShiftElement;
    logical_ = {moe() + "gate.e_score_correction_bias"};
    element_ = 0;
  }
  if (n == "kda_decay") {
    kind_ = Kind::kLogShift;
    logical_ = {stored_names::kda_a_log(kda() + "self_attn.decay")};
  }
  if (n == "modelslim_scale") {
    kind_ = Kind::kStoredScale;
    stored_ = "language_model." +
              stored_names::modelslim(mla() + "self_attn.o_proj.weight", stored_names::kModelSlimScale);
  }
  if (n == "gguf_block_scale") {
    kind_ = Kind::kBlockScale;
    stored_ = gguf_name(mla() + "self_attn.o_proj.weight", c);
  }
  if (n == "draft_rope_base") kind_ = Kind::kRopeBase;
  // The relative kinds multiply by 1 + amount.
  const bool relative = kind_ != Kind::kNegate && kind_ != Kind::kSwapExperts &&
                        kind_ != Kind::kShiftElement;
  if (relative && !(amount_ > -1.0))
    throw UsageError("mutant '" + n + "': amount " + std::to_string(amount_) +
                     " would zero or flip the tensor; expected > -1");
}

void MutationEffect::on_config(ModelConfig& config) const {
  if (kind_ != Kind::kRopeBase || !config.dspark) return;
  config.dspark->rope_theta *= 1.0 + amount_;
  applied_ = true;
}

std::size_t MutationEffect::source_index(const std::string& logical,
                                         const std::vector<std::int64_t>& shape, std::size_t first,
                                         std::size_t count) const {
  if (kind_ != Kind::kSwapExperts ||
      std::find(logical_.begin(), logical_.end(), logical) == logical_.end())
    return first;
  // A writer that draws one expert at a time asks for [e * size, (e + 1) * size) with the
  // expert's own shape.
  std::size_t size = 1;
  for (auto d : shape) size *= static_cast<std::size_t>(d);
  if (count != size || first % size != 0) return first;
  const auto expert = static_cast<std::int64_t>(first / size);
  if (expert != element_ && expert != other_) return first;
  applied_ = true;
  return static_cast<std::size_t>(expert == element_ ? other_ : element_) * size;
}

void MutationEffect::on_logical(const std::string& logical, const std::vector<std::int64_t>& shape,
                                std::size_t first, std::vector<float>& v) const {
  if (std::find(logical_.begin(), logical_.end(), logical) == logical_.end()) return;
  applied_ = applied_ || kind_ == Kind::kScale || kind_ == Kind::kNegate ||
             kind_ == Kind::kLogShift;
  switch (kind_) {
    case Kind::kScale:
      for (float& x : v) x = static_cast<float>(x * (1.0 + amount_));
      return;
    case Kind::kScaleExpert:
      for (std::size_t i = 0; i < v.size(); ++i) {
        if ((first + i) / expert_size_ != static_cast<std::size_t>(element_)) continue;
        v[i] = static_cast<float>(v[i] * (1.0 + amount_));
        applied_ = true;
      }
      return;
    case Kind::kNegate:
      for (float& x : v) x = -x;
      return;
    case Kind::kShiftElement:
      if (first <= static_cast<std::size_t>(element_) &&
          static_cast<std::size_t>(element_) < first + v.size()) {
        v[static_cast<std::size_t>(element_) - first] += static_cast<float>(amount_);
        applied_ = true;
      }
      return;
    case Kind::kLogShift:  // A_log + log(1 + amount): the rate exp(A_log) times 1 + amount
      for (float& x : v) x = static_cast<float>(x + std::log1p(amount_));
      return;
    case Kind::kSwapExperts: {
      // A writer that draws the stacked tensor [E, ...] at once: swap the two slices here (one
      // drawn per expert was redirected by source_index).
      if (first != 0 || shape.size() != 3) return;
      const auto size = static_cast<std::size_t>(shape[1] * shape[2]);
      if (v.size() != static_cast<std::size_t>(shape[0]) * size) return;
      std::swap_ranges(v.begin() + element_ * size, v.begin() + (element_ + 1) * size,
                       v.begin() + other_ * size);
      applied_ = true;
      return;
    }
    default:
      return;
  }
}

void MutationEffect::on_stored(const std::string& stored, DType dtype,
                               std::vector<std::uint8_t>& bytes) const {
  if (stored != stored_ || bytes.empty()) return;
  if (kind_ == Kind::kStoredScale && dtype == DType::kF32) {
    for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      float x;
      std::memcpy(&x, bytes.data() + i, 4);
      x = static_cast<float>(x * (1.0 + amount_));
      std::memcpy(bytes.data() + i, &x, 4);
    }
    applied_ = true;
    return;
  }
  if (kind_ == Kind::kBlockScale && dtype == DType::kQ8_0) {
    // A Q8_0 block begins with its fp16 scale d (ggml's block_q8_0).
    std::uint16_t d;
    std::memcpy(&d, bytes.data(), 2);
    d = quant::f32_to_fp16(static_cast<float>(quant::fp16_to_f32(d) * (1.0 + amount_)));
    std::memcpy(bytes.data(), &d, 2);
    applied_ = true;
    return;
  }
  throw InternalError("mutant's stored tensor " + stored + " has an encoding it cannot change");
}

}  // namespace synth
}  // namespace k3::model
