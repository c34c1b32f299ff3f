// eval::Metrics: SGLang's GSM8K numbers and the four lines it prints (few_shot_gsm8k.py):
//
//   Accuracy: 0.970                    mean(preds == labels)
//   Invalid: 0.000                     mean(preds == INVALID)
//   Latency: 123.456 s                 wall time of the whole batch
//   Output throughput: 45.678 token/s  sum(completion_tokens) / latency
//
// Python's "{:.3f}" and printf's "%.3f" both round the exact binary value half-to-even, so the
// lines match digit for digit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "eval/results.h"

namespace k3::eval {

struct Metrics {
  std::size_t questions = 0;
  std::size_t correct = 0;
  std::size_t invalid = 0;
  std::uint64_t completion_tokens = 0;
  double latency_s = 0;

  // NaN for zero questions (numpy's mean of an empty array), printed "nan" as Python does.
  double accuracy() const;
  double invalid_rate() const;
  // 0 when latency_s <= 0 (where Python would raise ZeroDivisionError).
  double output_throughput() const;
};

// `latency_s` is the run's wall time, not a sum of per-question latencies.
Metrics compute_metrics(std::span<const QuestionResult> results, double latency_s);

// The four lines above, each ending in '\n'.
std::string format_metric_lines(const Metrics& metrics);
// Only "Accuracy: ..." and "Invalid: ...": for re-scoring, where there is no timing.
std::string format_accuracy_lines(const Metrics& metrics);

}  // namespace k3::eval
