// The engine's parallel-layer tier (Megatron-core's tensor_parallel layers, over our dist::Groups):
// each type here owns one pattern of communication over one named group, and the model's blocks
// (mla.cpp, kda_layer.cpp, moe.cpp, lm_head.cpp) compose them; no block calls a collective.
//
//   RowGroup                the rows a block over a group works on (the DP-attention gather)
//   RowParallelLinear       input columns split over a group: partial products summed over it
//   ParallelMlp             SiTU-GLU: gate/up split by rows (column-parallel), down row-parallel
//   VocabParallelEmbedding  vocabulary rows split over attention TP
//   VocabParallelLmHead     vocabulary rows split over the LM head's group: best token, full rows
//   TokenShares             the tokens of a batch dealt over attention TP and put back together
//   ExpertDispatcher        routed tokens to their experts' owners over moe-ep and back
//
// Where something lives (a weight's slice, an expert's owner, a vocabulary shard) is answered by
// dist::Layout; the types here only move rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "dist/collectives.h"
#include "dist/groups.h"
#include "model/engine/linear.h"
#include "model/engine/ops.h"

namespace k3::model::engine {

using Rows = std::vector<float>;  // row-major [n, width]

// The rows a block split over `group` computes on. Over TP under DP attention (the dense MLP,
// shared experts or LM head without their attention-TP flags) the TP group spans every DP group,
// so each DP group's rows are gathered over TP first, each contributed by the group's first
// attention-TP rank; the block then reduces over TP. Over any other group a block works on its
// own DP group's rows.
class RowGroup {
 public:
  RowGroup() = default;
  RowGroup(const dist::Groups& groups, dist::GroupKind group);

  // The communicator the block's partial results are reduced (or its shards gathered) over.
  const dist::Comm& comm() const { return *comm_; }
  bool gathers() const { return gathers_; }

  template <class T>
  struct Gathered {
    std::vector<T> rows;
    std::size_t total = 0;  // rows in `rows`
    std::size_t mine = 0;   // this DP group's rows start here
  };
  // `x` holds this DP group's n rows of `width` values.
  Gathered<float> gather(std::span<const float> x, std::size_t n, std::size_t width) const;
  Gathered<std::uint64_t> gather(std::span<const std::uint64_t> x, std::size_t n,
                                 std::size_t width) const;

 private:
  template <class T>
  Gathered<T> gather_rows(std::span<const T> x, std::size_t n, std::size_t width) const;

  const dist::Groups* groups_ = nullptr;
  const dist::Comm* comm_ = nullptr;
  bool gathers_ = false;
  bool contributes_ = false;  // this rank brings its DP group's rows to the gather
  int leader_ = 0;            // TP-communicator rank of this DP group's contributor
};

// W [rows, cols] with its input columns split over a group: y = sum over the group of each rank's
// x_local W_local^T, summed in rank order (the same bits on every rank and every run).
class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  RowParallelLinear(Linear local, const dist::Comm& comm)
      : local_(std::move(local)), comm_(&comm) {}
  // x [n, local cols] -> y [n, rows], reduced over the group.
  void apply(std::span<const float> x, std::size_t n, std::span<float> y) const;
  const Linear& local() const { return local_; }

 private:
  Linear local_;
  const dist::Comm* comm_ = nullptr;
};

// The SiTU-GLU (section 2.2) with its intermediate size split over one group: gate and up are
// column-parallel (this rank's intermediate rows), down is row-parallel over the same group.
// `swiglu` builds the plain SwiGLU (silu(gate) x up) of a Qwen3-style drafter the same way.
class ParallelMlp {
 public:
  ParallelMlp() = default;
  ParallelMlp(Linear gate, Linear up, Linear down, RowGroup rows, float situ_beta,
              float situ_linear_beta);
  static ParallelMlp swiglu(Linear gate, Linear up, Linear down, RowGroup rows);
  // x [n, hidden] of this DP group -> out [n, hidden].
  void apply(std::span<const float> x, std::size_t n, Rows& out) const;

 private:
  Linear gate_, up_;
  RowParallelLinear down_;
  RowGroup rows_;
  float situ_beta_ = 0, situ_linear_beta_ = 0;
  bool swiglu_ = false;
};

