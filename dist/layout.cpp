#include "dist/layout.h"

#include <sstream>

#include "common/error.h"

namespace k3::dist {

std::string_view group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return "world";
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kAttnTp:
      return "attn-tp";
    case GroupKind::kAttnDp:
      return "attn-dp";
    case GroupKind::kMoeEp:
      return "moe-ep";
    case GroupKind::kMoeTp:
      return "moe-tp";
    case GroupKind::kNode:
      return "node";
  }
  return "unknown";
}

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError("invalid parallel layout: " + message);
}

std::string str(int v) { return std::to_string(v); }

}  // namespace

Layout Layout::make(const LayoutSpec& requested) {
  LayoutSpec spec = requested;
  require(spec.world >= 1, "world size " + str(spec.world) + " must be >= 1");
  require(spec.dp >= 1, "--dp " + str(spec.dp) + " must be >= 1");
  require(spec.ep >= 1, "--ep " + str(spec.ep) + " must be >= 1");
  require(spec.tp >= 0, "--tp " + str(spec.tp) + " must be >= 1");
  require(spec.ranks_per_node >= 0,
          "--ranks-per-node " + str(spec.ranks_per_node) + " must be >= 1");
  // SGLang asserts "Please enable dp attention when setting enable_dp_lm_head."
  require(!spec.enable_dp_lm_head || spec.enable_dp_attention,
          "--enable-dp-lm-head requires --enable-dp-attention (the LM head is sharded over the "
          "attention-TP group)");

  if (spec.tp == 0) {
    if (spec.enable_dp_attention) {
      spec.tp = spec.world;
    } else {
      require(spec.world % spec.dp == 0, "--dp " + str(spec.dp) + " must divide the world size " +
                                             str(spec.world) + " (each DP replica is a TP group)");
      spec.tp = spec.world / spec.dp;
    }
  }
  if (spec.enable_dp_attention) {
    // SGLang: with DP attention the DP groups live inside one TP group spanning every rank.
    require(spec.tp == spec.world, "--tp " + str(spec.tp) + " must equal the world size " +
                                       str(spec.world) +
                                       " under --enable-dp-attention (one TP group holds every "
                                       "DP attention group)");
    require(spec.tp % spec.dp == 0,
            "--dp " + str(spec.dp) + " must divide --tp " + str(spec.tp) +
                " under --enable-dp-attention (attention-TP size = tp / dp)");
  } else {
    require(static_cast<long long>(spec.tp) * spec.dp == spec.world,
            "--tp " + str(spec.tp) + " x --dp " + str(spec.dp) + " must equal the world size " +
                str(spec.world) + " without --enable-dp-attention (dp replicas of tp ranks each)");
  }
  require(spec.tp % spec.ep == 0, "--ep " + str(spec.ep) + " must divide --tp " + str(spec.tp) +
                                      " (MoE-TP size = tp / ep)");
  if (spec.ranks_per_node == 0) spec.ranks_per_node = spec.world;
  require(spec.world % spec.ranks_per_node == 0,
          "--ranks-per-node " + str(spec.ranks_per_node) + " must divide the world size " +
              str(spec.world) + " (every node holds the same number of ranks)");
  return Layout(spec);
}

Layout::Layout(const LayoutSpec& spec) : spec_(spec) {
  attn_tp_ = spec.enable_dp_attention ? spec.tp / spec.dp : spec.tp;
  moe_tp_ = spec.tp / spec.ep;
}

RankCoords Layout::coords(int rank) const {
  if (rank < 0 || rank >= world()) {
    throw InternalError("rank " + str(rank) + " outside world of " + str(world()));
  }
  RankCoords c;
  c.rank = rank;
  c.tp_group = rank / tp();
  c.tp_rank = rank % tp();
  c.dp_rank = rank / attn_tp_;
  c.attn_tp_rank = rank % attn_tp_;
  c.moe_ep_rank = c.tp_rank / moe_tp_;
  c.moe_tp_rank = c.tp_rank % moe_tp_;
  c.node = rank / ranks_per_node();
  c.local_rank = rank % ranks_per_node();
  return c;
}

int Layout::group_index(GroupKind kind, int rank) const {
  const RankCoords c = coords(rank);
  switch (kind) {
    case GroupKind::kWorld:
      return 0;
    case GroupKind::kTp:
      return c.tp_group;
    case GroupKind::kAttnTp:
      return c.dp_rank;
    case GroupKind::kAttnDp:
      return c.attn_tp_rank;
    case GroupKind::kMoeEp:
      return c.tp_group * moe_tp_ + c.moe_tp_rank;
    case GroupKind::kMoeTp:
      return rank / moe_tp_;
    case GroupKind::kNode:
      return c.node;
  }
  throw InternalError("unknown group kind");
}

