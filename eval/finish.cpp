#include "eval/finish.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/text_file.h"
#include "eval/lm_eval.h"
#include "eval/log_scan.h"
#include "eval/metrics.h"
#include "eval/report.h"

namespace k3::eval {

namespace fs = std::filesystem;

namespace {

// The rank logs under <artifacts>/logs, scanned in name order: the count of errors, with the
// first offending lines printed.
std::size_t scan_rank_logs(const fs::path& artifacts, std::FILE* out) {
  std::vector<fs::path> logs;
  if (fs::exists(artifacts / "logs")) {
    for (const auto& entry : fs::directory_iterator(artifacts / "logs")) {
      logs.push_back(entry.path());
    }
  }
  std::sort(logs.begin(), logs.end());
  const auto scans = scan_logs(logs);
  const std::size_t errors = count_log_errors(scans);
  for (const auto& s : scans) {
    for (const auto& f : s.first) {
      std::fprintf(out, "log %s:%zu: %s\n", s.path.string().c_str(), f.line, f.text.c_str());
    }
  }
  std::fprintf(out, "Log scan: %zu error(s) in %zu rank log(s)\n", errors, logs.size());
  return errors;
}

void print_status(std::FILE* out, RunStatus status) {
  std::fprintf(out, "Status: %s\n", std::string(status_word(status)).c_str());
  std::fflush(out);
}

}  // namespace

int finish_evaluation(const RunContext& context, const std::vector<QuestionResult>& resumed,
                      const std::vector<QuestionResult>& this_part, double latency_s,
                      const std::optional<Baseline>& baseline) {
  std::FILE* out = context.out;
  std::vector<QuestionResult> all = resumed;
  all.insert(all.end(), this_part.begin(), this_part.end());
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  Metrics metrics = compute_metrics(all, latency_s);
  const bool was_resumed = !resumed.empty();
  const std::uint64_t all_tokens = metrics.completion_tokens;
  if (was_resumed) metrics.completion_tokens = compute_metrics(this_part, latency_s).completion_tokens;
  std::fputs(format_metric_lines(metrics).c_str(), out);
  if (was_resumed) {
    std::fprintf(
        out,
        "Resumed: %zu of %zu questions were finished before this part; Latency and Output "
        "throughput cover this part's %zu questions (%llu tokens); all %zu questions: %llu "
        "completion tokens\n",
        resumed.size(), all.size(), this_part.size(),
        static_cast<unsigned long long>(metrics.completion_tokens), all.size(),
        static_cast<unsigned long long>(all_tokens));
  }
  if (context.speculative) std::fputs(format_speculative_lines(*context.speculative).c_str(), out);
  if (context.traffic) std::fputs(format_traffic_lines(*context.traffic).c_str(), out);
  std::optional<Verdict> verdict;
  if (baseline) {
    verdict = judge(*baseline, metrics, all);
    std::fprintf(out, "Baseline: %.3f (%s), threshold %.3f: %s\n", verdict->baseline_accuracy,
                 baseline->source.c_str(), verdict->threshold,
                 verdict->pass ? "PASS" : "REGRESSION");
    if (!baseline->golden.empty()) {
      std::fprintf(out, "Golden tokens: %zu of %zu completions identical\n",
                   baseline->golden.size() - verdict->golden_mismatches.size(),
                   baseline->golden.size());
    }
    for (const auto& reason : verdict->reasons) std::fprintf(out, "  %s\n", reason.c_str());
  }
  const fs::path& artifacts = context.artifacts_dir;
  const std::size_t log_errors = artifacts.empty() ? 0 : scan_rank_logs(artifacts, out);
  const RunStatus status = log_errors > 0 ? RunStatus::kError : status_of(verdict);
  if (!artifacts.empty()) {
    nlohmann::json summary = summary_json(metrics, verdict, log_errors, context.config);
    if (was_resumed) {
      summary["resume"] = {{"finished_before", resumed.size()},
                           {"this_part",
                            {{"questions", this_part.size()},
                             {"completion_tokens", metrics.completion_tokens},
                             {"latency_s", metrics.latency_s}}},
                           {"all", {{"questions", all.size()}, {"completion_tokens", all_tokens}}}};
    }
    if (context.speculative) summary["speculative"] = speculative_json(*context.speculative);
    if (context.traffic) summary["collectives"] = traffic_json(*context.traffic);
    write_summary(artifacts / "summary.json", summary);
    write_file_atomically(artifacts / "results.json",
                          lm_eval_results(all, context.config)
                                  .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                              "\n");
    write_status(artifacts / "status", status);
  }
  if (!context.history.empty()) {
    RunRecord rec = context.record;
    rec.kind = "eval";
    rec.verdict = std::string(status_word(status));
    rec.num_questions = metrics.questions;
    rec.completion_tokens = metrics.completion_tokens;
    rec.log_errors = log_errors;
    rec.resumed_after = resumed.size();
    rec.accuracy = metrics.accuracy();
    rec.invalid = metrics.invalid_rate();
    rec.latency_s = metrics.latency_s;
    rec.output_throughput = metrics.output_throughput();
    rec.speculative = context.speculative;
    if (verdict) {
      rec.baseline_accuracy = verdict->baseline_accuracy;
      rec.threshold = verdict->threshold;
    }
    rec.results = std::move(all);
    const std::size_t n = append_history(context.history, rec);
    std::fprintf(out, "History: run %zu appended to %s\n", n, context.history.string().c_str());
  }
  print_status(out, status);
  return exit_code_of(status);
}

int finish_throughput(const RunContext& context, const ThroughputOutcome& outcome,
                      const std::optional<ThroughputBaseline>& baseline) {
  std::FILE* out = context.out;
  auto metrics = compute_throughput_metrics(outcome.requests, outcome.seconds, outcome.dp_groups);
  metrics.speculative = context.speculative;
  std::fputs(format_throughput_block(metrics).c_str(), out);
  if (context.traffic) std::fputs(format_traffic_lines(*context.traffic).c_str(), out);
  std::optional<ThroughputVerdict> verdict;
  if (baseline) {
    verdict = judge_throughput(*baseline, metrics.output_throughput());
    std::fprintf(out, "Baseline: %.3f token/s (%s), threshold %.3f token/s: %s\n",
                 verdict->baseline, baseline->source.c_str(), verdict->threshold,
                 verdict->pass ? "PASS" : "REGRESSION");
    if (!verdict->pass) std::fprintf(out, "  %s\n", verdict->reason.c_str());
  }
  const RunStatus status = verdict && !verdict->pass ? RunStatus::kRegression : RunStatus::kOk;
  const fs::path& artifacts = context.artifacts_dir;
  if (!artifacts.empty()) {
    std::string lines;
    for (const auto& r : outcome.requests) lines += to_json(r).dump() + "\n";
    write_file_atomically(artifacts / "requests.jsonl", lines);
    auto summary = throughput_summary_json(metrics, verdict ? &*verdict : nullptr, context.config);
    if (context.traffic) summary["collectives"] = traffic_json(*context.traffic);
    write_summary(artifacts / "summary.json", summary);
    write_status(artifacts / "status", status);
  }
  if (!context.history.empty()) {
    RunRecord rec = context.record;
    rec.kind = "throughput";
    rec.extractor.clear();  // no answers are extracted
    rec.verdict = std::string(status_word(status));
    rec.num_questions = metrics.requests;
    rec.input_tokens = metrics.input_tokens;
    rec.completion_tokens = metrics.output_tokens;
    rec.accuracy = rec.invalid = std::numeric_limits<double>::quiet_NaN();
    rec.latency_s = metrics.duration_s;
    rec.output_throughput = metrics.output_throughput();
    rec.speculative = context.speculative;
    if (verdict) {
      rec.baseline_output_throughput = verdict->baseline;
      rec.throughput_threshold = verdict->threshold;
    }
    const std::size_t n = append_history(context.history, rec);
    std::fprintf(out, "History: run %zu appended to %s\n", n, context.history.string().c_str());
  }
  print_status(out, status);
  return exit_code_of(status);
}

}  // namespace k3::eval
