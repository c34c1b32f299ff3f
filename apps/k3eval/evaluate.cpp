#include "apps/k3eval/evaluate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "apps/k3eval/model_loading.h"
#include "common/json.h"
#include "common/text_file.h"
#include "dist/collectives.h"
#include "dist/env.h"
#include "dist/logging.h"
#include "dist/traffic.h"
#include "dist/watchdog.h"
#include "eval/baseline.h"
#include "eval/dataset.h"
#include "eval/finish.h"
#include "eval/history_file.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "eval/score.h"
#include "eval/speculative.h"
#include "eval/throughput.h"
#include "model/engine/serving.h"

namespace k3::apps {

namespace fs = std::filesystem;

namespace {

// The engine and drafter options of k3eval's flags (running requests: --parallel capped by
// --max-running-requests).
model::engine::ServingOptions serving_options(const K3evalOptions& o) {
  model::engine::ServingOptions s;
  s.model_path = o.model_path;
  s.exact = o.fp32_activations;
  s.repack_weights = !o.disable_weight_repack;
  s.trace_layers = !o.layers_out.empty();  // only k3eval logits takes --layers-out
  s.running_requests = std::min(o.max_running_requests, o.parallel);
  s.slots = o.max_mamba_cache_size;
  s.context_length = static_cast<std::size_t>(o.context_length);
  s.speculative = !o.speculative_algorithm.empty();
  s.speculative_block_size = o.speculative_block_size;
  s.speculation.fixed_k = o.speculative_num_draft_tokens;
  s.speculation.adaptive =
      o.speculative_num_draft_tokens < 0 && o.speculative_adaptive.value_or(true);
  return s;
}

model::engine::ServingModel serving_model(const LoadedModel& model) {
  model::engine::ServingModel m;
  m.config = &model.config();
  m.weights = &model.weights();
  if (model.draft) {
    m.draft_config = &model.draft.checkpoint().config();
    m.draft_weights = &model.draft.result->weights;
    m.draft_root = model.draft.checkpoint().root();
  }
  return m;
}

using model::engine::Serving;

model::engine::Serving build_serving(dist::Runtime& runtime, const dist::Groups& groups,
                                     const LoadedModel& model,
                                     const model::engine::ServingOptions& options) {
  return model::engine::build_serving(runtime, groups, serving_model(model), options);
}

nlohmann::json config_json(const K3evalOptions& o, const dist::Layout& layout) {
  nlohmann::json config = {{"command_line", o.command_line},
                           {"config_file", o.config_file},
                           {"model_path", o.model_path},
                           {"load_format", o.load_format},
                           {"layout", layout.summary()},
                           {"world", layout.world()},
                           {"data_path", o.data_path},
                           {"num_shots", o.num_shots},
                           {"num_questions", o.num_questions},
                           {"exclude_shot_questions", o.exclude_shot_questions},
                           {"max_new_tokens", o.max_new_tokens},
                           {"temperature", o.temperature},
                           {"seed", o.seed},
                           {"parallel", o.parallel},
                           {"max_running_requests", o.max_running_requests},
                           {"chunked_prefill_size", o.chunked_prefill_size},
                           {"max_mamba_cache_size", o.max_mamba_cache_size},
                           {"context_length", o.context_length},
                           {"prefix_cache", !o.disable_prefix_cache},
                           {"fp32_activations", o.fp32_activations},
                           {"answer_extractor", o.answer_extractor},
                           {"dp_balance", o.dp_balance},
                           {"baseline", o.baseline},
                           {"resume", o.resume}};
  // Only when on, so a configuration without speculation reads as it always has.
  if (!o.speculative_algorithm.empty()) {
    config["speculative_algorithm"] = o.speculative_algorithm;
    config["speculative_block_size"] = o.speculative_block_size;
    config["speculative_num_draft_tokens"] = o.speculative_num_draft_tokens;
    config["speculative_adaptive"] =
        o.speculative_num_draft_tokens < 0 && o.speculative_adaptive.value_or(true);
  }
  return config;
}

// A file's or a directory's files' identity for a cache key: sizes and modification times.
nlohmann::json stamp(const fs::path& path) {
  nlohmann::json out = nlohmann::json::array();
  std::error_code ec;
  auto add = [&](const fs::path& p) {
    const auto size = fs::file_size(p, ec);
    const auto time = fs::last_write_time(p, ec).time_since_epoch().count();
    out.push_back({p.filename().string(), ec ? 0 : size, ec ? 0 : time});
  };
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) add(f);
  } else if (!path.empty()) {
    add(path);
  }
  return out;
}

