// The optimized engine on one rank against the double-precision reference forward, and the
// serving paths (chunked prefill, prefix caching, batching, sampling) against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include <oneapi/tbb/task_arena.h>

#include "dist/groups.h"
#include "model/engine/engine_impl.h"
#include "model/engine/kda.h"
#include "model/reference/forward.h"
#include "tests/model/engine/engine_support.h"
#include "tests/model/test_dirs.h"
#include "tests/support/mpi_test.h"

namespace k3::test {
namespace {

using model::FormatKind;
using model::engine::Engine;
using model::engine::EngineOptions;
using model::engine::GeneratorOptions;
using model::engine::StepSequence;

class EngineTest : public ::testing::TestWithParam<FormatKind> {
 protected:
  static const LoadedSlice& slice(FormatKind kind) {
    static std::map<FormatKind, LoadedSlice> cache;
    auto it = cache.find(kind);
    if (it == cache.end())
      it = cache.emplace(kind, load_slice(synthetic_checkpoint(kind), one_rank().layout, 0)).first;
    return it->second;
  }
  static std::unique_ptr<Engine> engine(FormatKind kind, EngineOptions o = {}) {
    const auto& s = slice(kind);
    return std::make_unique<Engine>(s.checkpoint->config(), s.loaded.weights, one_rank().groups, o);
  }
  static const model::ReferenceModel& reference(FormatKind kind) {
    static std::map<FormatKind, std::unique_ptr<model::ReferenceModel>> cache;
    auto& r = cache[kind];
    if (!r)
      r = std::make_unique<model::ReferenceModel>(slice(kind).checkpoint->config(),
                                                  slice(kind).loaded.weights);
    return *r;
  }
};


// fp32 activations (weights dequantized once): the engine's math, its absorbed MLA, chunked
// KDA, and decode from the caches against the double-precision reference. The bound.
TEST_P(EngineTest, ExactModeMatchesReferenceWithin1e5) {
  EngineOptions o;
  o.exact = true;
  o.slots = 1;
  auto e = engine(GetParam(), o);
  const auto prompt = random_prompts(1, 40, 40, e->config().vocab_size, 7)[0];
  const auto want = reference(GetParam()).forward(prompt);
  // Positions 0..29 in one prefill step (a partial KDA chunk), then 30..39 decoded one by one.
  const auto got = engine_logits(*e, prompt, 30);
  const double err = rel_l2(got, want);
  std::printf("exact engine vs reference: logits relative L2 %.3g\n", err);
  EXPECT_LE(err, 1e-5);
}

// Int8 activations where the format is integer-based (every product for ModelSlim W8A8 and the
// GGUF blocks, the MXFP4 experts of hf). On the well-conditioned synthetic model (docs/ENGINE.md,
// "The synthetic model") one forward pass moves the logits by about the activation rounding of
// one product (~0.5 %), and no expert choice flips: every format is bounded.
TEST_P(EngineTest, DefaultModeNearReferenceOnFreshSequences) {
  auto e = engine(GetParam());
  const auto prompts = random_prompts(16, 1, 1, e->config().vocab_size, 11);
  std::vector<double> errors;
  for (const auto& p : prompts) {
    errors.push_back(rel_l2(engine_logits(*e, p, 1), reference(GetParam()).forward(p)));
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  std::printf(
      "int8-activation engine vs reference over 16 fresh tokens: median relative L2 %.3g, "
      "worst %.3g\n",
      median, errors.back());
  // Measured 2026-12-02: median / worst hf 0.0019 / 0.0037, ModelSlim 0.0045 / 0.0079, GGUF
  // 0.0076 / 0.0115.
  EXPECT_LE(median, 0.01);
  EXPECT_LE(errors.back(), 0.02);
}

// Formats agree: hf, ModelSlim and GGUF hold the same logical weights, each in its own
// encoding. The engine in its default int8-activation mode on each format is compared with the
// double-precision reference on hf's BF16 + MXFP4 weights. What remains is each format's weight
// quantisation carried through 6 layers (docs/ENGINE.md, "Formats"), plus the activation
// rounding, bounded separately against the reference on the format's own weights. Two unrelated
// models (another seed) are ~1.4 apart; a misread tensor lands far above these bounds too.
TEST_P(EngineTest, FormatsAgreeWithinQuantisationError) {
  auto e = engine(GetParam());
  const auto& truth = reference(FormatKind::kHf);
  const auto prompt = random_prompts(1, 24, 24, e->config().vocab_size, 5)[0];
  const double sequence = rel_l2(engine_logits(*e, prompt, 16), truth.forward(prompt));
  std::vector<double> fresh;
  for (const auto& p : random_prompts(8, 1, 1, e->config().vocab_size, 13))
    fresh.push_back(rel_l2(engine_logits(*e, p, 1), truth.forward(p)));
  std::sort(fresh.begin(), fresh.end());
  std::printf(
      "%s engine (int8 activations) vs hf reference: 24-token sequence %.3g, fresh tokens median "
      "%.3g worst %.3g\n",
      std::string(model::format_name(GetParam())).c_str(), sequence, fresh[fresh.size() / 2],
      fresh.back());
  // The activation part alone: the same engine against the reference on its own format's
  // weights (int8 activation blocks through every product of ModelSlim and GGUF).
  const double own = rel_l2(engine_logits(*e, prompt, 16), reference(GetParam()).forward(prompt));
  std::printf("  vs its own format's reference (activation quantisation only): %.3g\n", own);
  // Measured 2026-12-02 (docs/ENGINE.md, "Formats"): weights (sequence / worst fresh token) and
  // activations below.
  struct Bound {
    double weights, activations;
  };
  const std::map<FormatKind, Bound> bounds = {{FormatKind::kHf, {0.01, 0.01}},
                                              {FormatKind::kModelSlim, {0.12, 0.01}},
                                              {FormatKind::kGguf, {0.25, 0.015}}};
  EXPECT_LE(sequence, bounds.at(GetParam()).weights);
  EXPECT_LE(fresh.back(), bounds.at(GetParam()).weights);
  EXPECT_LE(own, bounds.at(GetParam()).activations);
}

// oneTBB threads split products, heads and experts, but every value is computed by one task in
// a fixed order: logits of a prefill plus decode steps are bitwise the same on 1 and 4 threads
// (int8 activations, the mode where a last-bit change would show as a flip).
TEST_P(EngineTest, ThreadCountDoesNotChangeABit) {
  auto e = engine(GetParam());
  const auto prompt = random_prompts(1, 40, 40, e->config().vocab_size, 21)[0];
  std::vector<std::vector<float>> one, four;
  oneapi::tbb::task_arena(1).execute([&] { one = engine_logits(*e, prompt, 30); });
  oneapi::tbb::task_arena(4).execute([&] { four = engine_logits(*e, prompt, 30); });
  ASSERT_EQ(one.size(), four.size());
  for (std::size_t t = 0; t < one.size(); ++t)
    ASSERT_EQ(0, std::memcmp(one[t].data(), four[t].data(), one[t].size() * sizeof(float)))
        << "position " << t;
}

// Repacking the Q8_0/Q4_0/Q2_K/Q3_K matrices at load (EngineOptions::repack_weights, on by
// default) changes no bit of any logit, prefill or decode (the tiny GGUF holds 72 Q8_0 tensors
// and its routed experts are Q2_K and Q3_K).
TEST_P(EngineTest, RepackedWeightsChangeNoBit) {
  EngineOptions stored;
  stored.repack_weights = false;
  auto a = engine(GetParam(), stored);
  auto b = engine(GetParam());
  const auto prompt = random_prompts(1, 40, 40, a->config().vocab_size, 23)[0];
  const auto want = engine_logits(*a, prompt, 30), got = engine_logits(*b, prompt, 30);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t t = 0; t < want.size(); ++t)
    ASSERT_EQ(0, std::memcmp(want[t].data(), got[t].data(), want[t].size() * sizeof(float)))
        << "position " << t;
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineTest,
                         ::testing::Values(FormatKind::kHf, FormatKind::kModelSlim,
                                           FormatKind::kGguf),
                         [](const auto& p) { return std::string(model::format_name(p.param)); });

// --- Serving paths: each must give exactly the tokens of the plain path. ---
// Chunked prefill and prefix snapshots run with fp32 activations: they add in a different order
// than the plain path (chunks of another size, a snapshot's state), so in int8-activation mode a
// last-bit difference can flip one activation's rounding, and a greedy choice within ~1 % of a
// tie may then flip (docs/ENGINE.md, "Determinism"). With fp32 activations such differences stay
// at rounding level, and any real difference between the paths shows. Batching changes no bit
// (docs/ENGINE.md, "Batch invariance"), so it is compared in both modes.

class ServingTest : public EngineTest {
 protected:
  static constexpr std::size_t kNewTokens = 10;
  std::vector<std::vector<std::int32_t>> run(const std::vector<std::vector<std::int32_t>>& prompts,
                                             GeneratorOptions g, EngineOptions o = {},
                                             const std::vector<std::int32_t>& prefix = {},
                                             model::engine::GeneratorStats* stats = nullptr,
                                             bool exact = true) {
    o.slots = g.max_running_requests + (prefix.empty() ? 0 : 1);
    o.exact = exact;
    auto e = engine(GetParam(), o);
    return generate(*e, one_rank().groups, g, prompts, kNewTokens, prefix, stats);
  }
};

TEST_P(ServingTest, ChunkedPrefillMatchesTokenByToken) {
  const auto prompts = random_prompts(4, 20, 70, 4096, 21);
  GeneratorOptions whole, chunked, token;
  whole.max_running_requests = chunked.max_running_requests = token.max_running_requests = 1;
  whole.chunked_prefill_size = 4096;
  chunked.chunked_prefill_size = 7;  // chunks that split KDA chunks and MLA blocks unevenly
  token.chunked_prefill_size = 1;
  EngineOptions recurrent;
  recurrent.kda_chunk = 0;
  const auto want = run(prompts, token, recurrent);
  EXPECT_EQ(run(prompts, whole), want);
  EXPECT_EQ(run(prompts, chunked), want);
  EngineOptions small_chunks;
  small_chunks.kda_chunk = 16;
  EXPECT_EQ(run(prompts, whole, small_chunks), want);
}

TEST_P(ServingTest, PrefixCacheMatchesRecomputing) {
  const auto shared = random_prompts(1, 48, 48, 4096, 31)[0];
  auto prompts = random_prompts(6, 3, 20, 4096, 32);
  for (auto& p : prompts) p.insert(p.begin(), shared.begin(), shared.end());
  prompts.push_back(random_prompts(1, 10, 10, 4096, 33)[0]);  // one without the prefix
  GeneratorOptions g;
  g.max_running_requests = 4;
  model::engine::GeneratorStats cached_stats, plain_stats;
  const auto cached = run(prompts, g, {}, shared, &cached_stats);
  g.prefix_caching = false;
  const auto plain = run(prompts, g, {}, {}, &plain_stats);
  EXPECT_EQ(cached, plain);
  EXPECT_EQ(cached_stats.cached_tokens, 6 * shared.size());
  EXPECT_EQ(plain_stats.cached_tokens, 0u);
  EXPECT_EQ(cached_stats.prefill_tokens + cached_stats.cached_tokens,
            plain_stats.prefill_tokens + shared.size());
}

// A prefix one run computed serves the next run on the same engine (k3eval's warm-up and its
// timed run): not computed again, the same tokens; a run with other prefixes clears the record
// before it writes those slots, and the one after it computes the prefix again.
TEST_P(ServingTest, AResidentPrefixServesTheNextRunWithTheSameTokens) {
  const auto shared = random_prompts(1, 48, 48, 4096, 31)[0];
  auto prompts = random_prompts(5, 3, 20, 4096, 34);
  for (auto& p : prompts) p.insert(p.begin(), shared.begin(), shared.end());
  GeneratorOptions g;
  g.max_running_requests = 4;
  g.prefix_caching = false;
  const auto want = run(prompts, g);
  g.prefix_caching = true;
  model::engine::ResidentPrefixes resident;
  g.resident_prefixes = &resident;
  EngineOptions o;
  o.slots = g.max_running_requests + 1;
  o.exact = true;
  auto e = engine(GetParam(), o);
  const dist::Groups& groups = one_rank().groups;
  std::size_t suffixes = 0;
  for (const auto& p : prompts) suffixes += p.size() - shared.size();
  model::engine::GeneratorStats first, second, other, again;
  const std::vector<std::vector<std::int32_t>> warm_up(prompts.begin(), prompts.begin() + 1);
  generate(*e, groups, g, warm_up, 2, shared, &first);
  EXPECT_EQ(first.prefill_tokens, prompts[0].size());
  ASSERT_EQ(resident.prefixes, std::vector<std::vector<std::int32_t>>{shared});
  EXPECT_EQ(generate(*e, groups, g, prompts, kNewTokens, shared, &second), want);
  EXPECT_EQ(second.prefill_tokens, suffixes) << "the resident prefix was computed again";
  EXPECT_EQ(second.cached_tokens, prompts.size() * shared.size());
  generate(*e, groups, g, prompts, 2, {}, &other);  // no prefix: its requests take every slot
  EXPECT_TRUE(resident.prefixes.empty());
  EXPECT_EQ(generate(*e, groups, g, prompts, kNewTokens, shared, &again), want);
  EXPECT_EQ(again.prefill_tokens, suffixes + shared.size());
}

TEST_P(ServingTest, BatchOf16MatchesOneAtATime) {
  const auto prompts = random_prompts(16, 5, 40, 4096, 41);
  GeneratorOptions batched, single;
  batched.max_running_requests = 16;
  batched.chunked_prefill_size = 64;
  single.max_running_requests = 1;
  EXPECT_EQ(run(prompts, batched), run(prompts, single));
  EXPECT_EQ(run(prompts, batched, {}, {}, nullptr, false),
            run(prompts, single, {}, {}, nullptr, false))
      << "int8 activations";
}

INSTANTIATE_TEST_SUITE_P(Formats, ServingTest,
                         ::testing::Values(FormatKind::kHf, FormatKind::kGguf),
                         [](const auto& p) { return std::string(model::format_name(p.param)); });

// Batch invariance, in the default int8-activation mode and with fp32 activations:
// a sequence's logits are bitwise the same alone and as any row of a batch of 16 or 64
// sequences stepped together, at prefill and at every decode step, whatever its place in the
// batch. Every product adds a row's blocks in one order at any batch size (quant/README.md),
// attention and KDA run per sequence, and the MoE adds a token's experts in a fixed order.
TEST_P(EngineTest, ASequenceIsBitwiseTheSameInAnyBatch) {
  for (const bool exact : {false, true}) {
    // One engine of 64 slots per mode serves both batch sizes (each run resets its slots).
    EngineOptions o;
    o.slots = 64;
    o.exact = exact;
    auto e = engine(GetParam(), o);
    for (const std::size_t batch : {16u, 64u}) {
      const int V = e->config().vocab_size;
      const auto prompts = random_prompts(batch, 1, 40, V, 101 + static_cast<std::uint32_t>(batch));
      constexpr std::size_t kDecode = 6;
      // Decode feeds fixed tokens, so every step's batch is known before it runs.
      const auto fed = random_prompts(1, kDecode, kDecode, V, 7)[0];
      auto run = [&](const std::vector<std::size_t>& members) {
        std::vector<std::vector<std::vector<float>>> logits(members.size());
        for (std::size_t i = 0; i < members.size(); ++i) e->reset_slot(static_cast<int>(i));
        for (std::size_t step = 0; step <= kDecode; ++step) {
          std::vector<StepSequence> seqs(members.size());
          for (std::size_t i = 0; i < members.size(); ++i) {
            seqs[i].slot = static_cast<int>(i);
            seqs[i].tokens = step == 0 ? std::span<const std::int32_t>(prompts[members[i]])
                                       : std::span<const std::int32_t>(fed).subspan(step - 1, 1);
            seqs[i].output = StepSequence::Output::kAllLogits;
          }
          auto r = e->step(seqs);
          for (std::size_t i = 0; i < members.size(); ++i)
            logits[i].push_back(std::move(r.logits[i]));
        }
        return logits;
      };
      std::vector<std::size_t> all(batch);
      for (std::size_t i = 0; i < batch; ++i) all[i] = batch - 1 - i;  // reversed arrival order
      const auto together = run(all);
      for (const std::size_t q : {std::size_t{0}, batch / 2, batch - 1}) {
        const auto alone = run({q});
        const std::size_t row = batch - 1 - q;
        for (std::size_t step = 0; step <= kDecode; ++step) {
          ASSERT_EQ(alone[0][step].size(), together[row][step].size());
          ASSERT_EQ(0, std::memcmp(alone[0][step].data(), together[row][step].data(),
                                   alone[0][step].size() * sizeof(float)))
              << (exact ? "fp32" : "int8") << " activations, batch " << batch << ", sequence " << q
              << ", step " << step;
        }
      }
    }
  }
}

// Speculative verification: a verify step over 8 tokens followed by commit(k) leaves
// the slot exactly as decoding the first k of them one at a time would (the KDA state from the
// snapshot after token k, the MLA rows past it dropped by position), and its first k rows of
// logits are the decode path's, bit for bit; so do the logits of the tokens decoded after it.
TEST_P(EngineTest, SpeculativeCommitIsBitwiseTheDecodePath) {
  for (const bool exact : {false, true}) {
    EngineOptions o;
    o.slots = 2;
    o.exact = exact;
    auto e = engine(GetParam(), o);
    const int V = e->config().vocab_size;
    const auto prompt = random_prompts(1, 30, 30, V, 51)[0];
    const auto block = random_prompts(1, 8, 8, V, 52)[0];   // anchor + 7 drafts
    const auto after = random_prompts(1, 3, 3, V, 53)[0];   // decoded after the commit
    auto step = [&](int slot, std::span<const std::int32_t> tokens, bool speculative) {
      StepSequence s;
      s.slot = slot;
      s.tokens = tokens;
      s.output = StepSequence::Output::kAllLogits;
      s.speculative = speculative;
      return e->step(std::span<const StepSequence>(&s, 1)).logits[0];
    };
    const std::size_t row = static_cast<std::size_t>(V);
    for (const std::size_t k : {std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
      e->reset_slot(0);
      e->reset_slot(1);
      step(0, prompt, false);
      step(1, prompt, false);
      std::vector<float> decoded;
      for (std::size_t j = 0; j < k; ++j) {
        const auto r = step(0, std::span<const std::int32_t>(block).subspan(j, 1), false);
        decoded.insert(decoded.end(), r.begin(), r.end());
      }
      const auto verified = step(1, block, true);
      ASSERT_EQ(verified.size(), block.size() * row);
      ASSERT_EQ(0, std::memcmp(decoded.data(), verified.data(), k * row * sizeof(float)))
          << (exact ? "fp32" : "int8") << " activations, k " << k;
      e->commit(1, k);
      EXPECT_EQ(e->position(1), e->position(0));
      for (std::size_t j = 0; j < after.size(); ++j) {
        const auto want = step(0, std::span<const std::int32_t>(after).subspan(j, 1), false);
        const auto got = step(1, std::span<const std::int32_t>(after).subspan(j, 1), false);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), row * sizeof(float)))
            << (exact ? "fp32" : "int8") << " activations, k " << k << ", token " << j
            << " after the commit";
      }
    }
    // A slot with uncommitted tokens cannot step, and a commit must keep 1..fed tokens.
    e->reset_slot(1);
    step(1, block, true);
    EXPECT_THROW(step(1, after, false), InternalError);
    EXPECT_THROW(e->commit(1, 0), InternalError);
    EXPECT_THROW(e->commit(1, 9), InternalError);
  }
}

