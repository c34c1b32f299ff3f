// Speculative decoding on one rank: the generator's rounds with a scripted drafter
// (acceptance edge cases, exactly counted) and with the synthetic DSpark drafter (the tokens
// are the plain path's, with continuous batching, the prefix cache and chunked prefill).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>

#include "dist/groups.h"
#include "model/engine/dspark.h"
#include "model/engine/generator.h"
#include "model/engine/linear.h"
#include "model/engine/speculation.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/repack.h"
#include "tests/model/engine/engine_support.h"
#include "tests/model/test_dirs.h"

namespace k3::test {
namespace {

using model::FormatKind;
using model::engine::Completion;
using model::engine::DraftRequest;
using model::engine::DraftSource;
using model::engine::Engine;
using model::engine::EngineOptions;
using model::engine::Generator;
using model::engine::GeneratorOptions;
using model::engine::GeneratorStats;
using model::engine::Request;

const LoadedSlice& slice(FormatKind kind) {
  static std::map<FormatKind, LoadedSlice> cache;
  auto it = cache.find(kind);
  if (it == cache.end())
    it = cache.emplace(kind, load_slice(synthetic_checkpoint(kind), one_rank().layout, 0)).first;
  return it->second;
}

// Proposes from a known token sequence (the prompt and the plain path's completion): at a
// slot's context p the tokens sequence[p + 1 ...], each replaced by a wrong one where `wrong`
// (round, k) says so. Checks that every anchor is the sequence's token at p.
class ScriptedDrafter : public DraftSource {
 public:
  ScriptedDrafter(std::vector<std::int32_t> sequence, std::size_t block, int vocab,
                  std::function<bool(std::size_t, std::size_t)> wrong)
      : sequence_(std::move(sequence)), block_(block), vocab_(vocab), wrong_(std::move(wrong)) {}
  std::size_t tap_width() const override { return 0; }
  void reset_slot(int slot) override { context_[slot] = 0; }
  void copy_slot(int from, int to) override { context_[to] = context_[from]; }
  void extend(int slot, std::span<const float>, std::size_t rows) override {
    context_[slot] += rows;
  }
  std::vector<std::vector<std::int32_t>> propose(std::span<const DraftRequest> batch) override {
    std::vector<std::vector<std::int32_t>> out;
    for (const DraftRequest& r : batch) {
      const std::size_t p = context_[r.slot];
      if (p >= sequence_.size() || sequence_[p] != r.anchor) ++bad_anchors;
      std::vector<std::int32_t> drafts;
      for (std::size_t k = 0; k < block_; ++k) {
        const std::size_t at = p + 1 + k;
        std::int32_t t = at < sequence_.size() ? sequence_[at] : 0;
        if (wrong_(rounds, k)) t = (t + 1) % vocab_;
        drafts.push_back(t);
      }
      out.push_back(std::move(drafts));
      ++rounds;
    }
    return out;
  }
  std::size_t rounds = 0, bad_anchors = 0;

