// dist::Layout: the rank arithmetic of one deployment, as a pure value.
//
// Every communicator k3eval uses is derived from one Layout (Megatron's parallel_state idea),
// with SGLang's semantics (its dp_attention and parallel_state modules):
//   * rank = dp_rank * attn_tp + attn_tp_rank: attention-TP groups are contiguous blocks;
//   * under DP attention the whole world is one TP group and attn_tp = tp / dp; without it each
//     of the dp replicas is its own TP group of tp ranks (world = tp * dp) and attn_tp = tp;
//   * MoE: moe_tp = tp / ep, moe_ep_rank = tp_rank / moe_tp, EP groups strided by moe_tp;
//   * the DP LM head shards the vocabulary over the attention-TP group (needs DP attention).
// No MPI here: a Layout is computed identically on every rank, and by tests, from its spec.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace k3::dist {

struct LayoutSpec {
  int world = 1;
  int tp = 0;  // 0: the default, world (DP attention) or world / dp (replicas)
  int dp = 1;
  int ep = 1;
  bool enable_dp_attention = false;
  bool enable_dp_lm_head = false;
  bool enable_shared_experts_attn_tp = false;
  bool enable_dense_mlp_attn_tp = false;
  int ranks_per_node = 0;  // 0: all ranks on one node
};

// The kinds of process group. Each partitions the world: every rank is in exactly one group of
// each kind.
enum class GroupKind {
  kWorld,   // all ranks
  kTp,      // one TP group (a whole model replica)
  kAttnTp,  // attention heads split over it; one per DP rank
  kAttnDp,  // ranks holding the same attention shard in different DP groups
  kMoeEp,   // routed experts split over it; tokens all-to-all'd within it
  kMoeTp,   // ranks that split each expert's matrices
  kNode,    // ranks sharing a (possibly simulated) host
};
inline constexpr std::array<GroupKind, 7> kAllGroupKinds = {
    GroupKind::kWorld, GroupKind::kTp,    GroupKind::kAttnTp, GroupKind::kAttnDp,
    GroupKind::kMoeEp, GroupKind::kMoeTp, GroupKind::kNode};

std::string_view group_kind_name(GroupKind kind);

// Where one rank sits in every dimension.
struct RankCoords {
  int rank = 0;
  int tp_group = 0;      // which TP group (replica); always 0 under DP attention
  int tp_rank = 0;       // rank within the TP group
  int dp_rank = 0;       // which DP group (= attention-TP group)
  int attn_tp_rank = 0;  // rank within the attention-TP group
  int moe_ep_rank = 0;   // which slice of the routed experts
  int moe_tp_rank = 0;   // which slice of each expert
  int node = 0;
  int local_rank = 0;  // rank within the node
};

// Shard `index` of `count` equal shards of a dimension (vocabulary, heads, ...).
struct Shard {
  int index = 0;
  int count = 1;
};

class Layout {
 public:
  // Validates the spec; every impossible combination throws k3::UsageError naming the violated
  // constraint and the option values involved.
  static Layout make(const LayoutSpec& spec);

  const LayoutSpec& spec() const { return spec_; }
  int world() const { return spec_.world; }
  int tp() const { return spec_.tp; }
  int dp() const { return spec_.dp; }
  int ep() const { return spec_.ep; }
  int attn_tp() const { return attn_tp_; }
  int moe_tp() const { return moe_tp_; }
  int ranks_per_node() const { return spec_.ranks_per_node; }
  int nodes() const { return spec_.world / spec_.ranks_per_node; }

  RankCoords coords(int rank) const;

  // The group of `kind` that `rank` belongs to: its index among the groups of that kind
  // (MPI_Comm_split's colour), its members in ascending rank order, and their number.
  int group_index(GroupKind kind, int rank) const;
  std::vector<int> members(GroupKind kind, int rank) const;
  int group_size(GroupKind kind) const;
  int group_count(GroupKind kind) const { return world() / group_size(kind); }
  // All groups of `kind`, ordered by group index.
  std::vector<std::vector<int>> groups(GroupKind kind) const;

  // Which group splits each weight family, as the flags choose (SGLang semantics).
  GroupKind dense_mlp_group() const;       // --enable-dense-mlp-attn-tp: attention-TP, else TP
  GroupKind shared_experts_group() const;  // --enable-shared-experts-attn-tp: attention-TP, else TP
  GroupKind lm_head_group() const;         // --enable-dp-lm-head: attention-TP, else TP
  // This rank's shard of the vocabulary (LM head and embedding).
  Shard vocab_shard(int rank) const;

  // Where `rank` sits in its group of `kind`: its index among the members (ascending ranks, the
  // order its communicator numbers them) and the group's size. Weight slices follow it.
  Shard position(GroupKind kind, int rank) const;
  // Routed experts are split evenly over the EP group: the moe-ep rank that holds `expert` of
  // `experts` (UsageError when `experts` does not divide over --ep).
  int expert_owner(int expert, int experts) const;

  // One line: "world=64 tp=64 dp=4 (DP attention) attn_tp=16 ep=64 moe_tp=1 nodes=4x16 ...".
  std::string summary() const;
  // The short label a run's history record keeps: "tp64 dp4 ep64 dp-attention dp-lm-head ...".
  std::string label() const;

 private:
  explicit Layout(const LayoutSpec& spec);
  LayoutSpec spec_;
  int attn_tp_ = 1;
  int moe_tp_ = 1;
};

// "{0..15}" for a contiguous run, "{0,16,32,48}" otherwise.
std::string format_members(const std::vector<int>& members);

}  // namespace k3::dist
