#include "eval/runner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

#include <spdlog/spdlog.h>

#include "dist/collectives.h"
#include "eval/score.h"
#include "eval/stop.h"
#include "common/error.h"

namespace k3::eval {

using model::engine::Completion;
using model::engine::Generator;
using model::engine::Request;

TokenizedPrompts tokenize_prompts(const model::Tokenizer& tokenizer, const PromptSet& prompts) {
  TokenizedPrompts t;
  t.prefix = tokenizer.encode(prompts.prefix);
  t.prompts.reserve(prompts.prompts.size());
  for (std::size_t i = 0; i < prompts.prompts.size(); ++i) {
    t.prompts.push_back(tokenizer.encode(prompts.text(i)));
  }
  return t;
}

void validate_prompts(const model::engine::Generator& generator, const PromptSet& prompts,
                      const TokenizedPrompts& tokens, std::size_t max_new_tokens,
                      const std::string& source) {
  std::vector<Request> all(prompts.prompts.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i].id = prompts.prompts[i].id;
    all[i].prompt = tokens.prompts[i];
    all[i].max_new_tokens = max_new_tokens;
  }
  try {
    generator.validate(all);
  } catch (const InputError& e) {
    // "request N: ..." -> "<data file>: question N: ..." (request ids are question indices).
    std::string what = e.what();
    if (what.rfind("request ", 0) == 0) what = "question " + what.substr(8);
    throw InputError(source + ": " + what);
  }
}

std::vector<int> assign_to_dp_groups(std::span<const std::size_t> sizes, int groups,
                                     bool balance_by_tokens) {
  std::vector<int> out(sizes.size());
  if (!balance_by_tokens) {
    for (std::size_t i = 0; i < sizes.size(); ++i) out[i] = static_cast<int>(i % groups);
    return out;
  }
  // Longest first onto the group with the fewest tokens so far (ties: the lower group).
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<std::size_t> load(static_cast<std::size_t>(groups), 0);
  for (std::size_t i : order) {
    const auto g =
        static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[i] = static_cast<int>(g);
    load[g] += sizes[i];
  }
  return out;
}

SpeculativeMetrics speculative_metrics(const model::engine::GeneratorStats& stats) {
  const model::engine::SpeculationTally& t = stats.speculation;
  return {stats.verify_rounds, stats.drafted_tokens, stats.accepted_drafts,
          t.k_rounds,          t.measured_s,         t.plain_estimate_s};
}

SpeculativeMetrics sum_over_dp_groups(const dist::Groups& groups, const SpeculativeMetrics& mine) {
  std::vector<std::uint64_t> counts = {mine.verify_rounds, mine.drafted_tokens,
                                       mine.accepted_drafts};
  counts.insert(counts.end(), mine.draft_lengths.begin(), mine.draft_lengths.end());
  dist::allreduce(groups.attn_dp(), std::span<std::uint64_t>(counts), dist::ReduceOp::kSum);
  std::array<double, 2> times = {mine.decode_s, mine.plain_estimate_s};
  dist::allreduce(groups.attn_dp(), std::span<double>(times), dist::ReduceOp::kSum);
  SpeculativeMetrics all{counts[0], counts[1], counts[2], {}, times[0], times[1]};
  all.draft_lengths.assign(counts.begin() + 3, counts.end());
  return all;
}

SpeculativeMetrics speculative_metrics(const Generator::Progress& progress) {
  SpeculativeMetrics m;
  m.verify_rounds = progress.verify_rounds;
  m.drafted_tokens = progress.drafted_tokens;
  m.accepted_drafts = progress.accepted_drafts;
  return m;
}