 private:
  std::vector<std::int32_t> sequence_;
  std::size_t block_;
  int vocab_;
  std::function<bool(std::size_t, std::size_t)> wrong_;
  std::map<int, std::size_t> context_;
};

struct Outcome {
  Completion completion;
  GeneratorStats stats;
};

// One request through a generator; `stop_after`: a stop string matches once that many tokens
// were generated (the on_token callback says stop).
Outcome generate_one(Engine& engine, const std::vector<std::int32_t>& prompt, std::size_t max_new,
                     DraftSource* drafter, std::size_t stop_after = 0) {
  GeneratorOptions g;
  g.max_running_requests = 1;
  g.drafter = drafter;
  Generator gen(engine, one_rank().groups, g);
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = max_new;
  std::vector<Request> requests{r};
  Outcome run;
  run.stats = gen.run(
      requests,
      [&](const Request&, std::span<const std::int32_t> generated) {
        return stop_after == 0 || generated.size() < stop_after;
      },
      [&](const Request&, const Completion& c) { run.completion = c; });
  return run;
}

class SpeculativeRounds : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& s = slice(FormatKind::kHf);
    EngineOptions o;
    o.slots = 2;
    engine_ = std::make_unique<Engine>(s.checkpoint->config(), s.loaded.weights, one_rank().groups, o);
    vocab_ = s.checkpoint->config().vocab_size;
    prompt_ = random_prompts(1, 40, 40, 4096, 61)[0];
    plain_ = generate_one(*engine_, prompt_, kNew, nullptr).completion.tokens;
    ASSERT_EQ(plain_.size(), kNew);
    sequence_ = prompt_;
    sequence_.insert(sequence_.end(), plain_.begin(), plain_.end());
  }
  ScriptedDrafter drafter(std::function<bool(std::size_t, std::size_t)> wrong) {
    return ScriptedDrafter(sequence_, 7, vocab_, std::move(wrong));
  }
  static constexpr std::size_t kNew = 24;
  std::unique_ptr<Engine> engine_;
  int vocab_ = 0;
  std::vector<std::int32_t> prompt_, plain_, sequence_;
};

TEST_F(SpeculativeRounds, AllSevenAcceptedEveryRound) {
  auto d = drafter([](std::size_t, std::size_t) { return false; });
  const Outcome run = generate_one(*engine_, prompt_, kNew, &d);
  EXPECT_EQ(run.completion.tokens, plain_);
  EXPECT_EQ(d.bad_anchors, 0u);
  // The prefill samples token 1; rounds then commit 8, 8 and 7 tokens: the last round feeds
  // only the 6 drafts the request can still use.
  EXPECT_EQ(run.stats.verify_rounds, 3u);
  EXPECT_EQ(run.stats.drafted_tokens, 7u + 7u + 6u);
  EXPECT_EQ(run.stats.accepted_drafts, run.stats.drafted_tokens);
}

TEST_F(SpeculativeRounds, NoneAcceptedStillGivesTheBonusToken) {
  auto d = drafter([](std::size_t, std::size_t) { return true; });
  const Outcome run = generate_one(*engine_, prompt_, kNew, &d);
  EXPECT_EQ(run.completion.tokens, plain_);
  EXPECT_EQ(d.bad_anchors, 0u);
  // One token (the bonus) per round; the last token, with no draft left to verify, is a plain
  // decode row.
  EXPECT_EQ(run.stats.verify_rounds, kNew - 2);
  EXPECT_EQ(run.stats.accepted_drafts, 0u);
}

TEST_F(SpeculativeRounds, AcceptsTheLongestAgreeingPrefix) {
  // Round 0's fourth draft is wrong: three accepted, then the target's own token.
  auto d = drafter([](std::size_t round, std::size_t k) { return round == 0 && k == 3; });
  const Outcome run = generate_one(*engine_, prompt_, kNew, &d);
  EXPECT_EQ(run.completion.tokens, plain_);
  EXPECT_EQ(d.bad_anchors, 0u);
  // 1 + (3 + 1) + 8 + 8 = 21 tokens after three rounds; the fourth feeds the 2 drafts left.
  EXPECT_EQ(run.stats.verify_rounds, 4u);
  EXPECT_EQ(run.stats.drafted_tokens, 7u + 7u + 7u + 2u);
  EXPECT_EQ(run.stats.accepted_drafts, 3u + 7u + 7u + 2u);
}

TEST_F(SpeculativeRounds, StopStringInsideAnAcceptedRun) {
  auto d = drafter([](std::size_t, std::size_t) { return false; });
  const Outcome run = generate_one(*engine_, prompt_, kNew, &d, 5);
  ASSERT_EQ(run.completion.tokens.size(), 5u);
  EXPECT_EQ(run.completion.tokens, std::vector<std::int32_t>(plain_.begin(), plain_.begin() + 5));
  EXPECT_EQ(run.completion.finish, Completion::Finish::kStopped);
  EXPECT_EQ(run.stats.verify_rounds, 1u);  // the round accepted 7, the stop came at its 4th
}

