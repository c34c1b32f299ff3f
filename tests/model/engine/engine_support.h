// Helpers of the engine tests: load a synthetic checkpoint's slice for (layout, rank), build an
// engine on it, generate greedy tokens for a set of prompts, and compare logits.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "dist/groups.h"
#include "model/load/binding.h"
#include "model/checkpoint/checkpoint.h"
#include "model/engine/engine.h"
#include "model/engine/generator.h"
#include "model/load/load_plan.h"
#include "model/load/loader.h"
#include "model/parameters.h"

namespace k3::test {

// One rank's world: the default layout over MPI_COMM_SELF.
struct OneRank {
  dist::Layout layout = dist::Layout::make(dist::LayoutSpec{});
  dist::Comm self{MPI_COMM_SELF};
  dist::Groups groups{layout, self};
};

// The test binary's one OneRank, built on first use (after MPI_Init).
inline OneRank& one_rank() {
  static OneRank r;
  return r;
}

struct LoadedSlice {
  std::unique_ptr<model::Checkpoint> checkpoint;
  model::LoadResult loaded;
};

inline LoadedSlice load_slice(const std::filesystem::path& dir, const dist::Layout& layout,
                              int rank) {
  LoadedSlice s;
  s.checkpoint = std::make_unique<model::Checkpoint>(model::Checkpoint::open(dir));
  const auto bound = model::bind_parameters(
      *s.checkpoint, model::kimi_k3_parameters(s.checkpoint->config(), layout));
  if (!bound.problems.empty()) throw InputError("bind: " + bound.problems.front());
  const auto plan = model::make_load_plan(*s.checkpoint, bound.bindings, layout, rank);
  s.loaded = model::load(*s.checkpoint, plan);
  return s;
}

// Deterministic prompts of token ids from the trained part of the vocabulary.
inline std::vector<std::vector<std::int32_t>> random_prompts(std::size_t count, std::size_t min_len,
                                                             std::size_t max_len, int vocab,
                                                             std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> id(0, vocab - 1);
  std::uniform_int_distribution<std::size_t> len(min_len, max_len);
  std::vector<std::vector<std::int32_t>> out(count);
  for (auto& p : out) {
    p.resize(len(rng));
    for (auto& t : p) t = id(rng);
  }
  return out;
}

// Greedy completions of every prompt (ids 0..n-1), in prompt order.
inline std::vector<std::vector<std::int32_t>> generate(
    model::engine::Engine& engine, const dist::Groups& groups,
    const model::engine::GeneratorOptions& options,
    const std::vector<std::vector<std::int32_t>>& prompts, std::size_t max_new_tokens,
    const std::vector<std::int32_t>& prefix = {}, model::engine::GeneratorStats* stats = nullptr) {
  model::engine::Generator gen(engine, groups, options);
  if (!prefix.empty()) gen.add_prefix(prefix);
  std::vector<model::engine::Request> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    model::engine::Request r;
    r.id = i;
    r.prompt = prompts[i];
    r.max_new_tokens = max_new_tokens;
    requests.push_back(std::move(r));
  }
  gen.validate(requests);
  std::vector<std::vector<std::int32_t>> out(prompts.size());
  const auto s = gen.run(requests, {},
                         [&](const model::engine::Request& r, const model::engine::Completion& c) {
                           out[r.id] = c.tokens;
                         });
  if (stats) *stats = s;
  return out;
}

// Logits of every position: one prefill step of `prefill` tokens, then the rest one at a time.
inline std::vector<std::vector<float>> engine_logits(model::engine::Engine& e, const std::vector<std::int32_t>& tokens,
                                              std::size_t prefill) {
  std::vector<std::vector<float>> rows;
  const std::size_t V = static_cast<std::size_t>(e.config().vocab_size);
  e.reset_slot(0);
  for (std::size_t at = 0; at < tokens.size();) {
    const std::size_t n = at == 0 ? prefill : 1;
    model::engine::StepSequence s;
    s.slot = 0;
    s.tokens = std::span<const std::int32_t>(tokens).subspan(at, n);
    s.output = model::engine::StepSequence::Output::kAllLogits;
    auto result = e.step(std::span<const model::engine::StepSequence>(&s, 1));
    for (std::size_t r = 0; r < n; ++r)
      rows.emplace_back(result.logits[0].begin() + r * V, result.logits[0].begin() + (r + 1) * V);
    at += n;
  }
  return rows;
}

// The relative L2 distance of the whole [positions x vocabulary] logits.
inline double rel_l2(const std::vector<std::vector<float>>& got,
              const std::vector<std::vector<double>>& want) {
  double num = 0, den = 0;
  for (std::size_t t = 0; t < want.size(); ++t)
    for (std::size_t i = 0; i < want[t].size(); ++i) {
      num += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
      den += want[t][i] * want[t][i];
    }
  return std::sqrt(num / den);
}

// The relative L2 distance of two flat vectors.
inline double rel_l2(std::span<const float> got, std::span<const float> want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace k3::test