namespace {

using Clock = std::chrono::steady_clock;

int dp_group_of(const dist::Groups& groups) {
  return groups.layout().coords(groups.world().rank()).dp_rank;
}
int dp_groups(const dist::Groups& groups) {
  return groups.layout().group_count(dist::GroupKind::kAttnTp);
}
bool group_leader(const dist::Groups& groups) { return groups.attn_tp().rank() == 0; }

// Rank 0's progress display: a bar on a terminal, a log line every 10 s otherwise.
class ProgressReporter {
 public:
  // `what`: the items counted ("questions", "requests").
  ProgressReporter(std::size_t total, bool bar, bool active, std::string what = "questions")
      : total_(total), bar_(bar), active_(active), what_(std::move(what)), start_(Clock::now()),
        last_(start_) {}
  void update(const Generator::Progress& p) {
    if (!active_) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const bool done = p.finished >= total_;
    // A bar redraws at most twice a second; log lines come every 10 s. Both show the end.
    if (!done &&
        now - last_ < (bar_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000)))
      return;
    last_ = now;
    const double rate = elapsed > 0 ? static_cast<double>(p.generated_tokens) / elapsed : 0;
    const double eta = p.finished > 0 ? elapsed * static_cast<double>(total_ - p.finished) /
                                            static_cast<double>(p.finished)
                                      : 0;
    // ", accept len X, accept rate Y" once a verify round ran; nothing without speculation.
    const std::string accept = format_accept_suffix(speculative_metrics(p));
    if (bar_) {
      const std::size_t width = 30;
      const std::size_t fill = total_ ? width * p.finished / total_ : width;
      std::fprintf(stdout, "\r[%s%s] %zu/%zu %s, %.1f tok/s%s, ETA %s   ",
                   std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                   static_cast<std::size_t>(p.finished), total_, what_.c_str(), rate,
                   accept.c_str(),
                   p.finished ? (std::to_string(static_cast<long>(eta)) + " s").c_str() : "?");
      if (done) std::fputc('\n', stdout);
      std::fflush(stdout);
    } else {
      spdlog::info("progress: {}/{} {}, {:.1f} tok/s{}, ETA {}", p.finished, total_, what_, rate,
                   accept, p.finished ? std::to_string(static_cast<long>(eta)) + " s" : "?");
    }
  }

 private:
  std::size_t total_;
  bool bar_, active_;
  std::string what_;
  Clock::time_point start_, last_;
};

// Per request while it generates: the decoded completion and its stop-string check.
struct Decoding {
  explicit Decoding(const model::Tokenizer& t, const std::vector<std::string>& stops)
      : decoder(t), checker(stops) {}
  model::IncrementalDecoder decoder;
  std::string text;
  StopChecker checker;
};

}  // namespace

EvalOutcome run_gsm8k(model::engine::Engine& engine, const dist::Groups& groups,
                      const model::Tokenizer& tokenizer, const PromptSet& prompts,
                      const TokenizedPrompts& tokens, const std::vector<std::size_t>& skip,
                      const RunnerOptions& options,
                      const std::function<void(const QuestionResult&)>& on_result) {
  const std::vector<std::string> stops =
      options.stop_strings.empty() ? sglang_stop_strings() : options.stop_strings;
  // The questions of this run (not finished before) and their DP groups.
  std::vector<std::size_t> todo, sizes;
  for (std::size_t i = 0; i < prompts.prompts.size(); ++i) {
    if (std::find(skip.begin(), skip.end(), prompts.prompts[i].id) != skip.end()) continue;
    todo.push_back(i);
    sizes.push_back(tokens.prompts[i].size());
  }
  const std::vector<int> owner =
      assign_to_dp_groups(sizes, dp_groups(groups), options.balance_by_tokens);
  const int mine = dp_group_of(groups);
  std::vector<Request> requests;
  std::vector<std::size_t> request_prompt;  // index into prompts.prompts
  for (std::size_t k = 0; k < todo.size(); ++k) {
    if (owner[k] != mine) continue;
    Request r;
    r.id = prompts.prompts[todo[k]].id;
    r.prompt = tokens.prompts[todo[k]];
    r.max_new_tokens = options.max_new_tokens;
    r.sampling = options.sampling;
    r.stop_tokens = {engine.config().eos_token_id};
    requests.push_back(std::move(r));
    request_prompt.push_back(todo[k]);
  }

  Generator gen(engine, groups, options.generator);
  if (options.prefix_caching) gen.add_prefix(tokens.prefix);
  std::map<std::uint64_t, Decoding> decoding;
  std::map<std::uint64_t, std::size_t> prompt_of;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    decoding.emplace(requests[i].id, Decoding(tokenizer, stops));
    prompt_of[requests[i].id] = request_prompt[i];
  }

  // Finished here (binary records, eval/results.h), waiting for the next step's gather to rank 0.
  WireWriter outbox;
  std::uint64_t produced = 0, received = 0;
  EvalOutcome outcome;
  ProgressReporter progress(todo.size(), options.progress_bar, groups.world().rank() == 0);
  auto flush_to_rank0 = [&] {
    const std::string sent = outbox.take();
    outbox = WireWriter();
    const auto all = dist::gatherv(groups.world(), std::span<const char>(sent), 0);
    if (groups.world().rank() != 0) return;
    WireReader in(std::string_view(all.data.data(), all.data.size()));
    while (!in.done()) {
      QuestionResult r;
      decode(in, r);
      ++received;
      if (on_result) on_result(r);
      outcome.results.push_back(std::move(r));
    }
  };

  const auto t0 = Clock::now();
  outcome.stats = gen.run(
      requests,
      [&](const Request& r, std::span<const std::int32_t> generated) {
        Decoding& d = decoding.at(r.id);
        const std::int32_t id = generated.back();
        if (tokenizer.is_special(id)) {
          // Special tokens are skipped in the text (SGLang decodes with
          // skip_special_tokens=True) unless one is itself a stop string.
          const std::string name(tokenizer.token_bytes(id));
          if (std::find(stops.begin(), stops.end(), name) == stops.end()) return true;
          d.text += d.decoder.finish() + name;
        } else {
          d.text += d.decoder.push(id);
        }
        return !d.checker.update(d.text);
      },
      [&](const Request& r, const Completion& c) {
        if (!group_leader(groups)) return;
        Decoding& d = decoding.at(r.id);
        d.text += d.decoder.finish();
        const Prompt& p = prompts.prompts[prompt_of.at(r.id)];
        QuestionResult q;
        q.id = p.id;
        q.dp_group = mine;
        q.prompt_tokens = c.prompt_tokens;
        q.output_text = std::string(truncate_at_stop(d.text, stops));
        q.label = p.label;
        q.completion_tokens = c.completion_tokens;
        q.finish_reason = finish_name(c.finish);
        q.latency_s = c.finished_s - c.admitted_s;
        q.token_ids = c.tokens;
        grade(q, options.extractor);
        encode(outbox, q);
        ++produced;
      },
      [&](const Generator::Progress& p) {
        flush_to_rank0();
        progress.update(p);
      });
  outcome.latency_s = std::chrono::duration<double>(Clock::now() - t0).count();
  flush_to_rank0();  // nothing is left after the last step, but never drop a result

  // Reconcile: every question of this run produced once and received once.
  std::array<std::uint64_t, 2> counts = {produced, received};
  dist::allreduce(groups.world(), std::span<std::uint64_t>(counts), dist::ReduceOp::kSum);
  if (counts[0] != todo.size() || counts[1] != todo.size()) {
    throw InternalError("result reconciliation: " + std::to_string(todo.size()) +
                        " questions assigned, " + std::to_string(counts[0]) + " produced, " +
                        std::to_string(counts[1]) + " received on rank 0");
  }
  std::sort(outcome.results.begin(), outcome.results.end(),
            [](const QuestionResult& a, const QuestionResult& b) { return a.id < b.id; });
  for (std::size_t i = 1; i < outcome.results.size(); ++i) {
    if (outcome.results[i].id == outcome.results[i - 1].id) {
      throw InternalError("result reconciliation: question " +
                          std::to_string(outcome.results[i].id) + " evaluated twice");
    }
  }
  return outcome;
}

