// Internal to model/engine: one rank's weights and sequence state, and the pieces of a step,
// shared by the files that implement them (engine.cpp the step and the wiring, parallel.cpp the
// vocabulary-parallel embedding and the DP-attention gather, mla.cpp, kda_layer.cpp, moe.cpp,
// lm_head.cpp). Not part of the public surface (engine.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dist/groups.h"
#include "model/engine/engine.h"
#include "model/engine/linear.h"

namespace k3::model::engine {

namespace detail {

using Rows = std::vector<float>;  // row-major [n, width]

// The low-rank layernorms of MLA (q_a, kv_a) keep the 1e-6 default (section 2.1); the KDA q/k
// l2 norm uses 1e-6 as well (section 2.4 step 2).
constexpr double kLowRankEps = 1e-6;
constexpr double kL2Eps = 1e-6;

struct MlaLayer {
  Linear q_a, q_b, kv_a, g, o;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<Linear> k_absorb;  // per local head: [kv_lora, nope], q_lat = K_h^T q_nope
  std::vector<Linear> v_up;      // per local head: [v, kv_lora]
  int cache_index = 0;           // which MLA cache of a slot
};

struct KdaLayer {
  Linear q, k, v, f_a, f_b, b, g, o;
  std::vector<float> conv_q, conv_k, conv_v, decay, dt_bias, o_norm;
  int state_index = 0;
};

struct Mlp {  // SiTU-GLU over this rank's slice of the intermediate size
  Linear gate, up, down;
};

struct Moe {
  Linear router, down_proj, up_proj;
  std::vector<float> bias, norm;
  std::vector<Linear> w1, w3, w2;  // local experts
  int expert_begin = 0;
  Mlp shared;
  bool has_shared = false;
};

struct Layer {
  bool mla = false, dense = false;
  std::vector<float> input_norm, post_norm, attn_res_score, mlp_res_score;
  MlaLayer mla_w;
  KdaLayer kda_w;
  Mlp mlp;
  Moe moe;
};

struct Slot {
  std::vector<std::vector<float>> mla;   // per MLA layer: [position][kv_lora + rope]
  std::vector<std::vector<float>> kda;   // per KDA layer: S [local heads][D][D]
  std::vector<std::vector<float>> conv;  // per KDA layer: q, k, v [local channels][kernel-1]
  std::size_t position = 0;
};

// Where a batch's rows come from: sequence i owns rows [offset[i], offset[i] + count[i]).
struct BatchRows {
  std::vector<std::size_t> offset, count;
  std::size_t total = 0;
};

}  // namespace detail

struct Engine::Impl {
  using Rows = detail::Rows;
  using Layer = detail::Layer;
  using Mlp = detail::Mlp;
  using Moe = detail::Moe;
  using Slot = detail::Slot;
  using BatchRows = detail::BatchRows;

  ModelConfig c;
  EngineOptions opt;
  const dist::Groups& groups;
  const dist::Layout& layout;
  dist::RankCoords me;

  Linear embed, lm_head;
  std::size_t embed_begin = 0, lm_begin = 0;
  std::vector<float> final_norm, output_res_score;
  std::vector<Layer> layers;
  std::size_t mla_layers = 0, kda_layers = 0;

  // Local sizes.
  std::size_t H = 0, mla_heads = 0, kda_heads = 0, N = 0, R = 0, Vd = 0, KL = 0, D = 0, P = 0;
  std::size_t kernel = 4;
  // MoE dispatch: TP-communicator ranks holding a slice of each EP owner's experts.
  std::vector<std::vector<int>> owner_ranks;
  std::size_t experts_per_owner = 0;
  // Rows gathered over TP under DP attention start at this TP rank's contribution.
  int tp_leader = 0;

  std::vector<Slot> slots;

  Impl(const ModelConfig& config, const WeightStore& ws, const dist::Groups& g,
       const EngineOptions& o);

  // --- pieces of one step ---
  void embed_tokens(std::span<const std::int32_t> ids, Rows& h) const;
  void mla(const Layer& L, const Rows& x, std::span<const StepSequence> batch, const BatchRows& br,
           Rows& out);
  void kda(const Layer& L, const Rows& x, std::span<const StepSequence> batch, const BatchRows& br,
           Rows& out);
  void mlp_over(const Mlp& w, dist::GroupKind group, const Rows& x, std::size_t n, Rows& out);
  void moe(const Moe& w, const Rows& x, std::size_t n, Rows& out);
  void lm_head_outputs(const Rows& hidden, std::span<const StepSequence> batch,
                       const std::vector<std::size_t>& row_seq,
                       const std::vector<std::size_t>& row_pos, StepResult& result);

  // The rows a block works on: this group's own, or every DP group's of this TP group (each
  // contributed by its first attention-TP rank); this group's rows at [mine, mine + n).
  struct Gathered {
    Rows rows;
    std::size_t total = 0, mine = 0;
  };
  bool tp_is_attn_tp() const { return layout.tp() == layout.attn_tp(); }

  // A block split over `group` (the dense MLP, the shared experts, the LM head): over TP under
  // DP attention its input is every DP group's rows, gathered first (rows_over), and it reduces
  // over TP; over any other group it works on this group's rows alone. comm_over names the
  // communicator either way.
  bool gathers_over_tp(dist::GroupKind group) const {
    return group == dist::GroupKind::kTp && !tp_is_attn_tp();
  }
  Gathered rows_over(dist::GroupKind group, const Rows& x, std::size_t n, std::size_t width) const;
  const dist::Comm& comm_over(dist::GroupKind group) const;
};

}  // namespace k3::model::engine