// Where adaptive speculation keeps its measured step costs (<artifacts>/speculation-costs.json)
// and under which key (eval/step_costs.h): the run's configuration (`config`: the command line
// and every parsed option and the layout), the host's machine class, and the binary's, the
// model's and the draft's files. Only rank 0's key is compared.
eval::StepCostsCache step_costs_cache(const K3evalOptions& o, const nlohmann::json& config) {
  eval::StepCostsCache cache;
  if (o.artifacts_dir.empty() || o.speculative_algorithm.empty()) return cache;
  nlohmann::json key = config;
  key["machine"] = eval::machine_class();
  key["k3eval"] = stamp("/proc/self/exe");
  key["model"] = stamp(o.model_path);
  key["draft"] = stamp(o.draft_model_path);
  cache.file = fs::path(o.artifacts_dir) / "speculation-costs.json";
  cache.key = key.dump();
  cache.recalibrate = o.speculative_recalibrate;
  return cache;
}

eval::RunnerOptions runner_options(const K3evalOptions& o, const Serving& serving,
                                  const nlohmann::json& config) {
  eval::RunnerOptions r;
  r.step_costs = step_costs_cache(o, config);
  r.generator.drafter = serving.drafter.get();
  r.generator.speculation = serving.speculation.get();
  r.generator.resident_prefixes = serving.resident_prefixes.get();
  r.max_new_tokens = static_cast<std::size_t>(o.max_new_tokens);
  r.sampling = {static_cast<float>(o.temperature), o.seed};
  r.extractor = eval::parse_extractor(o.answer_extractor);
  r.balance_by_tokens = o.dp_balance == "tokens";
  r.prefix_caching = !o.disable_prefix_cache;
  r.generator.max_running_requests = std::min(o.max_running_requests, o.parallel);
  r.generator.chunked_prefill_size = static_cast<std::size_t>(o.chunked_prefill_size);
  r.generator.prefix_caching = !o.disable_prefix_cache;
  r.progress_bar = o.progress == "bar" || (o.progress == "auto" && dist::stdout_is_terminal());
  return r;
}

// Where the run's records go (the history: --history, else <artifacts>/history.h5, else none)
// and the history record's fields the job knows, stamped now.
eval::RunContext run_context(const K3evalOptions& o, const dist::Groups& groups,
                             nlohmann::json config) {
  eval::RunContext context;
  context.artifacts_dir = o.artifacts_dir;
  if (!o.history.empty()) {
    context.history = o.history;
  } else if (!o.artifacts_dir.empty()) {
    context.history = fs::path(o.artifacts_dir) / "history.h5";
  }
  eval::RunRecord& rec = context.record;
  rec.timestamp = eval::utc_timestamp(std::chrono::system_clock::now());
  rec.version = K3_VERSION;
  rec.checkpoint = o.model_path;
  rec.config_name = o.config_file.empty() ? "" : fs::path(o.config_file).stem().string();
  rec.layout = groups.layout().label();
  rec.extractor = o.answer_extractor;
  rec.num_shots = static_cast<std::uint64_t>(o.num_shots);
  context.config = std::move(config);
  return context;
}