namespace {

// Two untimed requests on every DP group: `warm` (2 new tokens), then `smoke` (a few tokens,
// handed to on_smoke on every rank that ran it). With adaptive speculation the first calibrates
// the cost model for the batch the timed run will hold: `prompts` shared out over the DP groups,
// up to max_running_requests (a group given more calibrates the rest in the timed run). The
// smoke request starts from `prefix` (empty: none), computed as a prefix snapshot that stays
// resident for the timed run (GeneratorOptions::resident_prefixes), which then starts from it.
void warm_up_rounds(model::engine::Engine& engine, const dist::Groups& groups,
                    const std::vector<std::int32_t>& warm, const std::vector<std::int32_t>& smoke,
                    const std::vector<std::int32_t>& prefix, std::size_t smoke_tokens,
                    std::size_t prompts, const RunnerOptions& options,
                    const std::function<void(const Completion&)>& on_smoke) {
  model::engine::GeneratorOptions g = options.generator;
  g.max_running_requests = 1;
  const auto dp = static_cast<std::size_t>(groups.layout().group_count(dist::GroupKind::kAttnTp));
  g.calibration_requests = std::clamp<std::size_t>(
      (prompts + dp - 1) / dp, 1,
      static_cast<std::size_t>(std::max(1, options.generator.max_running_requests)));
  model::engine::Speculation* speculation = g.drafter ? g.speculation : nullptr;
  if (speculation && speculation->adaptive())
    restore_step_costs(groups, options.step_costs, speculation->cost());
  for (int round = 0; round < 2; ++round) {
    Generator gen(engine, groups, g);
    if (round == 1 && options.prefix_caching) gen.add_prefix(prefix);
    Request r;
    r.id = 0;
    if (round == 0) {  // warm-up: a few tokens, two new tokens
      r.prompt.assign(warm.begin(),
                      warm.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(8, warm.size())));
      r.max_new_tokens = 2;
    } else {  // smoke: a whole prompt, a few tokens
      r.prompt = smoke;
      r.max_new_tokens = std::min<std::size_t>(8, smoke_tokens);
    }
    r.sampling = options.sampling;
    std::vector<Request> one{r};
    gen.validate(one);
    const auto stats = gen.run(one, {}, [&](const Request&, const Completion& c) {
      if (round == 1) on_smoke(c);
    });
    if (stats.calibration_seconds > 0) {
      spdlog::info("speculation: step costs measured for a batch of {} in {:.2f} s",
                   g.calibration_requests, stats.calibration_seconds);
      if (groups.world().rank() == 0) store_step_costs(options.step_costs, speculation->cost());
    }
  }
}

}  // namespace

