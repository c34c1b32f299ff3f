// Internal to model/engine: one rank's weights and sequence state, and the pieces of a step,
// shared by the files that implement them (engine.cpp the wiring and the step, mla.cpp,
// kda_layer.cpp, moe.cpp, lm_head.cpp); the communication they need is the parallel tier's
// (parallel.h). Not part of the public surface (engine.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dist/groups.h"
#include "model/engine/engine.h"
#include "model/engine/kda.h"
#include "model/engine/linear.h"
#include "model/engine/parallel.h"

namespace k3::model::engine {

namespace detail {

// The low-rank layernorms of MLA (q_a, kv_a) keep the 1e-6 default (section 2.1); the KDA q/k
// l2 norm uses 1e-6 as well (section 2.4 step 2).
constexpr double kLowRankEps = 1e-6;
constexpr double kL2Eps = 1e-6;

struct MlaLayer {
  Linear q_a, q_b, kv_a, g;
  RowParallelLinear o;  // over attention TP
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<Linear> k_absorb;  // per local head: [kv_lora, nope], q_lat = K_h^T q_nope
  std::vector<Linear> v_up;      // per local head: [v, kv_lora]
  int cache_index = 0;           // which MLA cache of a slot
};

struct KdaLayer {
  Linear q, k, v, f_a, f_b, b, g;
  RowParallelLinear o;  // over attention TP
  // The conv taps by offset, [kernel][local channels]: row kernel-1 multiplies the current input,
  // row j the input kernel-1-j tokens back (the checkpoint stores [channels][kernel]).
  std::vector<float> conv_q, conv_k, conv_v;
  std::vector<float> decay, dt_bias, o_norm;
  int state_index = 0;
};

struct Moe {
  Linear router, down_proj, up_proj;
  std::vector<float> bias, norm;
  // Local experts, from the dispatcher's first local expert: gate (w1) rows then up (w3) rows
  // in one matrix, and down (w2).
  std::vector<Linear> w13, w2;
  std::optional<ParallelMlp> shared;
};

struct Layer {
  std::vector<float> input_norm, post_norm, attn_res_score, mlp_res_score;
  std::optional<MlaLayer> mla;  // exactly one of mla / kda
  std::optional<KdaLayer> kda;
  std::optional<ParallelMlp> mlp;  // exactly one of mlp (dense) / moe
  std::optional<Moe> moe;
};

struct Slot {
  std::vector<std::vector<float>> mla;   // per MLA layer: [position][kv_lora + rope]
  std::vector<std::vector<float>> kda;   // per KDA layer: S [local heads][D][D]
  // per KDA layer: q, k, v [kernel-1][local channels], oldest first
  std::vector<std::vector<float>> conv;
  std::size_t position = 0;
  // A speculative step's tokens awaiting Engine::commit, and per KDA layer their recurrence
  // inputs per local head (Engine::commit replays the accepted ones on the state, which the
  // verify step left alone) and their pre-conv inputs [3][tokens][channels] (the window after
  // any prefix of them follows from those).
  std::size_t pending = 0;
  std::vector<std::vector<KdaHead>> kda_pending;
  std::vector<std::vector<float>> conv_inputs;
};

// The buffers a step's attention blocks and routed experts reuse from layer to layer and step to
// step instead of allocating them per layer (an allocator that maps large blocks afresh, as
// AddressSanitizer's does above 128 KiB, faults and zeroes their pages every time). Nothing in
// them outlives the call that fills them.
struct StepScratch {
  // One attention block runs at a time, MLA or KDA: both draw their per-call buffers from
  // these (Engine::Impl::scratch_rows), so what stays resident is the larger block's need, as
  // when each call allocated its own.
  std::array<std::vector<float>, 11> rows;
  std::vector<KdaHead> kda_heads;                  // per (sequence, head) of a plain KDA step
  std::vector<std::vector<float>> kda_work;        // per (sequence, head) of a verify step
  std::vector<std::vector<float>> expert_gate_up;  // per local expert: its rows' [gate | up]
};
// Whether a reused buffer of `capacity` floats is given back before a use that needs n: when it
// holds more than `kept_bytes` and more than twice n (a step after a long prefill chunk), instead
// of holding that memory for the rest of the run.
inline bool far_above_need(std::size_t capacity, std::size_t n, std::size_t kept_bytes) {
  return capacity > 2 * n && capacity * sizeof(float) > kept_bytes;
}
// `buffer` as n zeros, ready for one use; its capacity kept unless far_above_need with 16 MiB.
std::vector<float>& zeroed(std::vector<float>& buffer, std::size_t n);

// A matrix the engine (or a drafter) multiplies: dequantized to F32 when `exact`, else
// repacked (Linear::repacked) when `repack`, else in place. A repacked copy of mapped
// checkpoint bytes releases their pages from the resident set (FileMapping::release); `mapped`
// says whether view.data is such.
Linear product_matrix(const quant::MatrixView& view, bool mapped, bool exact, bool repack);

// Where a batch's rows come from: sequence i owns rows [offset[i], offset[i] + count[i]).
struct BatchRows {
  std::vector<std::size_t> offset, count;
  std::size_t total = 0;
};

}  // namespace detail

struct Engine::Impl {
  using Layer = detail::Layer;
  using MlaLayer = detail::MlaLayer;
  using KdaLayer = detail::KdaLayer;
  using Moe = detail::Moe;
  using Slot = detail::Slot;
  using BatchRows = detail::BatchRows;