// The token embedding with its vocabulary rows split over attention TP: each rank fills the rows
// of the tokens it holds and the group sums (exactly one rank contributes each row).
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  VocabParallelEmbedding(Linear table, std::size_t first_row, const dist::Comm& attn_tp)
      : table_(std::move(table)), first_row_(first_row), comm_(&attn_tp) {}
  void lookup(std::span<const std::int32_t> ids, std::size_t width, Rows& out) const;

 private:
  Linear table_;
  std::size_t first_row_ = 0;
  const dist::Comm* comm_ = nullptr;
};

// The LM head with its vocabulary rows split over its group (TP, or attention TP with the DP LM
// head): each rank scores its shard of the vocabulary for the rows of `rows()`, and the group
// agrees on each row's best token or reassembles whole rows of logits.
class VocabParallelLmHead {
 public:
  VocabParallelLmHead() = default;
  VocabParallelLmHead(Linear shard, std::size_t first_row, RowGroup rows)
      : shard_(std::move(shard)), first_row_(first_row), rows_(rows) {}
  const RowGroup& rows() const { return rows_; }
  const Linear& shard() const { return shard_; }
  std::size_t first_row() const { return first_row_; }
  // Per row, the best (value, token) of the whole vocabulary from each rank's best of its shard
  // (the higher value wins, then the lower token).
  void reduce_best(std::span<float> best, std::span<std::int32_t> token) const;
  // Rows of shard logits [n, shard rows] -> rows of the whole vocabulary [n, vocab].
  Rows gather_vocabulary(Rows logits, std::size_t n, std::size_t vocab) const;

 private:
  Linear shard_;
  std::size_t first_row_ = 0;
  RowGroup rows_;
};

// A batch's n tokens dealt over the attention-TP group (token t to rank t mod size), for work
// every rank of the group would otherwise repeat (routing, the latent projections); `assemble`
// puts the group's results back in token order on every rank.
class TokenShares {
 public:
  TokenShares(const dist::Comm& attn_tp, std::size_t n);
  const std::vector<std::size_t>& mine() const { return mine_; }  // token indices, ascending
  // Rows [mine().size(), width] of this rank -> [n, width] of the whole group (the rows
  // themselves when the group is this rank alone).
  Rows assemble(Rows rows, std::size_t width) const;

 private:
  const dist::Comm* comm_;
  std::size_t n_;
  std::vector<std::size_t> mine_;
};

// Routed experts with expert parallelism. Experts are split over the moe-ep group (the owner of
// an expert is dist::Layout::expert_owner) and each expert's matrices over moe-tp. The members of
// a moe-tp group first share their tokens (so each works on the same rows), then each sends every
// token, as one byte record per owner (int32 expert ids, -1 where another owner serves the route;
// float weights; the latent), to the member of its moe-ep group that owns the experts; the owner
// runs each local expert once over its rows and returns the weighted sums; the moe-tp group then
// adds its slices' partial outputs and each member keeps its own tokens.
class ExpertDispatcher {
 public:
  ExpertDispatcher(const dist::Groups& groups, int num_experts, int top_k, std::size_t latent,
                   int first_local_expert, std::size_t local_experts);

  // expert(e, in, m, out): local expert e (0-based) on m latent rows `in`, into `out` [m, latent].
  using LocalExpert =
      std::function<void(std::size_t e, std::span<const float> in, std::size_t m, Rows& out)>;
  // routes [n, top_k] and latents z [n, latent] of this rank's tokens -> [n, latent]: the sum over
  // each token's routes of weight x expert(z).
  Rows run(std::span<const Route> routes, std::span<const float> z, std::size_t n,
           const LocalExpert& expert) const;

 private:
  struct Records;
  std::vector<char> share_tokens(std::span<const Route> routes, std::span<const float> z,
                                 std::size_t n, Records& records,
                                 std::vector<int>& member_tokens) const;
  dist::Gathered<char> dispatch(std::size_t group_tokens, Records& records,
                                const std::function<const void*(std::size_t)>& token,
                                std::vector<std::vector<std::size_t>>& sent_token) const;
  Rows run_local(const std::vector<char>& received, Records& records,
                 const LocalExpert& expert) const;

  const dist::Groups* groups_ = nullptr;
  std::vector<int> owner_of_;  // expert -> moe-ep rank
  std::size_t top_k_ = 0, latent_ = 0;
  int first_local_ = 0;
  std::size_t local_ = 0;
};

}  // namespace k3::model::engine