std::string warm_up(model::engine::Engine& engine, const dist::Groups& groups,
                    const model::Tokenizer& tokenizer, const TokenizedPrompts& tokens,
                    std::size_t prompts, const RunnerOptions& options) {
  std::string smoke;
  warm_up_rounds(engine, groups, tokens.prefix.empty() ? tokens.prompts.at(0) : tokens.prefix,
                 tokens.prompts.at(0), tokens.prefix, options.max_new_tokens, prompts, options,
                 [&](const Completion& c) {
                   std::vector<std::int32_t> text_ids;  // specials skipped, as in the results
                   for (std::int32_t id : c.tokens)
                     if (!tokenizer.is_special(id)) text_ids.push_back(id);
                   smoke = tokenizer.decode(text_ids);
                 });
  return smoke;
}

void warm_up_throughput(model::engine::Engine& engine, const dist::Groups& groups,
                        const std::vector<std::int32_t>& first_prompt, std::size_t prompts,
                        const RunnerOptions& options) {
  warm_up_rounds(engine, groups, first_prompt, first_prompt, {}, options.max_new_tokens, prompts,
                 options, [](const Completion&) {});
}

ThroughputOutcome run_throughput(model::engine::Engine& engine, const dist::Groups& groups,
                                 const std::vector<std::vector<std::int32_t>>& prompts,
                                 const std::vector<std::size_t>& output_lens,
                                 const RunnerOptions& options) {
  std::vector<std::size_t> sizes;
  for (const auto& p : prompts) sizes.push_back(p.size());
  const int group_count = dp_groups(groups);
  const std::vector<int> owner = assign_to_dp_groups(sizes, group_count, options.balance_by_tokens);
  const int mine = dp_group_of(groups);
  std::vector<Request> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (owner[i] != mine) continue;
    Request r;
    r.id = i;
    r.prompt = prompts[i];
    r.max_new_tokens = output_lens.at(i);
    r.sampling = options.sampling;
    requests.push_back(std::move(r));
  }
  Generator gen(engine, groups, options.generator);
  gen.validate(requests);
  // One row per finished request of this DP group: id, input, output, TTFT, E2E latency.
  constexpr std::size_t kRow = 5;
  std::vector<double> rows;
  ProgressReporter progress(prompts.size(), options.progress_bar, groups.world().rank() == 0,
                            "requests");
  const auto t0 = Clock::now();
  const model::engine::GeneratorStats stats = gen.run(
      requests, {},
      [&](const Request& r, const Completion& c) {
        rows.insert(rows.end(), {static_cast<double>(r.id), static_cast<double>(r.prompt.size()),
                                 static_cast<double>(c.completion_tokens), c.first_token_s,
                                 c.finished_s});
      },
      [&](const Generator::Progress& p) { progress.update(p); });
  ThroughputOutcome out;
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.dp_groups = group_count;
  out.steps = stats.steps;
  // Every rank of a DP group holds its group's counts: summed over one rank of each group (the
  // attn-dp group), rank 0's sum counts every group once.
  out.speculative = sum_over_dp_groups(groups, speculative_metrics(stats));
  const std::span<const double> contribution =
      group_leader(groups) ? std::span<const double>(rows) : std::span<const double>();
  const auto all = dist::gatherv(groups.world(), contribution, 0);
  for (std::size_t i = 0; i + kRow <= all.data.size(); i += kRow) {
    ThroughputRequest r;
    r.id = static_cast<std::size_t>(all.data[i]);
    r.dp_group = owner.at(r.id);
    r.input_tokens = static_cast<std::uint64_t>(all.data[i + 1]);
    r.output_tokens = static_cast<std::uint64_t>(all.data[i + 2]);
    r.ttft_s = all.data[i + 3];
    r.latency_s = all.data[i + 4];
    out.requests.push_back(r);
  }
  std::sort(out.requests.begin(), out.requests.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace k3::eval
