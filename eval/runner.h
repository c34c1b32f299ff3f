// eval::run_gsm8k: the timed GSM8K generation over every DP group, and eval::run_throughput,
// the offline throughput measurement. Both are collective over the world.
//
// Prompts are assigned to DP groups (round-robin, or balanced by prompt tokens), each group
// generates its share with continuous batching (its few-shot prefix computed once and copied),
// stop strings are checked on the decoded text, and every finished question travels to rank 0
// in the step it finishes (one gather per step), where it is graded and handed to `on_result`
// at once (the per-question JSONL is written there, so a run that dies keeps what finished).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/groups.h"
#include "eval/extract.h"
#include "eval/prompt.h"
#include "eval/results.h"
#include "eval/speculative.h"
#include "eval/step_costs.h"
#include "eval/throughput.h"
#include "model/engine/engine.h"
#include "model/engine/generator.h"
#include "model/tokenizer/tokenizer.h"

namespace k3::eval {

struct RunnerOptions {
  std::size_t max_new_tokens = 512;
  model::engine::Sampling sampling;
  Extractor extractor = Extractor::kSglang;
  bool balance_by_tokens = false;  // --dp-balance tokens
  bool prefix_caching = true;
  std::vector<std::string> stop_strings = {};  // empty: SGLang's
  model::engine::GeneratorOptions generator;   // max_running already capped by --parallel
  bool progress_bar = false;                   // rank 0: a terminal bar instead of log lines
  StepCostsCache step_costs;  // adaptive speculation's calibration, kept between runs of the job
};

// Prompt tokens: the prefix alone and every prompt whole (the tokenizer may merge across the
// prefix boundary; the cache is then simply not used for that prompt).
struct TokenizedPrompts {
  std::vector<std::int32_t> prefix;
  std::vector<std::vector<std::int32_t>> prompts;  // per PromptSet::prompts entry
};
TokenizedPrompts tokenize_prompts(const model::Tokenizer& tokenizer, const PromptSet& prompts);

// Every prompt as a request (empty, out-of-vocabulary or too long for the context: InputError
// naming the question). Not collective: call it on every rank inside Runtime::collectively, so a
// bad prompt of one DP group stops every rank at once.
void validate_prompts(const model::engine::Generator& generator, const PromptSet& prompts,
                      const TokenizedPrompts& tokens, std::size_t max_new_tokens,
                      const std::string& source);

// Which DP group evaluates each of `sizes.size()` prompts (sizes: prompt tokens).
std::vector<int> assign_to_dp_groups(std::span<const std::size_t> sizes, int groups,
                                     bool balance_by_tokens);

// The generator's speculative-decoding counts: a DP group's (stats), or every group's summed
// (progress).
SpeculativeMetrics speculative_metrics(const model::engine::GeneratorStats& stats);
SpeculativeMetrics speculative_metrics(const model::engine::Generator::Progress& progress);
// Collective over the world: every DP group's metrics summed (each group's counted once, from the
// attn-dp group); every rank gets the sums. Decode times add up over the groups too.
SpeculativeMetrics sum_over_dp_groups(const dist::Groups& groups, const SpeculativeMetrics& mine);

struct EvalOutcome {
  std::vector<QuestionResult> results;  // rank 0: this run's questions, in id order
  double latency_s = 0;                 // wall time of the timed generation
  model::engine::GeneratorStats stats;  // this rank's DP group
};

// `skip`: ids already finished (--resume), the same on every rank. `on_result` runs on rank 0
// for each question as it finishes.
EvalOutcome run_gsm8k(model::engine::Engine& engine, const dist::Groups& groups,
                      const model::Tokenizer& tokenizer, const PromptSet& prompts,
                      const TokenizedPrompts& tokens, const std::vector<std::size_t>& skip,
                      const RunnerOptions& options,
                      const std::function<void(const QuestionResult&)>& on_result);

// A warm-up request and a smoke request (the first prompt, a few tokens) on every DP group,
// untimed; returns the smoke completion's text on rank 0. `prompts`: how many the timed run
// evaluates (adaptive speculation calibrates for their batch here).
std::string warm_up(model::engine::Engine& engine, const dist::Groups& groups,
                    const model::Tokenizer& tokenizer, const TokenizedPrompts& tokens,
                    std::size_t prompts, const RunnerOptions& options);

// Prompt i generates exactly output_lens[i] tokens (stop tokens ignored), every request
// submitted at the start; collective over the world. The outcome's speculative counts are every
// DP group's summed, on rank 0.
ThroughputOutcome run_throughput(model::engine::Engine& engine, const dist::Groups& groups,
                                 const std::vector<std::vector<std::int32_t>>& prompts,
                                 const std::vector<std::size_t>& output_lens,
                                 const RunnerOptions& options);

// Untimed warm-up before a throughput measurement: on every DP group, a few tokens of the first
// prompt with two new tokens, then the first prompt whole with a few (the smoke request).
void warm_up_throughput(model::engine::Engine& engine, const dist::Groups& groups,
                        const std::vector<std::int32_t>& first_prompt, std::size_t prompts,
                        const RunnerOptions& options);

}  // namespace k3::eval
