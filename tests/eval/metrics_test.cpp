// Metrics: SGLang's four console lines, digit for digit, from per-question results.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/metrics.h"

namespace k3::eval {
namespace {

std::vector<QuestionResult> results(std::size_t correct, std::size_t invalid, std::size_t wrong,
                                    std::size_t tokens_each) {
  std::vector<QuestionResult> out;
  auto add = [&](std::size_t n, bool c, bool inv) {
    for (std::size_t i = 0; i < n; ++i) {
      QuestionResult r;
      r.id = out.size();
      r.correct = c;
      r.invalid = inv;
      r.completion_tokens = tokens_each;
      out.push_back(r);
    }
  };
  add(correct, true, false);
  add(invalid, false, true);
  add(wrong, false, false);
  return out;
}

TEST(Metrics, FourLinesInSglangsFormat) {
  const auto r = results(194, 1, 5, 100);  // 200 questions, 20000 tokens
  const Metrics m = compute_metrics(r, 12.3456);
  EXPECT_EQ(m.questions, 200u);
  EXPECT_EQ(m.correct, 194u);
  EXPECT_EQ(m.invalid, 1u);
  EXPECT_EQ(m.completion_tokens, 20000u);
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.97);
  EXPECT_DOUBLE_EQ(m.invalid_rate(), 0.005);
  EXPECT_EQ(format_metric_lines(m),
            "Accuracy: 0.970\n"
            "Invalid: 0.005\n"
            "Latency: 12.346 s\n"
            "Output throughput: 1620.010 token/s\n");
  EXPECT_EQ(format_accuracy_lines(m), "Accuracy: 0.970\nInvalid: 0.005\n");
}

TEST(Metrics, RoundsLikePythonFormat) {
  // f"{x:.3f}" rounds the exact binary value: 0.0625 is a tie and goes to even (0.062);
  // 0.0005 is stored just above the tie (0.001); 9/2000 just below it (0.004).
  Metrics m;
  m.questions = 16;
  m.correct = 1;  // 0.0625
  m.invalid = 0;
  m.latency_s = 0.0005;
  m.completion_tokens = 0;
  EXPECT_EQ(format_metric_lines(m),
            "Accuracy: 0.062\nInvalid: 0.000\nLatency: 0.001 s\nOutput throughput: 0.000 "
            "token/s\n");
  m.questions = 2000;
  m.correct = 9;
  m.invalid = 1999;  // 0.9995 is stored as 0.99950000000000006 -> 1.000
  EXPECT_EQ(format_accuracy_lines(m), "Accuracy: 0.004\nInvalid: 1.000\n");
}

TEST(Metrics, EmptyRunIsNanAndZeroLatencyHasNoThroughput) {
  const Metrics m = compute_metrics({}, 0.0);
  EXPECT_TRUE(std::isnan(m.accuracy()));
  EXPECT_EQ(m.output_throughput(), 0.0);
  EXPECT_EQ(format_metric_lines(m),
            "Accuracy: nan\nInvalid: nan\nLatency: 0.000 s\nOutput throughput: 0.000 token/s\n");
}

}  // namespace
}  // namespace k3::eval