  ModelConfig c;
  EngineOptions opt;
  const dist::Groups& groups;
  const dist::Layout& layout;

  VocabParallelEmbedding embedding;
  VocabParallelLmHead lm_head;
  std::optional<ExpertDispatcher> experts;  // absent in a model without MoE layers
  std::vector<float> final_norm, output_res_score;
  std::vector<Layer> layers;
  std::size_t mla_layers = 0, kda_layers = 0;

  // Model sizes, per rank where heads are split over attention TP.
  std::size_t hidden = 0;
  std::size_t mla_heads = 0, nope_dim = 0, rope_dim = 0, v_dim = 0, kv_lora = 0;
  std::size_t kda_heads = 0, kda_dim = 0, kda_width = 0;  // kda_width = kda_heads * kda_dim
  std::size_t conv_kernel = 4;

  std::vector<Slot> slots;
  detail::StepScratch scratch;

  Impl(const ModelConfig& config, const WeightStore& ws, const dist::Groups& g,
       const EngineOptions& o);

  // --- the weights wired into layers ---
  Linear product(const Weight* w) const;  // a multiplied matrix (product_matrix with opt)
  ParallelMlp glu(const MlpWeights<const Weight*>& w, dist::GroupKind group) const;
  RowParallelLinear over_attn_tp(const Weight* w) const;
  void wire_mla(const MlaWeights<const Weight*>& src, MlaLayer& m);
  void wire_kda(const KdaWeights<const Weight*>& src, KdaLayer& k);
  void wire_moe(const MoeWeights<const Weight*>& src, Moe& x);

  // --- pieces of one step ---
  // scratch.rows[which] as n zeros (detail::zeroed): a block's per-call buffer, `which` distinct
  // for each buffer the block holds at once.
  Rows& scratch_rows(std::size_t which, std::size_t n) {
    return detail::zeroed(scratch.rows.at(which), n);
  }
  // The batch's rows, each sequence's checked against its slot and the vocabulary; `ids` gets
  // every fed token in batch order.
  BatchRows batch_rows(std::span<const StepSequence> batch, std::vector<std::int32_t>& ids) const;
  // Every row of the sequences asking for `output`.
  static std::vector<std::size_t> rows_of(std::span<const StepSequence> batch, const BatchRows& br,
                                          StepSequence::Output output);
  // The rows that produce output (every row of kAllLogits / kEveryToken sequences, the last of
  // kNextToken ones), with each row's sequence and position.
  std::vector<std::size_t> output_rows(std::span<const StepSequence> batch, const BatchRows& br,
                                       std::vector<std::size_t>& row_seq,
                                       std::vector<std::size_t>& row_pos) const;
  // Those rows through the output AttnRes mix and the final norm.
  Rows final_rows(const Rows& h, const std::vector<Rows>& banks,
                  const std::vector<std::size_t>& rows) const;
  // Positions advance by the fed tokens; a speculative sequence's wait for commit().
  void advance_slots(std::span<const StepSequence> batch);
  void mla(const MlaLayer& w, const Rows& x, std::span<const StepSequence> batch,
           const BatchRows& br, Rows& out);
  void kda(const KdaLayer& w, const Rows& x, std::span<const StepSequence> batch,
           const BatchRows& br, Rows& out);
  void moe(const Moe& w, const Rows& x, std::size_t n, Rows& out);
  void lm_head_outputs(const Rows& final_rows, std::span<const StepSequence> batch,
                       const std::vector<std::size_t>& row_seq,
                       const std::vector<std::size_t>& row_pos, StepResult& result);
};

}  // namespace k3::model::engine
