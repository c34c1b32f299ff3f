// Layout invariance under mpirun: the layout named by K3_TEST_LAYOUT (for example
// "tp=8,dp=2,ep=8,dp-attention,dp-lm-head") must give exactly the greedy tokens of the
// one-rank engine (TP1), which rank 0 computes beside the distributed run. Prompts are spread
// round-robin over the DP groups, so groups carry different batches and, with fewer prompts
// than groups, some join every step with an empty batch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "dist/collectives.h"
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

  // This DP group's prompts, round-robin.
  const int dp_rank = layout.coords(rt.rank()).dp_rank;
  const int groups_count = layout.group_count(dist::GroupKind::kAttnTp);
  std::vector<std::size_t> mine;
  std::vector<std::vector<std::int32_t>> my_prompts;
  for (std::size_t p = static_cast<std::size_t>(dp_rank); p < prompts.size();
       p += static_cast<std::size_t>(groups_count)) {
    mine.push_back(p);
    my_prompts.push_back(prompts[p]);
  }
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

TEST(EngineLayouts, SameGreedyTokensAsOneRankHf) { check_layout_invariance(FormatKind::kHf, 7); }
TEST(EngineLayouts, SameGreedyTokensAsOneRankGguf) {
  check_layout_invariance(FormatKind::kGguf, 5);
}
TEST(EngineLayouts, EmptyDpGroupsJoinEveryStep) {
  check_layout_invariance(FormatKind::kModelSlim, 1);
}

}  // namespace
}  // namespace k3::test
