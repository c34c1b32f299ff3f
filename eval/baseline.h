// eval::Baseline and the regression verdict.
//
// A baseline file:
//   {"accuracy": 0.95,
//    "tolerance": {"mode": "relative", "value": 0.99},
//    "golden": [{"id": 0, "token_ids": [791, 3, ...]}, ...],   (optional)
//    "num_questions": 200,                                     (optional: the run must match)
//    "benchmark": "gsm8k",                                     (optional)
//    "description": "where the numbers come from"}             (optional)
//
// relative: pass when accuracy >= accuracy_baseline * value (SGLang's NPU nightly uses x 0.99
// for GSM8K); absolute: pass when accuracy >= accuracy_baseline - value (SGLang's GPU tests
// hard-code "0.95 with 0.01 tolerable fluctuation"). The comparison is done in doubles the way
// the Python tests do it. Golden completions pin the exact greedy tokens of chosen questions:
// any difference is a regression of the pipeline even when accuracy holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "eval/results.h"
#include "common/error.h"

namespace k3::eval {

struct Tolerance {
  enum class Mode { kRelative, kAbsolute };
  Mode mode = Mode::kRelative;
  double value = 0.99;
};

struct GoldenCompletion {
  std::size_t id = 0;
  std::vector<std::int32_t> token_ids;
};

struct Baseline {
  double accuracy = 0;
  Tolerance tolerance;
  std::vector<GoldenCompletion> golden;
  std::optional<std::size_t> num_questions;  // the run it was measured on, when recorded
  std::string description;
  std::string source;  // the file it was read from, for messages

  double threshold() const;  // the lowest passing accuracy
};

// Strict: unknown keys, wrong types and values out of range ([0, 1] for accuracy and an
// absolute tolerance, (0, 1] for a relative one) are InputErrors naming the file and the key.
// A null accuracy (a placeholder not yet measured) is one too: such a run cannot regress.
Baseline read_baseline(const std::filesystem::path& path);

// Before the run: UsageError naming the baseline when it was measured on another number of
// questions, or when golden ids are not among the ids the run will evaluate (accuracies over
// different question sets are not comparable).
void check_baseline_fits(const Baseline& baseline, std::span<const std::size_t> evaluated_ids);

struct GoldenMismatch {
  std::size_t id = 0;
  std::size_t position = 0;  // first differing token (or the shorter length)
  std::size_t expected_tokens = 0;
  std::size_t actual_tokens = 0;
};

struct Verdict {
  bool pass = true;
  double accuracy = 0;
  double baseline_accuracy = 0;
  double threshold = 0;
  std::vector<GoldenMismatch> golden_mismatches;
  std::vector<std::string> reasons;  // one sentence per failed check; empty when passing

  ExitCode exit_code() const { return pass ? ExitCode::kOk : ExitCode::kRegression; }
};

// InputError naming the baseline when a golden id has no result (check_baseline_fits catches
// that before the run).
Verdict judge(const Baseline& baseline, const Metrics& metrics,
              std::span<const QuestionResult> results);

// ---------------------------------------------------------------- throughput
//
// A throughput baseline (k3eval --mode throughput --baseline FILE):
//   {"benchmark": "throughput",
//    "output_throughput": 75.3,                                token/s, > 0
//    "tolerance": {"mode": "relative", "value": 0.9},          or absolute, in token/s
//    "machine": "<CPU model> (<n> logical CPUs)",              machine_class() where measured
//    "layout": "world=8 tp=8 ...",                             (optional: the run must match)
//    "description": "where the number comes from"}             (optional)
// relative: pass when output throughput >= baseline * value; absolute: >= baseline - value.
// Speeds are only comparable on one machine class and layout, so a run elsewhere is refused.
struct ThroughputBaseline {
  double output_throughput = 0;
  Tolerance tolerance;
  std::string machine;
  std::string layout;  // "": any
  std::string description;
  std::string source;

  double threshold() const;
};

// Strict, as read_baseline; an accuracy baseline is refused with a message saying so.
ThroughputBaseline read_throughput_baseline(const std::filesystem::path& path);

// Before the run: UsageError naming the baseline when it was measured on another machine class
// or layout than `machine` / `layout`.
void check_throughput_baseline_fits(const ThroughputBaseline& baseline, const std::string& machine,
                                    const std::string& layout);

struct ThroughputVerdict {
  bool pass = true;
  double measured = 0, baseline = 0, threshold = 0;  // output token/s
  std::string reason;                                // "" when passing
};
ThroughputVerdict judge_throughput(const ThroughputBaseline& baseline, double output_throughput);

}  // namespace k3::eval