TEST_F(SpeculativeRounds, MaxNewTokensReachedMidBlock) {
  auto d = drafter([](std::size_t, std::size_t) { return false; });
  const Outcome run = generate_one(*engine_, prompt_, 4, &d);
  EXPECT_EQ(run.completion.tokens, std::vector<std::int32_t>(plain_.begin(), plain_.begin() + 4));
  EXPECT_EQ(run.completion.finish, Completion::Finish::kLength);
  EXPECT_EQ(run.stats.verify_rounds, 1u);
  EXPECT_EQ(run.stats.drafted_tokens, 2u);  // 3 tokens were left: 2 drafts + the bonus
}

// The synthetic DSpark drafter over the synthetic target: the tokens of the plain path, in both
// activation modes, with several sequences batched, chunked prefill and the prefix cache, and
// the drafts are often right (the synthetic pair's design, docs/FORMATS.md).
class DSparkDrafting : public ::testing::TestWithParam<bool> {};

TEST_P(DSparkDrafting, KeepsThePlainPathsTokens) {
  const bool exact = GetParam();
  const auto& target = slice(FormatKind::kHf);
  const auto& draft = slice(FormatKind::kDraft);
  const model::ModelConfig& dc = draft.checkpoint->config();
  ASSERT_TRUE(dc.dspark.has_value());
  const auto shared = random_prompts(1, 48, 48, 4096, 71)[0];
  auto prompts = random_prompts(6, 3, 30, 4096, 72);
  for (auto& p : prompts) p.insert(p.begin(), shared.begin(), shared.end());
  GeneratorOptions g;
  g.max_running_requests = 3;
  g.chunked_prefill_size = 32;
  EngineOptions o;
  o.slots = g.max_running_requests + 1;
  o.exact = exact;
  Engine plain_engine(target.checkpoint->config(), target.loaded.weights, one_rank().groups, o);
  const auto plain = generate(plain_engine, one_rank().groups, g, prompts, 20, shared);

  model::engine::tap_for_drafter(*dc.dspark, o);
  Engine engine(target.checkpoint->config(), target.loaded.weights, one_rank().groups, o);
  model::engine::Drafter drafter(dc, draft.loaded.weights, engine, one_rank().groups,
                                 model::engine::drafter_options(*dc.dspark, o));
  g.drafter = &drafter;
  GeneratorStats stats;
  const auto speculative = generate(engine, one_rank().groups, g, prompts, 20, shared, &stats);
  EXPECT_EQ(speculative, plain);
  ASSERT_GT(stats.verify_rounds, 0u);
  const double accept_length =
      static_cast<double>(stats.accepted_drafts + stats.verify_rounds) / stats.verify_rounds;
  std::printf("accept length %.2f over %zu rounds\n", accept_length, stats.verify_rounds);
  EXPECT_GT(accept_length, 1.5);
}

INSTANTIATE_TEST_SUITE_P(Modes, DSparkDrafting, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "fp32" : "int8"; });