// What defines a run's results, as config.json names them, with the option that sets each. A
// --resume that changed one would mix two configurations' rows in one questions.jsonl. (The
// layout is not among them: --fp32-activations results do not depend on it, and a resumed job
// may have another allocation.)
constexpr std::pair<const char*, const char*> kResultDefining[] = {
    {"model_path", "--model-path"},
    {"load_format", "--load-format"},
    {"data_path", "--data-path"},
    {"num_shots", "--num-shots"},
    {"num_questions", "--num-questions"},
    {"exclude_shot_questions", "--exclude-shot-questions"},
    {"max_new_tokens", "--max-new-tokens"},
    {"temperature", "--temperature"},
    {"seed", "--seed"},
    {"answer_extractor", "--answer-extractor"},
    {"fp32_activations", "--fp32-activations"},
};

bool same_setting(const std::string& key, const nlohmann::json& a, const nlohmann::json& b) {
  if ((key == "model_path" || key == "data_path") && a.is_string() && b.is_string()) {
    std::error_code ec1, ec2;
    const auto pa = fs::weakly_canonical(a.get<std::string>(), ec1);
    const auto pb = fs::weakly_canonical(b.get<std::string>(), ec2);
    if (!ec1 && !ec2) return pa == pb;
  }
  return a == b;
}

// --resume continues only the run its directory holds: every result-defining option as that
// run's config.json recorded it. UsageError (exit 2) naming each option that differs.
void check_resume_matches(const fs::path& recorded, const nlohmann::json& now) {
  if (!fs::exists(recorded)) {
    throw UsageError(recorded.string() +
                     " is missing: --resume cannot tell which options the run in this directory "
                     "used; start a new run in another --artifacts-dir");
  }
  const nlohmann::json before =
      parse_json(read_text_file(recorded, "the resumed run's configuration"),
                 {recorded.string(), "the config.json k3eval writes"});
  std::vector<std::string> changed;
  for (const auto& [key, option] : kResultDefining) {
    if (!before.is_object() || !before.contains(key)) {
      changed.push_back(fmt::format("{}: not recorded in {}", option, recorded.string()));
    } else if (!same_setting(key, before[key], now[key])) {
      changed.push_back(fmt::format("{}: {} in the run being resumed, {} now", option,
                                    before[key].dump(), now[key].dump()));
    }
  }
  if (changed.empty()) return;
  std::string text = "--resume would mix the results of two configurations in " +
                     recorded.parent_path().string() + "; these options differ:";
  for (const std::string& c : changed) text += "\n  " + c;
  throw UsageError(text);
}

// What the reports say of speculative decoding: the configured algorithm, block size and policy
// with `counts` (every DP group's summed), or nothing when no decode row ran beside a drafter.
std::optional<eval::SpeculativeRun> speculative_run(const K3evalOptions& o, const Serving& serving,
                                                    const eval::SpeculativeMetrics& counts) {
  const bool decoded_beside_drafter =
      std::any_of(counts.draft_lengths.begin(), counts.draft_lengths.end(),
                  [](std::uint64_t rows) { return rows > 0; });
  if (!counts.ran() && !decoded_beside_drafter) return std::nullopt;
  const std::string policy =
      serving.speculation && serving.speculation->adaptive() ? "goodput" : "fixed";
  return eval::SpeculativeRun{o.speculative_algorithm,
                              static_cast<std::uint64_t>(serving.block_size), counts, policy};
}

// Collective: the generation stage's time in collectives per kind of traffic, every rank's
// counts since `since`; rank 0 gets the figures, the other ranks nothing.
std::optional<eval::TrafficRun> traffic_run(const dist::Groups& groups,
                                            const dist::TrafficCounts& since, double wall_s,
                                            std::uint64_t steps) {
  const dist::TrafficReport report =
      dist::gather_traffic(groups.world(), since, groups.layout().nodes());
  if (groups.world().rank() != 0) return std::nullopt;
  eval::TrafficRun run{report.ranks, report.hosts, wall_s, steps, {}};
  for (const dist::TrafficRow& row : report.rows)
    run.kinds.push_back({row.kind, row.mean_s, row.max_s, row.bytes, row.calls_per_rank});
  return run;
}

