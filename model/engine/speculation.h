// engine::Speculation: how many draft tokens each decoding request verifies, chosen per step by
// goodput (expected committed tokens per second of the whole step).
//
// A verify round of K drafts costs K + 1 target rows; whether that pays depends on the host's
// kernels and the step's load: a memory-bound step verifies extra rows almost for free, a
// compute-bound one pays for every row. SmartSpec (arXiv 2406.14066) chooses the proposal length
// that maximises goodput from a step-time model and online acceptance; vLLM's dynamic speculative
// decoding picks one K per step the same way. Here each request gets its own K (vLLM RFC 48202's
// per-request lengths), in 0..block (0: a plain decode row for that request; all 0: no drafter
// call at all), from
//   * StepCostModel: the target's step time as a function of the rows it computes, and the
//     drafter's as a function of the requests it drafts for, measured on this host during the
//     first run (calibrate) and refined from every step;
//   * AcceptanceStats: per request and draft position, how often position j was right given
//     j - 1 was, from every proposal compared with the tokens the target then committed (also
//     positions beyond the verified K: with deterministic sampling the committed token is the
//     one a longer verify would have produced);
// and maximises, over the number R of extra rows, (decoding requests + the R most probable
// extra tokens) / (target(rows + R) + drafter + fixed overhead). R = 0 is plain decoding, so by
// the model the choice never loses. Greedy exactness is unchanged: only how many drafts are
// verified changes.
//
// Every rank of a DP group must choose the same K: the choice depends only on the group's
// sequences (identical on its ranks) and on step times agreed over the world in the generator's
// per-step allreduce, never on a rank's own clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

namespace k3::model::engine {

// How often each draft position is right, per request and over all requests.
class AcceptanceStats {
 public:
  explicit AcceptanceStats(int block);
  int block() const { return block_; }

  // `drafts` were proposed for the positions where `committed` holds the target's tokens (as
  // many as are known): positions are counted up to and including the first wrong one.
  void observe(std::uint64_t request, std::span<const std::int32_t> drafts,
               std::span<const std::int32_t> committed);
  // P(draft position j is right | j - 1 was), j in 1..block: the request's counts with the
  // counts over all requests as prior (weight kPriorWeight), those with a Laplace prior.
  double accept_probability(std::uint64_t request, int j) const;
  void forget(std::uint64_t request);

 private:
  static constexpr double kPriorWeight = 4.0;
  struct Counts {
    std::vector<std::uint64_t> tried, right;  // [block], index j - 1
  };
  int block_;
  Counts all_;
  std::unordered_map<std::uint64_t, Counts> by_request_;
};

// Seconds per target step by rows computed and per drafter call by requests drafted: measured
// points, each an exponential moving average, interpolated linearly between them.
class StepCostModel {
 public:
  double target_seconds(std::size_t rows) const;
  double draft_seconds(std::size_t requests) const;
  double overhead_seconds() const { return overhead_; }  // per step, outside target and drafter
  void observe_target(std::size_t rows, double seconds);
  void observe_draft(std::size_t requests, double seconds);
  void observe_overhead(double seconds);
  bool empty() const { return target_.empty(); }

 private:
  static constexpr double kSmoothing = 0.25;  // weight of a new measurement
  static double predict(const std::map<std::size_t, double>& points, std::size_t x);
  static void observe(std::map<std::size_t, double>& points, std::size_t x, double seconds);
  std::map<std::size_t, double> target_, draft_;
  double overhead_ = 0;
  bool overhead_seen_ = false;
};

// One decoding request as the policy sees it.
struct SpeculationCandidate {
  std::uint64_t request = 0;
  int max_k = 0;  // the most drafts it can still use (its block, fewer near max_new_tokens)
};

struct SpeculationOptions {
  // Choose K per request and step by goodput; otherwise every request verifies `fixed_k` drafts.
  bool adaptive = true;
  int fixed_k = -1;  // -1: the block size
  // Tests: replaces the choice (one K per candidate, each clamped to 0..max_k).
  std::function<std::vector<int>(std::span<const SpeculationCandidate>)> forced;
};

// What speculation did over a run, for the reports (a DP group's; the eval sums the groups).
struct SpeculationTally {
  std::vector<std::uint64_t> k_rounds;  // [block + 1]: decode rows that verified K drafts
  double measured_s = 0;        // wall time of the steps with decode rows
  double plain_estimate_s = 0;  // the cost model's time for the same tokens decoded plainly
  SpeculationTally& operator+=(const SpeculationTally& other);
};

class Speculation {
 public:
  Speculation(int block, SpeculationOptions options);
  int block() const { return block_; }
  bool adaptive() const { return options_.adaptive && !options_.forced; }
  bool calibrated() const { return !cost_.empty(); }

  // Per candidate its K (0..max_k). `other_rows`: the step's prefill rows.
  std::vector<int> choose(std::span<const SpeculationCandidate> candidates,
                          std::size_t other_rows) const;

  StepCostModel& cost() { return cost_; }
  const StepCostModel& cost() const { return cost_; }
  AcceptanceStats& acceptance() { return acceptance_; }

 private:
  std::vector<int> by_goodput(std::span<const SpeculationCandidate> candidates,
                              std::size_t other_rows) const;
  int block_;
  SpeculationOptions options_;
  StepCostModel cost_;
  AcceptanceStats acceptance_;
};

}  // namespace k3::model::engine