// How many drafts each request verifies: every K the policy may choose, several different ones in
// one step, and the adaptive policy itself keep the plain path's tokens in fp32 (a verify row
// computes exactly what decoding its token would).
class DSparkDraftLengths : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& target = slice(FormatKind::kHf);
    const model::ModelConfig& dc = slice(FormatKind::kDraft).checkpoint->config();
    prompts_ = random_prompts(3, 8, 30, 4096, 91);
    g_.max_running_requests = 3;
    g_.chunked_prefill_size = 32;
    o_.slots = g_.max_running_requests + 1;
    o_.exact = true;
    Engine plain_engine(target.checkpoint->config(), target.loaded.weights, one_rank().groups, o_);
    plain_ = generate(plain_engine, one_rank().groups, g_, prompts_, kNew);
    model::engine::tap_for_drafter(*dc.dspark, o_);
  }
  // The tokens with the drafter and `speculation`, and the run's stats. One engine and drafter
  // serve every run of a test, as they serve every batch of a job: each run's requests start
  // from reset slots.
  std::vector<std::vector<std::int32_t>> speculate(model::engine::Speculation& speculation,
                                                   GeneratorStats& stats) {
    make_engine();
    GeneratorOptions g = g_;
    g.drafter = drafter_.get();
    g.speculation = &speculation;
    return generate(*engine_, one_rank().groups, g, prompts_, kNew, {}, &stats);
  }
  void make_engine() {
    if (!engine_) {
      const auto& target = slice(FormatKind::kHf);
      const auto& draft = slice(FormatKind::kDraft);
      const model::ModelConfig& dc = draft.checkpoint->config();
      engine_ = std::make_unique<Engine>(target.checkpoint->config(), target.loaded.weights,
                                         one_rank().groups, o_);
      drafter_ = std::make_unique<model::engine::Drafter>(
          dc, draft.loaded.weights, *engine_, one_rank().groups,
          model::engine::drafter_options(*dc.dspark, o_));
    }
  }
  static model::engine::SpeculationOptions forced(
      std::function<int(const model::engine::SpeculationCandidate&)> k) {
    model::engine::SpeculationOptions o;
    o.forced = [k](std::span<const model::engine::SpeculationCandidate> c) {
      std::vector<int> out;
      for (const auto& one : c) out.push_back(k(one));
      return out;
    };
    return o;
  }
  static constexpr std::size_t kNew = 14;
  static constexpr int kBlock = 7;  // the synthetic draft's
  std::vector<std::vector<std::int32_t>> prompts_, plain_;
  GeneratorOptions g_;
  EngineOptions o_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<model::engine::Drafter> drafter_;  // drafts for *engine_
};

TEST_F(DSparkDraftLengths, EveryForcedLengthKeepsThePlainTokens) {
  for (int k = 0; k <= kBlock; ++k) {
    model::engine::Speculation speculation(kBlock, forced([k](const auto&) { return k; }));
    GeneratorStats stats;
    EXPECT_EQ(speculate(speculation, stats), plain_) << "K = " << k;
    EXPECT_GT(stats.speculation.k_rounds.at(static_cast<std::size_t>(k)), 0u) << "K = " << k;
    if (k == 0) {
      EXPECT_EQ(stats.verify_rounds, 0u);  // no round at all: plain decode rows
    }
  }
}

TEST_F(DSparkDraftLengths, MixedLengthsInOneStepKeepThePlainTokens) {
  int calls = 0;
  model::engine::Speculation speculation(
      kBlock, forced([&calls](const model::engine::SpeculationCandidate& c) {
        return static_cast<int>((c.request + static_cast<std::uint64_t>(calls++)) % (kBlock + 1));
      }));
  GeneratorStats stats;
  EXPECT_EQ(speculate(speculation, stats), plain_);
  int lengths_used = 0;
  for (auto n : stats.speculation.k_rounds) lengths_used += n > 0 ? 1 : 0;
  EXPECT_GE(lengths_used, 4);
}

TEST_F(DSparkDraftLengths, AdaptiveKeepsThePlainTokensAndMeasuresTheHostOnce) {
  model::engine::Speculation speculation(kBlock, {});
  GeneratorStats stats;
  EXPECT_EQ(speculate(speculation, stats), plain_);
  EXPECT_TRUE(speculation.calibrated());
  EXPECT_GT(speculation.cost().target_seconds(8), 0.0);
  std::uint64_t rows = 0;
  for (auto n : stats.speculation.k_rounds) rows += n;
  EXPECT_EQ(rows, stats.decode_tokens - stats.drafted_tokens);  // one count per decode row
  EXPECT_GT(stats.speculation.measured_s, 0.0);
  EXPECT_GT(stats.speculation.plain_estimate_s, 0.0);
  GeneratorStats again;  // a second run reuses the measured model
  EXPECT_EQ(speculate(speculation, again), plain_);
}