// Every id in order on every rank (rank 0 read them).
std::vector<std::size_t> bcast_ids(const dist::Groups& groups, std::vector<std::size_t> ids) {
  std::uint64_t n = ids.size();
  dist::bcast(groups.world(), std::span<std::uint64_t>(&n, 1), 0);
  std::vector<std::uint64_t> wire(ids.begin(), ids.end());
  wire.resize(n);
  dist::bcast(groups.world(), std::span<std::uint64_t>(wire), 0);
  return {wire.begin(), wire.end()};
}

// Everything an evaluation reads before the model: the data and its prompts, the baseline and,
// with --resume, the questions already finished (every rank gets their ids).
struct EvaluationInputs {
  eval::PromptSet prompts;
  std::optional<eval::Baseline> baseline;
  eval::ResultsFile resumed;
  std::vector<std::size_t> done;
};

EvaluationInputs read_inputs(dist::Runtime& runtime, const dist::Groups& groups,
                             const K3evalOptions& o) {
  const bool root = runtime.rank() == 0;
  const fs::path questions_file = fs::path(o.artifacts_dir) / "questions.jsonl";
  EvaluationInputs in;
  runtime.collectively([&] {
    const std::vector<eval::Question> data = eval::read_gsm8k(o.data_path);
    eval::PromptOptions po;
    po.num_shots = static_cast<std::size_t>(o.num_shots);
    po.num_questions = static_cast<std::size_t>(o.num_questions);
    po.exclude_shot_questions = o.exclude_shot_questions;
    in.prompts = eval::build_prompts(data, po, o.data_path);
    std::vector<std::size_t> ids;
    for (const auto& p : in.prompts.prompts) ids.push_back(p.id);
    if (!o.baseline.empty()) {
      in.baseline = eval::read_baseline(o.baseline);
      eval::check_baseline_fits(*in.baseline, ids);
    }
    if (root && o.resume && fs::exists(questions_file)) {
      check_resume_matches(fs::path(o.artifacts_dir) / "config.json",
                           config_json(o, groups.layout()));
      in.resumed = eval::read_results(questions_file);
      for (const auto& r : in.resumed.results) {
        if (std::find(ids.begin(), ids.end(), r.id) == ids.end()) {
          throw InputError(questions_file.string() + ": question " + std::to_string(r.id) +
                           " is not one this configuration evaluates (--resume needs the same "
                           "--data-path, --num-shots, --num-questions)");
        }
      }
    }
  });
  if (root && in.resumed.warning) spdlog::warn("{}", *in.resumed.warning);
  for (const auto& r : in.resumed.results) in.done.push_back(r.id);
  in.done = bcast_ids(groups, in.done);
  if (o.resume)
    spdlog::info("--resume: {} of {} questions already finished", in.done.size(),
                 in.prompts.prompts.size());
  return in;
}

// Collective: the generation's token counts of every DP group summed, logged, and the
// speculative counts among them. Each DP group counts its own tokens and speculative rounds, the
// same on all its ranks: the job's totals add one rank of every DP group, which is what the
// attn-dp group holds (rank 0's sums are the group leaders', attn-tp rank 0 of each group).
eval::SpeculativeMetrics log_generation(const dist::Groups& groups,
                                        const model::engine::GeneratorStats& stats) {
  std::array<std::uint64_t, 4> totals = {stats.prefill_tokens, stats.cached_tokens,
                                         stats.decode_tokens, stats.generated_tokens};
  dist::allreduce(groups.attn_dp(), std::span<std::uint64_t>(totals), dist::ReduceOp::kSum);
  const eval::SpeculativeMetrics speculative =
      eval::sum_over_dp_groups(groups, eval::speculative_metrics(stats));
  spdlog::info(
      "generation: {} steps, {} prompt tokens computed, {} reused from the prefix cache, {} "
      "tokens generated ({} in decode steps, the rest each request's first), over {} DP "
      "group(s){}",
      stats.steps, totals[0], totals[1], totals[3], totals[2], groups.layout().dp(),
      eval::format_accept_suffix(speculative));
  return speculative;
}

