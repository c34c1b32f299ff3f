#include "eval/speculative.h"

#include <fmt/format.h>

namespace k3::eval {

namespace {

// `spec` applied to the value, or "-" when there is none.
std::string shown(const std::optional<double>& value, fmt::format_string<double> spec) {
  return value ? fmt::format(spec, double{*value}) : std::string("-");
}

nlohmann::ordered_json number_or_null(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::optional<double> SpeculativeMetrics::accept_length() const {
  if (verify_rounds == 0) return std::nullopt;
  // In floating point: the sum of two counts cannot overflow there.
  return (static_cast<double>(accepted_drafts) + static_cast<double>(verify_rounds)) /
         static_cast<double>(verify_rounds);
}

std::optional<double> SpeculativeMetrics::accept_rate() const {
  if (drafted_tokens == 0) return std::nullopt;
  return static_cast<double>(accepted_drafts) / static_cast<double>(drafted_tokens);
}

SpeculativeMetrics& SpeculativeMetrics::operator+=(const SpeculativeMetrics& other) {
  verify_rounds += other.verify_rounds;
  drafted_tokens += other.drafted_tokens;
  accepted_drafts += other.accepted_drafts;
  return *this;
}

std::string format_accept_suffix(const SpeculativeMetrics& counts) {
  if (!counts.ran()) return "";
  return ", accept len " + shown(counts.accept_length(), "{:.2f}") + ", accept rate " +
         shown(counts.accept_rate(), "{:.2f}");
}

std::string format_speculative_lines(const SpeculativeRun& run) {
  const SpeculativeMetrics& c = run.counts;
  return "Accept length: " + shown(c.accept_length(), "{:.3f}") + "\n" +
         "Accept rate: " + shown(c.accept_rate(), "{:.3f}") + "\n" +
         fmt::format(
             "Speculative decoding: {}, block size {}: {} verify rounds, {} drafted tokens, {} "
             "accepted\n",
             run.algorithm, run.block_size, c.verify_rounds, c.drafted_tokens, c.accepted_drafts);
}

nlohmann::ordered_json speculative_json(const SpeculativeRun& run) {
  const SpeculativeMetrics& c = run.counts;
  nlohmann::ordered_json j;
  j["algorithm"] = run.algorithm;
  j["block_size"] = run.block_size;
  j["verify_rounds"] = c.verify_rounds;
  j["drafted_tokens"] = c.drafted_tokens;
  j["accepted_drafts"] = c.accepted_drafts;
  j["accept_length"] = number_or_null(c.accept_length());
  j["accept_rate"] = number_or_null(c.accept_rate());
  return j;
}

}  // namespace k3::eval