// Seeded temperature sampling: reproducible, seed-dependent, and the same on any batch shape.
TEST(Sampling, SeededTemperatureIsReproducible) {
  OneRank r;
  const auto s = load_slice(synthetic_checkpoint(FormatKind::kHf), r.layout, 0);
  EngineOptions o;
  o.slots = 4;
  Engine e(s.checkpoint->config(), s.loaded.weights, r.groups, o);
  auto sample = [&](std::uint64_t seed, int running) {
    model::engine::Generator gen(e, r.groups, {running, 512, true});
    std::vector<model::engine::Request> reqs(3);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].id = i;
      reqs[i].prompt = {1, 2, 3, static_cast<std::int32_t>(10 + i)};
      reqs[i].max_new_tokens = 12;
      reqs[i].sampling = {1.0f, seed};
    }
    std::vector<std::vector<std::int32_t>> out(3);
    gen.run(reqs, {}, [&](const auto& q, const auto& c) { out[q.id] = c.tokens; });
    return out;
  };
  const auto a = sample(5, 3);
  EXPECT_EQ(sample(5, 1), a);
  EXPECT_NE(sample(6, 3), a);
}

// EngineOptions::sampled_vocabulary: ids at or above it are never chosen, greedy or sampled,
// and greedy takes the best id below it.
TEST(Sampling, IdsPastTheSampledVocabularyAreNeverChosen) {
  OneRank r;
  const auto s = load_slice(synthetic_checkpoint(FormatKind::kHf), r.layout, 0);
  const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  auto next = [&](std::size_t limit, float temperature, StepSequence::Output output,
                  std::uint64_t seed = 11) {
    EngineOptions o;
    o.sampled_vocabulary = limit;
    Engine e(s.checkpoint->config(), s.loaded.weights, r.groups, o);
    StepSequence q;
    q.slot = 0;
    q.tokens = prompt;
    q.output = output;
    q.sampling = {temperature, seed};
    return e.step(std::span<const StepSequence>(&q, 1));
  };
  const auto all = next(0, 0, StepSequence::Output::kAllLogits);
  const std::int32_t best = all.next[0];
  ASSERT_GT(best, 0);
  const std::size_t V = static_cast<std::size_t>(s.checkpoint->config().vocab_size);
  const std::vector<float> last(all.logits[0].end() - static_cast<std::ptrdiff_t>(V),
                                all.logits[0].end());
  const auto limit = static_cast<std::size_t>(best);
  const auto below = static_cast<std::int32_t>(
      std::max_element(last.begin(), last.begin() + best) - last.begin());
  EXPECT_EQ(next(limit, 0, StepSequence::Output::kNextToken).next[0], below);
  EXPECT_EQ(next(V, 0, StepSequence::Output::kNextToken).next[0], best);
  for (std::uint64_t seed = 1; seed <= 4; ++seed)
    EXPECT_LT(next(limit, 2.0f, StepSequence::Output::kNextToken, seed).next[0], best);
}