// The faults the lost-host tests inject after the warm-up: --debug-kill-rank, --debug-stop-rank.
void inject_faults(const K3evalOptions& o, int rank) {
  if (o.debug_kill_rank && *o.debug_kill_rank == rank) {
    spdlog::warn("injected SIGKILL (--debug-kill-rank {})", *o.debug_kill_rank);
    std::raise(SIGKILL);
  }
  if (o.debug_stop_rank && *o.debug_stop_rank == rank) {
    spdlog::warn("injected SIGSTOP (--debug-stop-rank {})", *o.debug_stop_rank);
    std::raise(SIGSTOP);
  }
}

}  // namespace

int run_evaluation(dist::Runtime& runtime, const dist::Groups& groups, const K3evalOptions& o) {
  const bool root = runtime.rank() == 0;
  const fs::path artifacts = o.artifacts_dir;
  const fs::path questions_file = artifacts / "questions.jsonl";
  runtime.collectively([&] {
    if (o.model_path.empty())
      throw UsageError("the evaluation needs --model-path (see k3eval --help)");
  });

  const EvaluationInputs inputs = read_inputs(runtime, groups, o);
  const eval::PromptSet& prompts = inputs.prompts;
  const eval::ResultsFile& resumed = inputs.resumed;
  const std::optional<eval::Baseline>& baseline = inputs.baseline;
  const std::vector<std::size_t>& done = inputs.done;

  if (root && !artifacts.empty()) {
    fs::create_directories(artifacts);
    std::ofstream(artifacts / "command.txt") << o.command_line << "\n";
    nlohmann::json config = config_json(o, groups.layout());
    if (o.resume) config["resumed_after"] = done.size();  // questions finished before this part
    write_file_atomically(artifacts / "config.json", config.dump(2) + "\n");
  }

  dist::set_stage("pre-flight and loading");
  LoadedModel model = load_model(runtime, groups, o);
  Serving serving = build_serving(runtime, groups, model, serving_options(o));
  const model::Tokenizer& tokenizer = serving.tokenizer;
  eval::TokenizedPrompts tokens;
  auto& engine = serving.engine;
  const eval::RunnerOptions ro = runner_options(o, serving, config_json(o, groups.layout()));
  runtime.collectively([&] {
    tokens = eval::tokenize_prompts(tokenizer, prompts);
    model::engine::Generator check(*engine, groups, ro.generator);
    if (ro.prefix_caching) check.add_prefix(tokens.prefix);  // checks the slots suffice
    eval::validate_prompts(check, prompts, tokens, ro.max_new_tokens, o.data_path);
  });
  spdlog::info("{} questions, {} shots ({} prefix tokens), {} DP group(s)", prompts.prompts.size(),
               o.num_shots, tokens.prefix.size(),
               groups.layout().group_count(dist::GroupKind::kAttnTp));

  dist::set_stage("warm-up");
  const std::string smoke = eval::warm_up(
      *engine, groups, tokenizer, tokens,
      prompts.prompts.size() - std::min(done.size(), prompts.prompts.size()), ro);
  spdlog::info("warm-up and smoke request done; smoke completion: {:?}", smoke);
  inject_faults(o, runtime.rank());

  std::optional<eval::ResultsWriter> writer;
  if (root && !artifacts.empty()) {
    writer.emplace(o.resume && fs::exists(questions_file)
                       ? eval::ResultsWriter::resume(questions_file, resumed)
                       : eval::ResultsWriter::create(questions_file));
  }
  int written = 0;
  auto on_result = [&](const eval::QuestionResult& r) {
    if (writer) writer->write(r);
    if (o.debug_abort_after > 0 && ++written == o.debug_abort_after) {
      runtime.fatal(
          "injected abort after " + std::to_string(written) + " questions (--debug-abort-after)",
          ExitCode::kInternal);
    }
  };
  dist::set_stage("GSM8K generation");
  const dist::TrafficCounts traffic_before = dist::traffic_counts();
  const eval::EvalOutcome outcome =
      eval::run_gsm8k(*engine, groups, tokenizer, prompts, tokens, done, ro, on_result);
  const std::optional<eval::TrafficRun> traffic =
      traffic_run(groups, traffic_before, outcome.latency_s, outcome.stats.steps);
  const eval::SpeculativeMetrics speculative = log_generation(groups, outcome.stats);

  dist::set_stage("reporting");
  // Every rank's log is complete before rank 0 scans them.
  dist::flush_logs();
  dist::barrier(groups.world());
  int code = 0;
  if (root) {
    eval::RunContext context = run_context(o, groups, config_json(o, groups.layout()));
    context.speculative = speculative_run(o, serving, speculative);
    context.traffic = traffic;
    code = eval::finish_evaluation(context, resumed.results, outcome.results, outcome.latency_s,
                                   baseline);
  }
  dist::bcast(groups.world(), std::span<int>(&code, 1), 0);
  return code;
}

