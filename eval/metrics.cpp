#include "eval/metrics.h"

#include <cstdio>
#include <limits>

namespace k3::eval {

namespace {

double ratio(std::size_t part, std::size_t whole) {
  if (whole == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(part) / static_cast<double>(whole);
}

std::string line(const char* format, double value) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace

double Metrics::accuracy() const { return ratio(correct, questions); }
double Metrics::invalid_rate() const { return ratio(invalid, questions); }
double Metrics::output_throughput() const {
  return latency_s > 0 ? static_cast<double>(completion_tokens) / latency_s : 0.0;
}

Metrics compute_metrics(std::span<const QuestionResult> results, double latency_s) {
  Metrics m;
  m.questions = results.size();
  m.latency_s = latency_s;
  for (const QuestionResult& r : results) {
    m.correct += r.correct ? 1 : 0;
    m.invalid += r.invalid ? 1 : 0;
    m.completion_tokens += r.completion_tokens;
  }
  return m;
}

std::string format_accuracy_lines(const Metrics& m) {
  return line("Accuracy: %.3f\n", m.accuracy()) + line("Invalid: %.3f\n", m.invalid_rate());
}

std::string format_metric_lines(const Metrics& m) {
  return format_accuracy_lines(m) + line("Latency: %.3f s\n", m.latency_s) +
         line("Output throughput: %.3f token/s\n", m.output_throughput());
}

}  // namespace k3::eval