int Layout::group_size(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kWorld:
      return world();
    case GroupKind::kTp:
      return tp();
    case GroupKind::kAttnTp:
      return attn_tp_;
    case GroupKind::kAttnDp:
      return dp();
    case GroupKind::kMoeEp:
      return ep();
    case GroupKind::kMoeTp:
      return moe_tp_;
    case GroupKind::kNode:
      return ranks_per_node();
  }
  throw InternalError("unknown group kind");
}

std::vector<int> Layout::members(GroupKind kind, int rank) const {
  const int index = group_index(kind, rank);
  std::vector<int> out;
  out.reserve(group_size(kind));
  for (int r = 0; r < world(); ++r) {
    if (group_index(kind, r) == index) out.push_back(r);
  }
  return out;
}

std::vector<std::vector<int>> Layout::groups(GroupKind kind) const {
  std::vector<std::vector<int>> out(group_count(kind));
  for (int r = 0; r < world(); ++r) {
    const int index = group_index(kind, r);
    if (index < 0 || index >= static_cast<int>(out.size())) {
      throw InternalError("group index " + str(index) + " of " +
                          std::string(group_kind_name(kind)) + " out of range for rank " + str(r));
    }
    out[index].push_back(r);
  }
  return out;
}

GroupKind Layout::dense_mlp_group() const {
  return spec_.enable_dense_mlp_attn_tp ? GroupKind::kAttnTp : GroupKind::kTp;
}

GroupKind Layout::shared_experts_group() const {
  return spec_.enable_shared_experts_attn_tp ? GroupKind::kAttnTp : GroupKind::kTp;
}

GroupKind Layout::lm_head_group() const {
  return spec_.enable_dp_lm_head ? GroupKind::kAttnTp : GroupKind::kTp;
}

Shard Layout::position(GroupKind kind, int rank) const {
  const RankCoords c = coords(rank);
  switch (kind) {
    case GroupKind::kWorld:
      return {rank, world()};
    case GroupKind::kTp:
      return {c.tp_rank, tp()};
    case GroupKind::kAttnTp:
      return {c.attn_tp_rank, attn_tp_};
    case GroupKind::kAttnDp:
      return {c.dp_rank, dp()};
    case GroupKind::kMoeEp:
      return {c.moe_ep_rank, ep()};
    case GroupKind::kMoeTp:
      return {c.moe_tp_rank, moe_tp_};
    case GroupKind::kNode:
      return {c.local_rank, ranks_per_node()};
  }
  throw InternalError("unknown group kind");
}

int Layout::expert_owner(int expert, int experts) const {
  if (experts <= 0 || experts % ep() != 0) {
    throw UsageError(str(experts) + " routed experts do not divide over --ep " + str(ep()));
  }
  if (expert < 0 || expert >= experts) {
    throw InternalError("expert " + str(expert) + " outside " + str(experts));
  }
  return expert / (experts / ep());
}

Shard Layout::vocab_shard(int rank) const {
  const RankCoords c = coords(rank);
  if (spec_.enable_dp_lm_head) return {c.attn_tp_rank, attn_tp_};
  return {c.tp_rank, tp()};
}

std::string Layout::summary() const {
  std::ostringstream out;
  out << "world=" << world() << " tp=" << tp() << " dp=" << dp()
      << (spec_.enable_dp_attention ? " (DP attention)" : " (replicas)") << " attn_tp=" << attn_tp_
      << " ep=" << ep() << " moe_tp=" << moe_tp_ << " nodes=" << nodes() << "x" << ranks_per_node()
      << " lm-head=" << group_kind_name(lm_head_group())
      << " dense-mlp=" << group_kind_name(dense_mlp_group())
      << " shared-experts=" << group_kind_name(shared_experts_group());
  return out.str();
}

std::string Layout::label() const {
  std::string out =
      "tp" + std::to_string(tp()) + " dp" + std::to_string(dp()) + " ep" + std::to_string(ep());
  if (spec_.enable_dp_attention) out += " dp-attention";
  if (spec_.enable_dp_lm_head) out += " dp-lm-head";
  if (spec_.enable_shared_experts_attn_tp) out += " shared-experts-attn-tp";
  if (spec_.enable_dense_mlp_attn_tp) out += " dense-mlp-attn-tp";
  return out;
}

std::string format_members(const std::vector<int>& members) {
  if (members.empty()) return "{}";
  bool contiguous = true;
  for (size_t i = 1; i < members.size(); ++i) contiguous &= members[i] == members[i - 1] + 1;
  std::ostringstream out;
  if (contiguous && members.size() > 2) {
    out << "{" << members.front() << ".." << members.back() << "}";
    return out.str();
  }
  out << "{";
  for (size_t i = 0; i < members.size(); ++i) out << (i ? "," : "") << members[i];
  out << "}";
  return out.str();
}

}  // namespace k3::dist