int run_throughput_mode(dist::Runtime& runtime, const dist::Groups& groups,
                        const K3evalOptions& o) {
  runtime.collectively([&] {
    if (o.model_path.empty()) throw UsageError("--mode throughput needs --model-path");
  });
  const bool root = runtime.rank() == 0;
  const fs::path artifacts = o.artifacts_dir;
  // A verdict compares speeds of one machine class and layout: checked before loading.
  const std::string machine = eval::machine_class();
  std::optional<eval::ThroughputBaseline> baseline;
  runtime.collectively([&] {
    if (o.baseline.empty()) return;
    baseline = eval::read_throughput_baseline(o.baseline);
    eval::check_throughput_baseline_fits(*baseline, machine, groups.layout().summary());
  });
  // config.json and summary.json's "config": the evaluation's keys plus the throughput run's.
  nlohmann::json config = config_json(o, groups.layout());
  config["mode"] = "throughput";
  config["machine"] = machine;
  config["dataset_name"] = o.dataset_name;
  config["num_prompts"] = o.num_prompts;
  config["random_input_len"] = o.input_len;
  config["random_output_len"] = o.output_len;
  config["random_range_ratio"] = o.range_ratio;
  if (root && !artifacts.empty()) {
    fs::create_directories(artifacts);
    std::ofstream(artifacts / "command.txt") << o.command_line << "\n";
    write_file_atomically(artifacts / "config.json", config.dump(2) + "\n");
  }
  dist::set_stage("pre-flight and loading");
  LoadedModel model = load_model(runtime, groups, o);
  Serving serving = build_serving(runtime, groups, model, serving_options(o));
  const model::Tokenizer& tokenizer = serving.tokenizer;
  auto& engine = serving.engine;
  eval::RunnerOptions ro = runner_options(o, serving, config);
  const std::size_t count =
      static_cast<std::size_t>(o.num_prompts > 0 ? o.num_prompts : o.num_questions);
  const std::size_t output_len =
      static_cast<std::size_t>(o.output_len > 0 ? o.output_len : o.max_new_tokens);
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::size_t> output_lens;
  runtime.collectively([&] {
    // Every rank draws the same lengths and ids from --seed.
    std::mt19937_64 rng(o.seed);
    auto length = [&](std::size_t len) {  // SGLang: uniform in [max(len x ratio, 1), len]
      const auto low = std::max<std::size_t>(
          1, static_cast<std::size_t>(static_cast<double>(len) * o.range_ratio));
      return low >= len ? len : low + static_cast<std::size_t>(rng() % (len - low + 1));
    };
    if (o.dataset_name == "random") {
      // Random ids of the trained vocabulary (no specials).
      const int base = model.config().base_vocab_size();
      for (std::size_t i = 0; i < count; ++i) {
        std::vector<std::int32_t> p(length(static_cast<std::size_t>(o.input_len)));
        for (auto& t : p) t = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(base));
        prompts.push_back(std::move(p));
        output_lens.push_back(length(output_len));
      }
    } else {
      const auto data = eval::read_gsm8k(o.data_path);
      eval::PromptOptions po;
      po.num_shots = static_cast<std::size_t>(o.num_shots);
      po.num_questions = count;
      const auto set = eval::build_prompts(data, po, o.data_path);
      prompts = eval::tokenize_prompts(tokenizer, set).prompts;
      output_lens.assign(prompts.size(), output_len);
    }
    model::engine::Generator check(*engine, groups, ro.generator);
    std::vector<model::engine::Request> all(prompts.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      all[i].id = i;
      all[i].prompt = prompts[i];
      all[i].max_new_tokens = output_lens[i];
    }
    check.validate(all);
  });
  dist::set_stage("warm-up");
  eval::warm_up_throughput(*engine, groups, prompts.at(0), prompts.size(), ro);
  dist::set_stage("throughput generation");
  spdlog::info("throughput: {} {} prompts, all in flight", prompts.size(), o.dataset_name);
  const dist::TrafficCounts traffic_before = dist::traffic_counts();
  const auto out = eval::run_throughput(*engine, groups, prompts, output_lens, ro);
  const std::optional<eval::TrafficRun> traffic =
      traffic_run(groups, traffic_before, out.seconds, out.steps);
  int code = 0;
  if (root) {
    eval::RunContext context = run_context(o, groups, config);
    context.speculative = speculative_run(o, serving, out.speculative);
    context.traffic = traffic;
    code = eval::finish_throughput(context, out, baseline);
  }
  dist::bcast(groups.world(), std::span<int>(&code, 1), 0);
  return code;
}

