// model::ParamSpec: every parameter of the Kimi-K3 text model (or of a DSpark draft), by its
// logical name (the official release's, without "language_model."; a draft's names as it stores
// them), with its logical shape and how the parallel layout splits it. Shapes follow the release's
// config.json and tensors (moonshotai/Kimi-K3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/layout.h"
#include "model/config.h"
#include "model/dspark_weights.h"
#include "model/kimi_k3.h"

namespace k3::model {

// What kind of weight a parameter is: decides which capability picks its representation.
enum class ParamFamily {
  kVector,            // norms, biases, conv taps: always dense floats
  kAttnResScore,      // AttnRes norm weight x projection (folded or not)
  kKdaDecay,          // exp(A_log[:heads]) (folded or not)
  kEmbedding,         // token embedding
  kLinear,            // any dense-layer matrix (attention, MLPs, LM head, router)
  kMlaKvB,            // MLA kv_b: dense kv_b_proj or split K / V
  kLatentProjection,  // routed_expert_down_proj / routed_expert_up_proj
  kRoutedExpert,      // stacked routed expert matrices [experts, out, in]
};

enum class SplitKind {
  kReplicated,
  kRows,     // the first dimension over `group` in units of `unit` rows (heads, vocabulary rows)
  kCols,     // the last dimension over `group` in units of `unit` columns
  kExperts,  // dimension 0 over the EP group; then rows (w1/w3) or columns (w2) over MoE-TP
};

struct ParamSpec {
  std::string name;  // "model.layers.3.self_attn.q_b_proj.weight"
  int layer = -1;    // -1 for global parameters
  ParamFamily family = ParamFamily::kVector;
  std::vector<std::int64_t> shape;  // logical, row-major
  SplitKind split = SplitKind::kReplicated;
  dist::GroupKind group = dist::GroupKind::kWorld;
  std::int64_t unit = 1;
  bool expert_split_cols = false;  // kExperts: w2 splits its columns over MoE-TP, w1/w3 rows
};

// The model's definition: every parameter's logical name, shape and split, in the typed tree
// (model/kimi_k3.h). This is the one place those names are written. Not for a draft
// (InternalError): a draft's definition is dspark_definition.
ModelWeights<ParamSpec> kimi_k3_definition(const ModelConfig& config, const dist::Layout& layout);

// The DSpark drafter's definition (config.dspark set): the same role for a draft checkpoint. Its
// heads (Q, K, V by rows, o_proj by columns, in units of head_dim) and MLP split over attention
// TP; markov_w2's vocabulary rows like the target's LM head; fc, markov_w1, the norms and the
// confidence head are replicated.
DSparkWeights<ParamSpec> dspark_definition(const ModelConfig& config, const dist::Layout& layout);

// The parameters of the config's definition as a flat list in the tree's order (global first,
// then layer by layer): kimi_k3_definition's, or dspark_definition's for a draft (what binding,
// plan, loader and audit walk for either kind of checkpoint).
std::vector<ParamSpec> kimi_k3_parameters(const ModelConfig& config, const dist::Layout& layout);

// This rank's part of one parameter: a box [begin, end) per logical dimension.
struct SliceBox {
  std::vector<std::int64_t> begin;
  std::vector<std::int64_t> end;
  std::vector<std::int64_t> extent() const;
  bool full(const std::vector<std::int64_t>& shape) const;
};

// Throws k3::InputError when the layout cannot split the parameter (e.g. 16 heads over an
// attention-TP group of 3), naming the parameter, the dimension, the group and the sizes.
SliceBox slice_for_rank(const ParamSpec& spec, const dist::Layout& layout, int rank);

}  // namespace k3::model