// On a host where verify rows cost more than even a perfect drafter saves (a compute-bound step,
// here a cost model set so), the adaptive policy keeps no drafter context: no prompt or decode
// row is projected, no round is verified, and the tokens are the plain path's.
TEST_F(DSparkDraftLengths, WhereDraftingCannotPayNoRequestKeepsADrafterContext) {
  model::engine::Speculation speculation(kBlock, {});
  for (std::size_t rows = 1; rows <= 64; rows *= 2) {
    speculation.cost().calibrate_target(rows, 0.010 * static_cast<double>(rows));
    speculation.cost().calibrate_draft(rows, 0.005);
    speculation.cost().calibrate_projection(rows, 0.001 * static_cast<double>(rows));
  }
  GeneratorStats stats;
  EXPECT_EQ(speculate(speculation, stats), plain_);
  EXPECT_EQ(stats.verify_rounds, 0u);
  for (int slot = 0; slot < o_.slots; ++slot) {
    EXPECT_EQ(drafter_->context(slot), 0u) << "slot " << slot;
    EXPECT_EQ(drafter_->pending(slot), 0u) << "slot " << slot;
  }
  // The same engine and drafter with a policy that may draft: contexts are built again.
  model::engine::Speculation memory_bound(kBlock, {});
  for (std::size_t rows = 1; rows <= 64; rows *= 2) {
    memory_bound.cost().calibrate_target(rows, 0.100 + 0.0001 * static_cast<double>(rows));
    memory_bound.cost().calibrate_draft(rows, 0.005);
    memory_bound.cost().calibrate_projection(rows, 0.0001 * static_cast<double>(rows));
  }
  GeneratorStats drafted;
  EXPECT_EQ(speculate(memory_bound, drafted), plain_);
  EXPECT_GT(drafted.verify_rounds, 0u);
}

// A warm-up run of one request calibrates the cost model for the batch the run after it holds
// (GeneratorOptions::calibration_requests), so that run measures nothing before its first step;
// without the hint the warm-up calibrates for its own single request and the run for its three.
TEST_F(DSparkDraftLengths, AWarmUpCalibratesForTheBatchOfTheRunAfterIt) {
  for (const bool hinted : {true, false}) {
    model::engine::Speculation speculation(kBlock, {});
    GeneratorOptions warm = g_;
    warm.max_running_requests = 1;
    warm.calibration_requests = hinted ? g_.max_running_requests : 0;
    GeneratorStats warm_stats, timed;
    make_engine();
    warm.drafter = drafter_.get();
    warm.speculation = &speculation;
    generate(*engine_, one_rank().groups, warm, {prompts_[0]}, 2, {}, &warm_stats);
    EXPECT_GT(warm_stats.calibration_seconds, 0.0) << "hinted " << hinted;
    EXPECT_EQ(speculate(speculation, timed), plain_) << "hinted " << hinted;
    if (hinted) {
      EXPECT_EQ(timed.calibration_seconds, 0.0);
    } else {
      EXPECT_GT(timed.calibration_seconds, 0.0);
    }
  }
}

// The synthetic hf target and two drafters of the synthetic draft over `slots` slots on one rank:
// two ways of building the same drafter context, compared.
struct DrafterPair {
  const model::ModelConfig& draft_config;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<model::engine::Drafter> first, second;
};
DrafterPair drafter_pair(int slots) {
  const auto& target = slice(FormatKind::kHf);
  const auto& draft = slice(FormatKind::kDraft);
  const model::ModelConfig& dc = draft.checkpoint->config();
  EngineOptions o;
  o.slots = slots;
  model::engine::tap_for_drafter(*dc.dspark, o);
  auto engine = std::make_unique<Engine>(target.checkpoint->config(), target.loaded.weights,
                                         one_rank().groups, o);
  const auto options = model::engine::drafter_options(*dc.dspark, o);
  auto drafter = [&] {
    return std::make_unique<model::engine::Drafter>(dc, draft.loaded.weights, *engine,
                                                    one_rank().groups, options);
  };
  auto first = drafter(), second = drafter();
  return {dc, std::move(engine), std::move(first), std::move(second)};
}