namespace {

// The prompts of `k3eval logits`: --prompt, or every line of --prompts-file (an empty line is
// refused by its number, as a prompt of no tokens would be).
std::vector<std::string> logits_prompts(const K3evalOptions& o) {
  if (o.prompt.empty() == o.prompts_file.empty()) {
    throw UsageError("k3eval logits needs one of --prompt and --prompts-file");
  }
  if (o.prompts_file.empty()) return {o.prompt};
  for (const std::string* path : {&o.out, &o.layers_out}) {
    if (!path->empty() && path->find("{}") == std::string::npos) {
      throw UsageError("k3eval logits --prompts-file writes one file per prompt: '" + *path +
                       "' must hold {} for the prompt's index");
    }
  }
  std::ifstream in(o.prompts_file);
  if (!in) throw InputError("--prompts-file " + o.prompts_file + ": cannot be read");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      throw InputError("--prompts-file " + o.prompts_file + ":" +
                       std::to_string(prompts.size() + 1) + ": an empty line (one prompt per line)");
    }
    prompts.push_back(std::move(line));
  }
  if (prompts.empty()) throw InputError("--prompts-file " + o.prompts_file + ": no prompts");
  return prompts;
}

// `path` with its {} replaced by `index` (a path without {} is returned as it is).
std::string indexed_path(const std::string& path, std::size_t index) {
  const std::size_t at = path.find("{}");
  if (at == std::string::npos) return path;
  return path.substr(0, at) + std::to_string(index) + path.substr(at + 2);
}

}  // namespace