TEST(Generator, RejectsBadRequestsNamingThem) {
  OneRank r;
  const auto s = load_slice(synthetic_checkpoint(FormatKind::kHf), r.layout, 0);
  EngineOptions o;
  o.slots = 2;
  o.context_length = 64;
  Engine e(s.checkpoint->config(), s.loaded.weights, r.groups, o);
  model::engine::Generator gen(e, r.groups, {2, 512, true});
  auto message = [&](model::engine::Request q) {
    try {
      gen.validate(std::vector<model::engine::Request>{q});
    } catch (const InputError& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  model::engine::Request q;
  q.id = 7;
  q.max_new_tokens = 4;
  EXPECT_EQ(message(q), "request 7: empty prompt");
  q.prompt = {1, 4352};
  EXPECT_EQ(message(q), "request 7: token id 4352 outside the vocabulary of 4352");
  q.prompt.assign(61, 1);
  EXPECT_EQ(message(q),
            "request 7: 61 prompt tokens + 4 new tokens exceed the context length 64 "
            "(--context-length)");
  EXPECT_THROW(gen.add_prefix({1, 2, 3}), UsageError);  // 1 prefix + 2 running > 2 slots
}

TEST(KdaKernels, ChunkedEqualsRecurrentAndTheReference) {
  const std::size_t T = 45, D = 32;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  model::engine::KdaHead head;
  head.resize(T, D);
  model::reference::KdaHeadInputs ref;
  ref.tokens = T;
  ref.key_dim = ref.value_dim = D;
  for (std::size_t t = 0; t < T; ++t) {
    float qn = 0, kn = 0;
    for (std::size_t d = 0; d < D; ++d) {
      head.q[t * D + d] = u(rng);
      head.k[t * D + d] = u(rng);
      head.v[t * D + d] = u(rng);
      head.g[t * D + d] = -5.0f * (0.5f + 0.5f * u(rng));  // the gate's range (-5, 0)
      qn += head.q[t * D + d] * head.q[t * D + d];
      kn += head.k[t * D + d] * head.k[t * D + d];
    }
    for (std::size_t d = 0; d < D; ++d) {
      head.q[t * D + d] /= std::sqrt(qn) * std::sqrt(float(D));
      head.k[t * D + d] /= std::sqrt(kn);
    }
    head.beta[t] = 0.5f + 0.5f * u(rng);
  }
  ref.q.assign(head.q.begin(), head.q.end());
  ref.k.assign(head.k.begin(), head.k.end());
  ref.v.assign(head.v.begin(), head.v.end());
  ref.g.assign(head.g.begin(), head.g.end());
  ref.beta.assign(head.beta.begin(), head.beta.end());
  std::vector<double> S_ref(D * D, 0.0);
  const auto want = model::reference::kda_recurrent(ref, S_ref);
  for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{64}}) {
    auto h = head;
    std::vector<float> S(D * D, 0.0f);
    if (chunk == 0) {
      model::engine::kda_recurrent(h, S.data());
    } else {
      model::engine::kda_chunked(h, S.data(), chunk, -5.0f);
    }
    double num = 0, den = 0, snum = 0, sden = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      num += (h.o[i] - want[i]) * (h.o[i] - want[i]);
      den += want[i] * want[i];
    }
    for (std::size_t i = 0; i < S.size(); ++i) {
      snum += (S[i] - S_ref[i]) * (S[i] - S_ref[i]);
      sden += S_ref[i] * S_ref[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-5) << "chunk " << chunk;
    EXPECT_LE(std::sqrt(snum / sden), 1e-5) << "chunk " << chunk;
  }
}

