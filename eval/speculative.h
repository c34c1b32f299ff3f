// eval::SpeculativeMetrics: how many of speculative decoding's drafts the target model accepted,
// with SGLang's definitions (its decode log line "accept len: X, accept rate: Y", and the
// Prometheus gauges spec_accept_length / spec_accept_rate):
//
//   accept length = (accepted drafts + verify rounds) / verify rounds
//                   tokens committed per verify forward, the bonus token included, so >= 1
//   accept rate   = accepted drafts / drafted tokens
//                   the share of the drafted tokens the target kept
//
// The counts are a DP group's (model::engine::GeneratorStats' fields of the same names: one
// verify round per decoding sequence per step). A run's figures sum the counts of every DP group
// and take the ratios of the sums, never a mean of the groups' ratios: a group that verified
// more rounds weighs more.
//
// Reports mention speculation only when a verify round ran; otherwise every line, summary.json
// and the history record are what they are without it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace k3::eval {

struct SpeculativeMetrics {
  std::uint64_t verify_rounds = 0;
  std::uint64_t drafted_tokens = 0;
  std::uint64_t accepted_drafts = 0;

  bool ran() const { return verify_rounds > 0; }
  // None without a verify round (accept length) or without a drafted token (accept rate).
  std::optional<double> accept_length() const;
  std::optional<double> accept_rate() const;

  // Adds another DP group's (or another part's) counts.
  SpeculativeMetrics& operator+=(const SpeculativeMetrics& other);
  friend SpeculativeMetrics operator+(SpeculativeMetrics a, const SpeculativeMetrics& b) {
    return a += b;
  }
  bool operator==(const SpeculativeMetrics&) const = default;
};

// A run that decoded speculatively, as its reports describe it: the configured algorithm and
// block size (drafted tokens per verify round), and the counts of every DP group summed.
struct SpeculativeRun {
  std::string algorithm;  // e.g. "dspark"
  std::uint64_t block_size = 0;
  SpeculativeMetrics counts;

  bool operator==(const SpeculativeRun&) const = default;
};

// The progress line's tail, ", accept len 2.75, accept rate 0.44"; "" when no verify round ran.
// A ratio without its denominator shows as "-".
std::string format_accept_suffix(const SpeculativeMetrics& counts);

// The console lines of a finished evaluation, after SGLang's four metric lines:
//   Accept length: 2.750
//   Accept rate: 0.438
//   Speculative decoding: dspark, block size 4: 8 verify rounds, 32 drafted tokens, 14 accepted
std::string format_speculative_lines(const SpeculativeRun& run);

// summary.json's "speculative" object: {"algorithm", "block_size", "verify_rounds",
// "drafted_tokens", "accepted_drafts", "accept_length", "accept_rate"} (a ratio without its
// denominator is null).
nlohmann::ordered_json speculative_json(const SpeculativeRun& run);

}  // namespace k3::eval