int run_logits(dist::Runtime& runtime, const dist::Groups& groups, const K3evalOptions& o) {
  std::vector<std::string> prompts;
  runtime.collectively([&] {
    if (o.model_path.empty() || o.out.empty()) {
      throw UsageError("k3eval logits needs --model-path, --prompt (or --prompts-file) and --out");
    }
    prompts = logits_prompts(o);
  });
  LoadedModel model = load_model(runtime, groups, o);
  model::engine::ServingOptions one = serving_options(o);
  one.running_requests = 1;
  one.slots = 1;
  one.speculative = false;
  Serving serving = build_serving(runtime, groups, model, one);
  const model::Tokenizer& tokenizer = serving.tokenizer;
  auto& engine = serving.engine;
  const std::string source = o.prompts_file.empty() ? "--prompt" : "--prompts-file " + o.prompts_file;
  std::vector<std::vector<std::int32_t>> encoded;
  runtime.collectively([&] {
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const std::string where =
          o.prompts_file.empty() ? source : source + ":" + std::to_string(i + 1);
      encoded.push_back(tokenizer.encode(prompts[i]));
      if (encoded.back().empty()) throw UsageError(where + " encodes to no tokens");
      if (encoded.back().size() > static_cast<std::size_t>(o.context_length)) {
        throw UsageError(where + " has " + std::to_string(encoded.back().size()) +
                         " tokens, more than --context-length");
      }
    }
  });
  // DP group 0 runs each prompt in one step; every other group joins with an empty batch.
  const bool runs = groups.layout().coords(runtime.rank()).dp_rank == 0;
  std::uint64_t nonfinite = 0;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    const std::vector<std::int32_t>& ids = encoded[i];
    model::engine::StepSequence s;
    s.slot = 0;
    s.tokens = ids;
    s.output = model::engine::StepSequence::Output::kAllLogits;
    engine->reset_slot(0);
    const auto result = engine->step(runs ? std::span<const model::engine::StepSequence>(&s, 1)
                                          : std::span<const model::engine::StepSequence>());
    const std::uint64_t bad =
        dist::allreduce(groups.world(), result.nonfinite_logits, dist::ReduceOp::kSum);
    nonfinite += bad;
    if (runtime.rank() != 0) continue;
    const std::string out_path = indexed_path(o.out, i);
    const auto& logits = result.logits.at(0);
    std::ofstream out(out_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) throw InputError("cannot write " + out_path);
    if (!o.layers_out.empty()) {
      const std::string layers_path = indexed_path(o.layers_out, i);
      std::ofstream layers(layers_path, std::ios::binary);
      for (const auto& layer : result.layers) {
        for (const auto* rows : {&layer.attention, &layer.ffn, &layer.stream}) {
          layers.write(reinterpret_cast<const char*>(rows->data()),
                       static_cast<std::streamsize>(rows->size() * sizeof(float)));
        }
      }
      if (!layers) throw InputError("cannot write " + layers_path);
    }
    if (encoded.size() > 1) std::printf("prompt %zu\n", i);
    std::printf("tokens (%zu):", ids.size());
    for (auto id : ids) std::printf(" %d", id);
    std::printf("\nlogits: %zu x %d float32, row-major, written to %s\n", ids.size(),
                model.config().vocab_size, out_path.c_str());
    std::printf("greedy next token: %d\n", result.next.at(0));
    if (bad)
      std::printf("warning: %llu non-finite logits\n", static_cast<unsigned long long>(bad));
    std::fflush(stdout);
  }
  return nonfinite ? 2 : 0;
}

int run_score(const K3evalOptions& o) {
  if (o.completions.empty()) throw UsageError("k3eval score needs --completions FILE");
  const auto data = eval::read_gsm8k(o.data_path);
  const auto report =
      eval::score_completions(data, o.completions, eval::parse_extractor(o.answer_extractor));
  std::printf("Scored %zu completions (%s) against %s\n", report.results.size(),
              report.format.c_str(), o.data_path.c_str());
  std::fputs(eval::format_accuracy_lines(report.metrics).c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace k3::apps