// The step buffers' reuse: zeros every time, the capacity kept from use to use, and given back
// when it is above 16 MiB and more than twice the need (a decode step after a long prefill).
TEST(StepScratch, ZeroedReusesItsBufferAndGivesBackWhatIsFarAboveTheNeed) {
  std::vector<float> buffer;
  EXPECT_EQ(&model::engine::detail::zeroed(buffer, 1000), &buffer);
  buffer[3] = 5.0f;
  const float* data = buffer.data();
  model::engine::detail::zeroed(buffer, 10);
  EXPECT_EQ(buffer.size(), 10u);
  EXPECT_EQ(buffer.data(), data);  // small: kept
  EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](float x) { return x == 0.0f; }));
  const std::size_t large = std::size_t{6} << 20;  // 24 MiB of floats
  model::engine::detail::zeroed(buffer, large);
  model::engine::detail::zeroed(buffer, large / 2 + 1);  // within twice the need: kept
  EXPECT_GE(buffer.capacity(), large);
  EXPECT_EQ(buffer.size(), large / 2 + 1);
  EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](float x) { return x == 0.0f; }));
  model::engine::detail::zeroed(buffer, 100);  // far above: given back
  EXPECT_LT(buffer.capacity(), large / 2);
  EXPECT_EQ(buffer.size(), 100u);
}

}  // namespace
}  // namespace k3::test
