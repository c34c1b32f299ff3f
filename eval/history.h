// eval history: what k3report reads out of the HDF5 run history that k3eval appends to
// (eval/history_file.h): series, trends, run-to-run comparisons and the latest run's regression
// check (eval/chart.h draws a series).
//
// A series is the runs of one (checkpoint, configuration name) pair, in run-number order. Run
// numbers are append order, and k3eval stamps and appends each run as it ends, so that is time
// order. Every function here is pure over a History in memory except load_history; messages
// name the history file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/baseline.h"
#include "eval/history_file.h"

namespace k3::eval {

// A history as read from its file: runs[n] is /runs/<n>.
struct History {
  std::filesystem::path path;  // for messages
  std::vector<RunRecord> runs;

  // runs[n]; InputError "<file>: no run <n>; the history holds runs 0 to <last>".
  const RunRecord& run(std::size_t n) const;
};

// read_history() that also refuses a history without runs: InputError
// "<file>: the history holds no runs".
History load_history(const std::filesystem::path& path);

// Which runs a command looks at. An unset field matches every run.
struct SeriesFilter {
  std::optional<std::string> checkpoint;   // as recorded; "dir/" and "./dir" match "dir"
  std::optional<std::string> config_name;  // "" selects runs made without a configuration
};

// Evaluations and offline throughput runs (RunRecord::kind) form separate series: each is
// compared with its own kind.
struct Series {
  std::string checkpoint;
  std::string config_name;
  std::vector<std::size_t> runs;  // run numbers, ascending
  std::string kind = "eval";

  // "checkpoint <path>, configuration <name>" ("(none)" for an empty name), plus ", offline
  // throughput runs" for that kind.
  std::string name() const;
};

// Every series with a run matching `filter`, in the order of their first runs. InputError
// naming the file, the filter and the series the history holds when nothing matches.
std::vector<Series> select_series(const History& history, const SeriesFilter& filter);

// The series of the latest (highest-numbered) run that matches `filter`; the same error.
Series latest_series(const History& history, const SeriesFilter& filter);

// ---------------------------------------------------------------- trend

struct TrendRow {
  std::size_t run = 0;
  const RunRecord* record = nullptr;  // into the History
  // Against the previous run of the series; NaN for its first run (or a NaN metric).
  double accuracy_change = 0;    // absolute (accuracy points as a fraction)
  double invalid_change = 0;     // absolute
  double throughput_change = 0;  // relative: 0.05 is +5 %
  double latency_change = 0;     // relative
};

// The series' runs with their changes; `last` > 0 keeps only the last `last` rows (their
// changes still refer to the run before each, shown or not).
std::vector<TrendRow> trend(const History& history, const Series& series, std::size_t last = 0);

// A compact table: a heading line naming the series, a column header, one line per row. When a
// row's run recorded speculative decoding, two columns before the verdict give each run's accept
// length and accept rate ("-" for runs without).
std::string format_trend(const Series& series, const std::vector<TrendRow>& rows);

// ---------------------------------------------------------------- compare

struct AnswerChange {
  std::size_t id = 0;
  std::string old_prediction, new_prediction;  // "invalid" for an invalid answer
  bool old_correct = false, new_correct = false;
  bool same_tokens = false;
  std::size_t first_token_difference = 0;      // when !same_tokens: the first differing position
  std::size_t old_tokens = 0, new_tokens = 0;  // completion lengths
};

struct Comparison {
  std::size_t run_a = 0, run_b = 0;
  double accuracy_a = 0, accuracy_b = 0;  // the runs' recorded accuracies (all their questions)
  std::size_t compared = 0;               // questions present in both runs
  std::size_t same_tokens = 0;            // of those, with identical completion tokens
  std::size_t answers_changed = 0;        // of those, with a different prediction
  std::size_t became_correct = 0, became_incorrect = 0;
  std::vector<std::size_t> only_a, only_b;  // question ids present in one run only, ascending
  // Every compared question whose prediction, correctness or tokens changed, by id.
  std::vector<AnswerChange> changes;
};

// Run `a` (the older) against run `b`, question by question (matched by question id).
// InputError for an unknown run number, a run holding a question id twice, or an offline
// throughput run (it has no questions: trend shows its figures).
Comparison compare_runs(const History& history, std::size_t a, std::size_t b);

// One line per change ("id 3: 540 -> 541, correct -> incorrect, tokens differ from position
// 12 (41 -> 38 tokens)"), then the accuracy delta and the totals. Notes when the runs are of
// different series.
std::string format_comparison(const History& history, const Comparison& comparison);

// ---------------------------------------------------------------- check

struct CheckResult {
  bool regressed = false;
  std::size_t run = 0;  // the run judged
  std::string line;     // one verdict line, "check: run 5 (...) ok: ..." or "... REGRESSION: ..."
};

// Judges the latest run matching `filter`. It regressed when its verdict is anything but "ok"
// ("regression", "error"). An offline throughput run is judged the same way on its output
// throughput (token/s): its throughput baseline when it had one, else the previous throughput
// run of its series with the tolerance. For an evaluation: verdict not "ok"
// ("regression", "error"). With an "ok" verdict and a baseline recorded, the baseline verdict
// stands. Without a baseline, its accuracy is compared with the previous run of its series:
// absolute tolerance t fails below previous - t, relative tolerance r (SGLang's x 0.99) fails
// below previous * r. A NaN accuracy (no questions) with no baseline is a regression; no
// previous run, or a previous run without an accuracy, is not.
CheckResult check_latest(const History& history, const SeriesFilter& filter,
                         const Tolerance& tolerance);

}  // namespace k3::eval
