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
#include <vector>

#include <nlohmann/json.hpp>

namespace k3::eval {

struct SpeculativeMetrics {
  std::uint64_t verify_rounds = 0;
  std::uint64_t drafted_tokens = 0;
  std::uint64_t accepted_drafts = 0;
  // Decode rows by the number K of drafts they verified (index K; K = 0: a plain decode row
  // beside the drafter), and the decode steps' time against the engine's cost-model estimate of
  // decoding the same tokens plainly (model/engine/speculation.h). Empty / 0 when not known.
  std::vector<std::uint64_t> draft_lengths;
  double decode_s = 0;
  double plain_estimate_s = 0;

  // The three counts alone (no draft lengths or times recorded).
  static SpeculativeMetrics of(std::uint64_t rounds, std::uint64_t drafted, std::uint64_t accepted) {
    SpeculativeMetrics m;
    m.verify_rounds = rounds;
    m.drafted_tokens = drafted;
    m.accepted_drafts = accepted;
    return m;
  }

  bool ran() const { return verify_rounds > 0; }
  // plain_estimate_s - decode_s: positive when speculation saved time; none without an
  // estimate.
  std::optional<double> saved_s() const;
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
  // How K was chosen: "goodput" (--speculative-adaptive) or "fixed" (--speculative-num-draft-
  // tokens); "" when not recorded (runs written before the choice existed).
  std::string policy;

  bool operator==(const SpeculativeRun&) const = default;
};

// The progress line's tail, ", accept len 2.75, accept rate 0.44"; "" when no verify round ran.
// A ratio without its denominator shows as "-".
std::string format_accept_suffix(const SpeculativeMetrics& counts);

// The console lines of a finished evaluation, after SGLang's four metric lines:
//   Accept length: 2.750
//   Accept rate: 0.438
//   Speculative decoding: dspark, block size 4: 8 verify rounds, 32 drafted tokens, 14 accepted
//   Draft lengths (goodput): K=0 3, K=2 5, K=4 3
//   Decode time: 1.20 s; decoding plainly, by the cost model: 1.50 s (saved 0.30 s, 20.0 %)
// (the last two when known).
std::string format_speculative_lines(const SpeculativeRun& run);

// "K=0 3, K=2 5, K=4 3": the draft lengths used, "-" when none was recorded.
std::string format_draft_lengths(const SpeculativeMetrics& counts);
// "1.20 s; decoding plainly, by the cost model: 1.50 s (saved 0.30 s, 20.0 %)", or "" without an
// estimate.
std::string format_decode_time(const SpeculativeMetrics& counts);

// summary.json's "speculative" object: {"algorithm", "block_size", "verify_rounds",
// "drafted_tokens", "accepted_drafts", "accept_length", "accept_rate", "policy", "draft_lengths"
// ({"K": rows}), "decode_s", "plain_estimate_s", "saved_s"} (a ratio without its denominator and
// a time without its estimate are null).
nlohmann::ordered_json speculative_json(const SpeculativeRun& run);

}  // namespace k3::eval
