// Layout invariance under mpirun: the layout named by K3_TEST_LAYOUT (for example
// "tp=8,dp=2,ep=8,dp-attention,dp-lm-head") must give exactly the greedy tokens of the
// one-rank engine (TP1), which rank 0 computes beside the distributed run. Prompts are spread
// round-robin over the DP groups, so groups carry different batches and, with fewer prompts
// than groups, some join every step with an empty batch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <sstream>

#include "dist/collectives.h"
#include "model/engine/dspark.h"
#include "model/engine/speculation.h"
#include "tests/model/engine/engine_support.h"
#include "tests/model/test_dirs.h"
#include "tests/support/mpi_test.h"

namespace k3::test {
namespace {

using model::FormatKind;
using model::engine::Engine;
using model::engine::EngineOptions;
using model::engine::GeneratorOptions;

dist::LayoutSpec layout_from_env(int world) {
  dist::LayoutSpec spec;
  spec.world = world;
  const char* text = std::getenv("K3_TEST_LAYOUT");
  std::stringstream in(text ? text : "");
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const int value = eq == std::string::npos ? 1 : std::stoi(item.substr(eq + 1));
    if (key == "tp")
      spec.tp = value;
    else if (key == "dp")
      spec.dp = value;
    else if (key == "ep")
      spec.ep = value;
    else if (key == "dp-attention")
      spec.enable_dp_attention = true;
    else if (key == "dp-lm-head")
      spec.enable_dp_lm_head = true;
    else if (key == "shared-experts-attn-tp")
      spec.enable_shared_experts_attn_tp = true;
    else if (key == "dense-mlp-attn-tp")
      spec.enable_dense_mlp_attn_tp = true;
    else if (!key.empty())
      throw UsageError("K3_TEST_LAYOUT: unknown item '" + item + "'");
  }
  return spec;
}

constexpr std::size_t kNewTokens = 8;

// Every prompt's tokens on rank 0: each DP group's first rank contributes its prompts' tokens
// and the rest contribute -1, reduced with max.
std::vector<std::vector<std::int32_t>> gather_tokens(
    const dist::Groups& groups, const std::vector<std::size_t>& mine,
    const std::vector<std::vector<std::int32_t>>& got, std::size_t prompts) {
  std::vector<std::int32_t> flat(prompts * kNewTokens, -1);
  const bool leader = groups.attn_tp().rank() == 0;
  for (std::size_t i = 0; leader && i < mine.size(); ++i)
    for (std::size_t j = 0; j < got[i].size() && j < kNewTokens; ++j)
      flat[mine[i] * kNewTokens + j] = got[i][j];
  dist::allreduce(groups.world(), std::span<std::int32_t>(flat), dist::ReduceOp::kMax);
  std::vector<std::vector<std::int32_t>> out(prompts);
  for (std::size_t p = 0; p < prompts; ++p)
    for (std::size_t j = 0; j < kNewTokens; ++j)
      if (flat[p * kNewTokens + j] >= 0) out[p].push_back(flat[p * kNewTokens + j]);
  return out;
}

// This rank's DP group's prompts, round-robin over the groups: their indices and tokens.
std::pair<std::vector<std::size_t>, std::vector<std::vector<std::int32_t>>> dp_share(
    const dist::Layout& layout, int rank, const std::vector<std::vector<std::int32_t>>& prompts) {
  const auto group = static_cast<std::size_t>(layout.coords(rank).dp_rank);
  const auto groups = static_cast<std::size_t>(layout.group_count(dist::GroupKind::kAttnTp));
  std::pair<std::vector<std::size_t>, std::vector<std::vector<std::int32_t>>> share;
  for (std::size_t p = group; p < prompts.size(); p += groups) {
    share.first.push_back(p);
    share.second.push_back(prompts[p]);
  }
  return share;
}

void check_layout_invariance(FormatKind kind, std::size_t prompt_count) {
  dist::Runtime& rt = runtime();
  const dist::Layout layout = dist::Layout::make(layout_from_env(rt.world_size()));
  const dist::Groups groups(layout, rt.world());
  std::filesystem::path dir;
  if (rt.rank() == 0) dir = synthetic_checkpoint(kind);
  dist::barrier(groups.world());
  dir = synthetic_checkpoint(kind);

  const auto prompts = random_prompts(prompt_count, 4, 40, 4096, 51);
  EngineOptions o;
  o.exact = true;  // see engine_test.cpp, "Serving paths"
  o.slots = 4;
  GeneratorOptions g;
  g.max_running_requests = 4;
  g.chunked_prefill_size = 32;

  const auto [mine, my_prompts] = dp_share(layout, rt.rank(), prompts);
  const auto slice = load_slice(dir, layout, rt.rank());
  Engine engine(slice.checkpoint->config(), slice.loaded.weights, groups, o);
  const auto got = gather_tokens(groups, mine, generate(engine, groups, g, my_prompts, kNewTokens),
                                 prompts.size());

  if (rt.rank() == 0) {
    const dist::Layout one = dist::Layout::make(dist::LayoutSpec{});
    const dist::Groups self(one, dist::Comm(MPI_COMM_SELF));
    const auto whole = load_slice(dir, one, 0);
    Engine tp1(whole.checkpoint->config(), whole.loaded.weights, self, o);
    const auto want = generate(tp1, self, g, prompts, kNewTokens);
    EXPECT_EQ(got, want) << layout.summary();
  }
  dist::barrier(groups.world());
}

// Speculative decoding with the synthetic DSpark drafter distributed like the model (heads over
// attention TP, the LM head's vocabulary shard): the one-rank plain path's tokens, while DP
// groups accept different lengths and a group without prompts joins every round. With
// `make_speculation`, each rank's draft-length policy (null: every round verifies the block).
void check_speculative(
    const std::function<std::unique_ptr<model::engine::Speculation>(const dist::Layout&, int)>&
        make_speculation = {}) {
  dist::Runtime& rt = runtime();
  const dist::Layout layout = dist::Layout::make(layout_from_env(rt.world_size()));
  const dist::Groups groups(layout, rt.world());
  std::filesystem::path dir, draft_dir;
  if (rt.rank() == 0) {
    dir = synthetic_checkpoint(FormatKind::kHf);
    draft_dir = synthetic_checkpoint(FormatKind::kDraft);
  }
  dist::barrier(groups.world());
  dir = synthetic_checkpoint(FormatKind::kHf);
  draft_dir = synthetic_checkpoint(FormatKind::kDraft);

  const int groups_count = layout.group_count(dist::GroupKind::kAttnTp);
  const auto prompts = random_prompts(static_cast<std::size_t>(std::max(1, 2 * groups_count - 1)),
                                      4, 40, 4096, 81);
  EngineOptions o;
  o.exact = true;
  o.slots = 4;
  GeneratorOptions g;
  g.max_running_requests = 4;
  g.chunked_prefill_size = 32;
  const int dp_rank = layout.coords(rt.rank()).dp_rank;
  const auto [mine, my_prompts] = dp_share(layout, rt.rank(), prompts);
  const auto target = load_slice(dir, layout, rt.rank());
  const auto draft = load_slice(draft_dir, layout, rt.rank());
  const model::ModelConfig& dc = draft.checkpoint->config();
  model::engine::tap_for_drafter(*dc.dspark, o);
  Engine engine(target.checkpoint->config(), target.loaded.weights, groups, o);
  model::engine::Drafter drafter(dc, draft.loaded.weights, engine, groups,
                                 model::engine::drafter_options(*dc.dspark, o));
  g.drafter = &drafter;
  const auto speculation = make_speculation ? make_speculation(layout, rt.rank()) : nullptr;
  g.speculation = speculation.get();
  model::engine::GeneratorStats stats;
  const auto got = gather_tokens(
      groups, mine, generate(engine, groups, g, my_prompts, kNewTokens, {}, &stats),
      prompts.size());
  // Each DP group's acceptance (its first rank's counts), side by side on rank 0.
  std::vector<std::uint64_t> acceptance(2 * static_cast<std::size_t>(groups_count), 0);
  if (groups.attn_tp().rank() == 0) {
    acceptance[2 * static_cast<std::size_t>(dp_rank)] = stats.verify_rounds;
    acceptance[2 * static_cast<std::size_t>(dp_rank) + 1] = stats.accepted_drafts;
  }
  dist::allreduce(groups.world(), std::span<std::uint64_t>(acceptance), dist::ReduceOp::kSum);

  if (rt.rank() == 0) {
    const dist::Layout one = dist::Layout::make(dist::LayoutSpec{});
    const dist::Groups self(one, dist::Comm(MPI_COMM_SELF));
    const auto whole = load_slice(dir, one, 0);
    EngineOptions plain = o;
    plain.tap_layers.clear();
    Engine tp1(whole.checkpoint->config(), whole.loaded.weights, self, plain);
    GeneratorOptions no_draft = g;
    no_draft.drafter = nullptr;
    const auto want = generate(tp1, self, no_draft, prompts, kNewTokens);
    EXPECT_EQ(got, want) << layout.summary();
    for (int group = 0; group < groups_count; ++group) {
      const auto rounds = acceptance[2 * static_cast<std::size_t>(group)];
      const auto accepted = acceptance[2 * static_cast<std::size_t>(group) + 1];
      std::printf("DP group %d: %llu verify rounds, %llu drafts accepted\n", group,
                  static_cast<unsigned long long>(rounds),
                  static_cast<unsigned long long>(accepted));
      // (The adaptive policy may decode a group plainly throughout: no rounds to expect.)
      if (!make_speculation) {
        EXPECT_GT(rounds, 0u) << "DP group " << group;
      }
    }
    if (groups_count > 1 && !make_speculation) {
      EXPECT_NE(acceptance[1] * acceptance[2], acceptance[0] * acceptance[3])
          << "the first two DP groups accepted the same share of drafts";
    }
  }
  dist::barrier(groups.world());
}

TEST(EngineLayouts, SpeculativeSameTokensAsOneRankPlain) { check_speculative(); }

// Different draft lengths in one step, and different ones in each DP group (K from the request
// id, the DP group and the step): every rank stays in lockstep and the tokens are the plain ones.
TEST(EngineLayouts, SpeculativeMixedDraftLengthsAcrossDpGroups) {
  check_speculative([](const dist::Layout& layout, int rank) {
    const int dp = layout.coords(rank).dp_rank;
    auto steps = std::make_shared<int>(0);
    model::engine::SpeculationOptions o;
    o.forced = [dp, steps](std::span<const model::engine::SpeculationCandidate> c) {
      std::vector<int> k;
      for (const auto& one : c)
        k.push_back(static_cast<int>((one.request * 3 + static_cast<std::uint64_t>(dp) +
                                      static_cast<std::uint64_t>(*steps)) % 8));
      ++*steps;
      return k;
    };
    return std::make_unique<model::engine::Speculation>(7, o);
  });
}

// The adaptive policy under the layout: its measured step times are the world's mean, so every
// rank of a DP group chooses the same lengths (a rank choosing differently would hang or fail).
TEST(EngineLayouts, SpeculativeAdaptiveDraftLengths) {
  check_speculative([](const dist::Layout&, int) {
    return std::make_unique<model::engine::Speculation>(7, model::engine::SpeculationOptions{});
  });
}

TEST(EngineLayouts, SameGreedyTokensAsOneRankHf) { check_layout_invariance(FormatKind::kHf, 7); }
TEST(EngineLayouts, SameGreedyTokensAsOneRankGguf) {
  check_layout_invariance(FormatKind::kGguf, 5);
}
TEST(EngineLayouts, EmptyDpGroupsJoinEveryStep) {
  check_layout_invariance(FormatKind::kModelSlim, 1);
}

}  // namespace
}  // namespace k3::test