// The drafter projects its context lazily and in batches across slots (a slot's backlog before
// its next draft, every slot's once one of them holds 64 rows): its keys, bit for bit, and so
// its proposals are those of projecting each row as it comes.
TEST(DSparkContext, BatchedProjectionProposesWhatRowByRowDoes) {
  const DrafterPair pair = drafter_pair(3);
  const model::ModelConfig& dc = pair.draft_config;
  model::engine::Drafter &eager = *pair.first, &batched = *pair.second;
  const std::size_t width = eager.tap_width();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const std::vector<DraftRequest> all = {{0, 11, {}}, {1, 12, {}}, {2, 13, {}}};
  // Slot 1 reaches 64 waiting rows while slots 0 and 2 hold a few: all three are projected then.
  const std::vector<std::size_t> rows = {5, 70, 20};
  for (std::size_t step = 0; step < 70; ++step) {
    for (int s = 0; s < 3; ++s) {
      if (step >= rows[static_cast<std::size_t>(s)]) continue;
      std::vector<float> taps(width);
      for (float& t : taps) t = value(rng);
      eager.extend(s, taps, 1);
      eager.propose(std::span<const DraftRequest>(&all[static_cast<std::size_t>(s)], 1));
      batched.extend(s, taps, 1);
    }
    if (step == 63) {
      EXPECT_EQ(batched.pending(0) + batched.pending(2), 0u);
    }
  }
  EXPECT_EQ(batched.pending(1), 6u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(eager.pending(s), 0u);
    EXPECT_EQ(batched.context(s), rows[static_cast<std::size_t>(s)]);
  }
  EXPECT_EQ(batched.propose(all), eager.propose(all));
  // (The synthetic drafter's proposals hardly depend on its context: the keys say more.)
  for (int s = 0; s < 3; ++s) {
    for (int l = 0; l < dc.num_hidden_layers; ++l) {
      const auto a = eager.context_keys(s, l), b = batched.context_keys(s, l);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "slot " << s << " layer " << l;
    }
  }
}

// A request that reuses a prefix snapshot shares the snapshot's projected context instead of
// copying it: each copy, and the slot it was copied from, then goes on as if it had projected
// everything itself, bit for bit.
TEST(DSparkContext, ACopiedSlotDraftsAsOneThatProjectedItsWholeContext) {
  const DrafterPair pair = drafter_pair(4);
  const model::ModelConfig& dc = pair.draft_config;
  model::engine::Drafter &shared = *pair.first, &alone = *pair.second;
  const std::size_t width = shared.tap_width();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::map<char, std::vector<float>> rows;
  for (auto [name, n] : {std::pair{'P', 100}, {'A', 30}, {'B', 80}, {'C', 7}, {'D', 5}, {'E', 3}}) {
    rows[name].resize(static_cast<std::size_t>(n) * width);
    for (float& x : rows[name]) x = value(rng);
  }
  auto extend = [&](model::engine::Drafter& d, int slot, char name) {
    d.extend(slot, rows[name], rows[name].size() / width);
  };
  extend(shared, 0, 'P');  // the prefix snapshot: a chunk of 100, projected at once
  shared.copy_slot(0, 1);
  extend(shared, 1, 'A');  // 30 rows wait unprojected ...
  shared.copy_slot(1, 2);  // ... and are copied with the slot
  extend(shared, 2, 'B');  // 110 wait in slot 2: every slot's rows are projected
  extend(shared, 0, 'C');  // the snapshot goes on
  shared.copy_slot(1, 3);  // slot 1's own rows join the shared context
  extend(shared, 3, 'D');
  extend(shared, 1, 'E');
  for (const auto& [slot, names] :
       std::vector<std::pair<int, std::string>>{{0, "PC"}, {1, "PAE"}, {2, "PAB"}, {3, "PAD"}}) {
    for (char name : names) extend(alone, slot, name);
  }
  const std::vector<DraftRequest> all = {{0, 11, {}}, {1, 12, {}}, {2, 13, {}}, {3, 14, {}}};
  EXPECT_EQ(shared.propose(all), alone.propose(all));
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(shared.context(s), alone.context(s));
    for (int l = 0; l < dc.num_hidden_layers; ++l)
      EXPECT_EQ(shared.context_keys(s, l), alone.context_keys(s, l))
          << "slot " << s << ", layer " << l;
  }
}

}  // namespace
}  // namespace k3::test

