// dist::Layout: exact groups of the production layout, partition properties over many layouts,
// and every rejection message.
#include "dist/layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "common/error.h"

namespace k3::dist {
namespace {

std::vector<int> range(int begin, int end, int step = 1) {
  std::vector<int> out;
  for (int r = begin; r < end; r += step) out.push_back(r);
  return out;
}

LayoutSpec production() {
  LayoutSpec spec;
  spec.world = 64;
  spec.tp = 64;
  spec.dp = 4;
  spec.ep = 64;
  spec.enable_dp_attention = true;
  spec.enable_dp_lm_head = true;
  spec.enable_shared_experts_attn_tp = true;
  spec.enable_dense_mlp_attn_tp = true;
  spec.ranks_per_node = 16;
  return spec;
}

TEST(Layout, ProductionTp64Dp4Ep64Groups) {
  const Layout layout = Layout::make(production());
  EXPECT_EQ(layout.attn_tp(), 16);
  EXPECT_EQ(layout.moe_tp(), 1);
  EXPECT_EQ(layout.nodes(), 4);

  const std::vector<std::vector<int>> attn_tp = {range(0, 16), range(16, 32), range(32, 48),
                                                 range(48, 64)};
  EXPECT_EQ(layout.groups(GroupKind::kAttnTp), attn_tp);
  EXPECT_EQ(layout.groups(GroupKind::kNode), attn_tp);
  EXPECT_EQ(layout.groups(GroupKind::kMoeEp), std::vector<std::vector<int>>{range(0, 64)});
  EXPECT_EQ(layout.groups(GroupKind::kTp), std::vector<std::vector<int>>{range(0, 64)});
  EXPECT_EQ(layout.groups(GroupKind::kWorld), std::vector<std::vector<int>>{range(0, 64)});
  const auto attn_dp = layout.groups(GroupKind::kAttnDp);
  ASSERT_EQ(attn_dp.size(), 16u);
  EXPECT_EQ(attn_dp[0], (std::vector<int>{0, 16, 32, 48}));
  EXPECT_EQ(attn_dp[15], (std::vector<int>{15, 31, 47, 63}));
  const auto moe_tp = layout.groups(GroupKind::kMoeTp);
  ASSERT_EQ(moe_tp.size(), 64u);
  EXPECT_EQ(moe_tp[37], std::vector<int>{37});

  // SGLang: dp_rank = rank / attn_tp, moe_ep_rank = rank / (tp / ep) = rank.
  const RankCoords c = layout.coords(37);
  EXPECT_EQ(c.dp_rank, 2);
  EXPECT_EQ(c.attn_tp_rank, 5);
  EXPECT_EQ(c.moe_ep_rank, 37);
  EXPECT_EQ(c.moe_tp_rank, 0);
  EXPECT_EQ(c.node, 2);
  EXPECT_EQ(c.local_rank, 5);

  EXPECT_EQ(layout.lm_head_group(), GroupKind::kAttnTp);
  EXPECT_EQ(layout.dense_mlp_group(), GroupKind::kAttnTp);
  EXPECT_EQ(layout.shared_experts_group(), GroupKind::kAttnTp);
  EXPECT_EQ(layout.vocab_shard(37).index, 5);
  EXPECT_EQ(layout.vocab_shard(37).count, 16);
}

// The history record's label: the sizes and the flags that are on, in one fixed order.
TEST(Layout, LabelNamesSizesAndFlags) {
  EXPECT_EQ(Layout::make(production()).label(),
            "tp64 dp4 ep64 dp-attention dp-lm-head shared-experts-attn-tp dense-mlp-attn-tp");
}

TEST(Layout, FlagsChooseTpWhenOff) {
  LayoutSpec spec = production();
  spec.enable_dp_lm_head = false;
  spec.enable_shared_experts_attn_tp = false;
  spec.enable_dense_mlp_attn_tp = false;
  const Layout layout = Layout::make(spec);
  EXPECT_EQ(layout.lm_head_group(), GroupKind::kTp);
  EXPECT_EQ(layout.dense_mlp_group(), GroupKind::kTp);
  EXPECT_EQ(layout.shared_experts_group(), GroupKind::kTp);
  EXPECT_EQ(layout.vocab_shard(37).index, 37);
  EXPECT_EQ(layout.vocab_shard(37).count, 64);
}

TEST(Layout, EpSmallerThanTpStridesEpGroups) {
  // SGLang _MOE_EP: range(j, j + ep * moe_tp, moe_tp) for moe-tp index j.
  LayoutSpec spec;
  spec.world = 16;
  spec.tp = 16;
  spec.ep = 4;
  const Layout layout = Layout::make(spec);
  EXPECT_EQ(layout.moe_tp(), 4);
  EXPECT_EQ(layout.members(GroupKind::kMoeEp, 5), (std::vector<int>{1, 5, 9, 13}));
  EXPECT_EQ(layout.members(GroupKind::kMoeTp, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(layout.coords(5).moe_ep_rank, 1);
  EXPECT_EQ(layout.coords(5).moe_tp_rank, 1);
}

TEST(Layout, ReplicasWithoutDpAttention) {
  // Without DP attention, dp replicas of tp ranks each: world = tp * dp, attn_tp = tp.
  LayoutSpec spec;
  spec.world = 8;
  spec.dp = 2;
  spec.ep = 2;
  const Layout layout = Layout::make(spec);
  EXPECT_EQ(layout.tp(), 4);
  EXPECT_EQ(layout.attn_tp(), 4);
  EXPECT_EQ(layout.groups(GroupKind::kTp),
            (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout.groups(GroupKind::kAttnTp), layout.groups(GroupKind::kTp));
  EXPECT_EQ(layout.members(GroupKind::kMoeEp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(layout.members(GroupKind::kAttnDp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(layout.coords(5).dp_rank, 1);
}

TEST(Layout, DefaultsToOneTpGroupOfTheWorld) {
  LayoutSpec spec;
  spec.world = 8;
  const Layout layout = Layout::make(spec);
  EXPECT_EQ(layout.tp(), 8);
  EXPECT_EQ(layout.dp(), 1);
  EXPECT_EQ(layout.ep(), 1);
  EXPECT_EQ(layout.attn_tp(), 8);
  EXPECT_EQ(layout.nodes(), 1);
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// Every rank is in exactly one group of each kind, groups have the advertised size, and each
// coordinate is the rank's position in the matching group.
void check_partition(const Layout& layout) {
  SCOPED_TRACE(layout.summary());
  for (GroupKind kind : kAllGroupKinds) {
    SCOPED_TRACE(std::string(group_kind_name(kind)));
    const auto groups = layout.groups(kind);
    ASSERT_EQ(static_cast<int>(groups.size()), layout.group_count(kind));
    std::vector<int> seen(layout.world(), 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      ASSERT_EQ(static_cast<int>(groups[g].size()), layout.group_size(kind));
      for (int r : groups[g]) {
        ++seen[r];
        ASSERT_EQ(layout.group_index(kind, r), static_cast<int>(g));
        ASSERT_EQ(layout.members(kind, r), groups[g]);
      }
    }
    for (int r = 0; r < layout.world(); ++r) ASSERT_EQ(seen[r], 1) << "rank " << r;
  }
  for (int r = 0; r < layout.world(); ++r) {
    const RankCoords c = layout.coords(r);
    auto position = [&](GroupKind kind) {
      const auto m = layout.members(kind, r);
      return static_cast<int>(std::find(m.begin(), m.end(), r) - m.begin());
    };
    ASSERT_EQ(position(GroupKind::kTp), c.tp_rank);
    ASSERT_EQ(position(GroupKind::kAttnTp), c.attn_tp_rank);
    ASSERT_EQ(position(GroupKind::kAttnDp), c.dp_rank);
    ASSERT_EQ(position(GroupKind::kMoeEp), c.moe_ep_rank);
    ASSERT_EQ(position(GroupKind::kMoeTp), c.moe_tp_rank);
    ASSERT_EQ(position(GroupKind::kNode), c.local_rank);
    for (GroupKind kind : kAllGroupKinds) {  // what weight slices and communicators rely on
      const k3::dist::Shard at = layout.position(kind, r);
      ASSERT_EQ(at.index, position(kind)) << group_kind_name(kind);
      ASSERT_EQ(at.count, layout.group_size(kind)) << group_kind_name(kind);
    }
    ASSERT_EQ(r, c.dp_rank * layout.attn_tp() + c.attn_tp_rank);
    // Attention-TP and EP groups never leave their TP group.
    for (int m : layout.members(GroupKind::kAttnTp, r)) ASSERT_EQ(m / layout.tp(), c.tp_group);
    for (int m : layout.members(GroupKind::kMoeEp, r)) ASSERT_EQ(m / layout.tp(), c.tp_group);
  }
}

TEST(Layout, PartitionPropertyOverManyLayouts) {
  int checked = 0;
  for (int world : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
    for (int dp : divisors(world)) {
      for (bool dp_attention : {false, true}) {
        const int tp = dp_attention ? world : world / dp;
        for (int ep : divisors(tp)) {
          for (int rpn : divisors(world)) {
            LayoutSpec spec;
            spec.world = world;
            spec.tp = tp;
            spec.dp = dp;
            spec.ep = ep;
            spec.enable_dp_attention = dp_attention;
            spec.enable_dp_lm_head = dp_attention && (ep % 2 == 0);
            spec.ranks_per_node = rpn;
            check_partition(Layout::make(spec));
            if (HasFatalFailure()) return;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(Layout, ExpertOwnerIsTheMoeEpRankHoldingTheExpert) {
  LayoutSpec spec = production();  // ep 64
  const Layout layout = Layout::make(spec);
  EXPECT_EQ(layout.expert_owner(0, 128), 0);
  EXPECT_EQ(layout.expert_owner(1, 128), 0);
  EXPECT_EQ(layout.expert_owner(2, 128), 1);
  EXPECT_EQ(layout.expert_owner(127, 128), 63);
  EXPECT_THROW(layout.expert_owner(0, 96), UsageError);
}

std::string rejection(const LayoutSpec& spec) {
  try {
    Layout::make(spec);
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), ExitCode::kInput);
    return e.what();
  }
  return "accepted";
}

TEST(Layout, RejectsEveryInvalidCombinationWithItsConstraint) {
  LayoutSpec spec = production();
  spec.dp = 3;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --dp 3 must divide --tp 64 under --enable-dp-attention "
            "(attention-TP size = tp / dp)");

  spec = production();
  spec.tp = 32;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --tp 32 must equal the world size 64 under "
            "--enable-dp-attention (one TP group holds every DP attention group)");

  spec = production();
  spec.enable_dp_attention = false;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --enable-dp-lm-head requires --enable-dp-attention (the LM "
            "head is sharded over the attention-TP group)");

  spec = production();
  spec.enable_dp_attention = false;
  spec.enable_dp_lm_head = false;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --tp 64 x --dp 4 must equal the world size 64 without "
            "--enable-dp-attention (dp replicas of tp ranks each)");

  spec = production();
  spec.ep = 48;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --ep 48 must divide --tp 64 (MoE-TP size = tp / ep)");

  spec = production();
  spec.ranks_per_node = 24;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --ranks-per-node 24 must divide the world size 64 (every "
            "node holds the same number of ranks)");

  spec = LayoutSpec{};
  spec.world = 6;
  spec.dp = 4;
  EXPECT_EQ(rejection(spec),
            "invalid parallel layout: --dp 4 must divide the world size 6 (each DP replica is a "
            "TP group)");

  spec = production();
  spec.dp = 0;
  EXPECT_EQ(rejection(spec), "invalid parallel layout: --dp 0 must be >= 1");
  spec = production();
  spec.ep = -2;
  EXPECT_EQ(rejection(spec), "invalid parallel layout: --ep -2 must be >= 1");
  spec = production();
  spec.tp = -1;
  EXPECT_EQ(rejection(spec), "invalid parallel layout: --tp -1 must be >= 1");
  spec = production();
  spec.ranks_per_node = -16;
  EXPECT_EQ(rejection(spec), "invalid parallel layout: --ranks-per-node -16 must be >= 1");
  spec = production();
  spec.world = 0;
  EXPECT_EQ(rejection(spec), "invalid parallel layout: world size 0 must be >= 1");
}

TEST(Layout, FormatsMemberLists) {
  EXPECT_EQ(format_members(range(0, 16)), "{0..15}");
  EXPECT_EQ(format_members({0, 16, 32, 48}), "{0,16,32,48}");
  EXPECT_EQ(format_members({7}), "{7}");
  EXPECT_EQ(format_members({3, 4}), "{3,4}");
}

}  // namespace
}  // namespace k3::dist
