#include "eval/speculative.h"

#include <cmath>

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

std::optional<double> SpeculativeMetrics::saved_s() const {
  if (plain_estimate_s <= 0) return std::nullopt;
  return plain_estimate_s - decode_s;
}

SpeculativeMetrics& SpeculativeMetrics::operator+=(const SpeculativeMetrics& other) {
  verify_rounds += other.verify_rounds;
  drafted_tokens += other.drafted_tokens;
  accepted_drafts += other.accepted_drafts;
  if (draft_lengths.size() < other.draft_lengths.size())
    draft_lengths.resize(other.draft_lengths.size(), 0);
  for (std::size_t k = 0; k < other.draft_lengths.size(); ++k)
    draft_lengths[k] += other.draft_lengths[k];
  decode_s += other.decode_s;
  plain_estimate_s += other.plain_estimate_s;
  return *this;
}

std::string format_draft_lengths(const SpeculativeMetrics& counts) {
  std::string out;
  for (std::size_t k = 0; k < counts.draft_lengths.size(); ++k) {
    if (counts.draft_lengths[k] == 0) continue;
    out += fmt::format("{}K={} {}", out.empty() ? "" : ", ", k, counts.draft_lengths[k]);
  }
  return out.empty() ? "-" : out;
}

std::string format_decode_time(const SpeculativeMetrics& counts) {
  const std::optional<double> saved = counts.saved_s();
  if (!saved) return "";
  return fmt::format("{:.2f} s; decoding plainly, by the cost model: {:.2f} s ({} {:.2f} s, {:.1f} %)",
                     counts.decode_s, counts.plain_estimate_s, *saved >= 0 ? "saved" : "lost",
                     std::abs(*saved), 100.0 * std::abs(*saved) / counts.plain_estimate_s);
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
             run.algorithm, run.block_size, c.verify_rounds, c.drafted_tokens, c.accepted_drafts) +
         (c.draft_lengths.empty() ? std::string()
                                  : fmt::format("Draft lengths ({}): {}\n",
                                                run.policy.empty() ? "-" : run.policy,
                                                format_draft_lengths(c))) +
         (c.saved_s() ? "Decode time: " + format_decode_time(c) + "\n" : std::string());
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
  j["policy"] = run.policy;
  nlohmann::ordered_json lengths = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < c.draft_lengths.size(); ++k) {
    if (c.draft_lengths[k] > 0) lengths[std::to_string(k)] = c.draft_lengths[k];
  }
  j["draft_lengths"] = lengths;
  const bool estimated = c.saved_s().has_value();
  j["decode_s"] = estimated ? nlohmann::ordered_json(c.decode_s) : nullptr;
  j["plain_estimate_s"] = estimated ? nlohmann::ordered_json(c.plain_estimate_s) : nullptr;
  j["saved_s"] = number_or_null(c.saved_s());
  return j;
}

}  // namespace k3::eval