namespace k3::test {
namespace {

// The drafter's float matrices re-encoded as Q8_0 (Linear::requantized): the product is the
// float one within Q8_0's rounding, and the Linear owns its bytes.
TEST(Linear, RequantizedKeepsTheProductWithinQ8Rounding) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t rows = 48, cols = 256, n = 3;
  std::vector<float> w(rows * cols), x(n * cols);
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng);
  const std::vector<float> original = w;
  quant::MatrixView view;
  view.type = quant::Type::kF32;
  view.rows = rows;
  view.cols = cols;
  view.data = std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(w.data()),
                                            w.size() * sizeof(float));
  const model::engine::Linear q8 = model::engine::Linear::requantized(view, quant::Type::kQ8_0);
  std::fill(w.begin(), w.end(), 0.0f);  // the Linear holds its own bytes, not a view of these
  ASSERT_EQ(q8.view().type, quant::Type::kQ8_0);
  std::vector<float> got(n * rows);
  q8.apply(x, n, got);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t r = 0; r < rows; ++r) {
      double want = 0, magnitude = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        want += double(original[r * cols + c]) * x[i * cols + c];
        magnitude += std::fabs(double(original[r * cols + c]) * x[i * cols + c]);
      }
      EXPECT_NEAR(got[i * rows + r], want, 0.02 * magnitude) << "row " << r << ", input " << i;
    }
  }
}

// Q8_0/Q4_0/Q2_K/Q3_K matrices copied into the VNNI order (Linear::repacked) where this CPU has
// kernels for it: every product keeps the stored matrix's bits, at batch 1 (the GEMV), 3 (row
// kernels) and 16 (the GEMM tile); matrices without a whole 16-row group or of other types (MXFP4)
// stay as stored.
TEST(Linear, RepackedGivesTheStoredBits) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const quant::Type type : {quant::Type::kQ8_0, quant::Type::kQ4_0, quant::Type::kQ2_K,
                                 quant::Type::kQ3_K, quant::Type::kMXFP4}) {
    for (const std::size_t rows : {std::size_t{15}, std::size_t{48}, std::size_t{149}}) {
      const std::size_t cols = 512;
      std::vector<float> w(rows * cols);
      for (float& v : w) v = normal(rng);
      const quant::QuantizedMatrix m = quant::quantize(type, w, rows, cols);
      const model::engine::Linear stored(m.view(), false);
      const model::engine::Linear packed = model::engine::Linear::repacked(m.view());
      const bool expect_packed = rows >= quant::kVnniRows && quant::can_repack_vnni(type) &&
                                 quant::has_vnni_kernel(type, quant::active_isa());
      const std::string what = std::string(quant::name(type)) + " x " + std::to_string(rows);
      EXPECT_EQ(packed.is_repacked(), expect_packed) << what;
      for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{16}}) {
        std::vector<float> x(n * cols), want(n * rows), got(n * rows);
        for (float& v : x) v = normal(rng);
        stored.apply(x, n, want);
        packed.apply(x, n, got);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << what << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace k3::test
