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
// and maximises, over the number R of extra rows, the decode goodput: (decoding requests + the
// R most probable extra tokens) / (the time the decode rows add to the step: target(prefill +
// decode + R) - target(prefill), plus the drafter's call and projection and the fixed
// overhead). A step's prompt rows are paid for either way, so a long prompt chunk never makes
// verify rows look cheap. R = 0 is plain decoding; a draft length is taken only when its
// goodput beats plain decoding's by kMinGain (the model's error), so by the model the choice
// never loses. Greedy exactness is unchanged: only how many drafts are verified changes.
//
// When the group drains (no request waits for a slot, no prompt rows in the step), committed
// tokens no longer feed a queue: the group is done when its last request is, so a step is worth
// its expected progress on that critical path, not its tokens. With rooms r_i (the tokens each
// request may still generate: its steps left under plain decoding) and r_max the largest, the
// path shortens by 1 + m only if every request with r_i > r_max - m commits r_i - r_max + 1 + m
// tokens or more: E[progress] = 1 + sum over m = 1..block of the product over those requests of
// P(drafts 1..r_i - r_max + m all right). The policy tries each level M (K_i = r_i - r_max + M
// for the requests it involves, 0 for the others) and keeps the best progress per second. Ten
// requests in lockstep that each accept at 0.75 progress 1.06 per drafted step where goodput
// would count 8.5 tokens; a request alone gets what goodput gives it.
//
// At a load where no K could pay even were every draft right (could_pay), the generator keeps no
// drafter context: those requests decode plainly to their end at no cost to the drafter.
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
#include <utility>
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
  // counts over all requests as prior (weight kPriorWeight), those with an optimistic prior
  // (kOptimism right of kOptimismWeight tries): before any evidence the policy drafts, so that
  // it learns what the drafter is worth on this workload; a few rounds outweigh it.
  double accept_probability(std::uint64_t request, int j) const;
  void forget(std::uint64_t request);
  // One step passed: every count loses 1/kMemorySteps of its weight, so that a request (or a
  // workload) whose drafts once failed is tried again once its evidence has faded, and a
  // drafter that gets better later in a request (a text that falls into a pattern) is noticed.
  void age();

 private:
  static constexpr double kPriorWeight = 4.0;
  static constexpr double kOptimism = 0.75, kOptimismWeight = 4.0;
  static constexpr double kMemorySteps = 32.0;
  struct Counts {
    std::vector<double> tried, right;  // [block], index j - 1
  };
  int block_;
  Counts all_;
  std::unordered_map<std::uint64_t, Counts> by_request_;
};

// Seconds per target step by rows computed, per drafter call by requests drafted, and per
// drafter context rows projected before a call (a request's rows committed since its last
// draft). Each is a curve calibrated on the idle job (its shape, kept non-decreasing) times the
// ratio of measured to calibrated time near that point (an exponential moving average per
// measured point, interpolated): a real step's context, sequences and cache state scale the
// whole curve, so a measurement at 16 rows also moves the prediction at 17. Without calibration
// the measured points themselves, interpolated linearly.
class StepCostModel {
 public:
  double target_seconds(std::size_t rows) const { return target_.at(rows); }
  double draft_seconds(std::size_t requests) const {
    return requests == 0 ? 0.0 : draft_.at(requests);
  }
  double projection_seconds(std::size_t rows) const {
    return rows == 0 ? 0.0 : projection_.at(rows);
  }
  // Per decode step, outside target and drafter (learned from steps without prompt rows).
  double overhead_seconds() const { return overhead_; }
  // The idle job's times (the faster of repeated calls is the better measure).
  void calibrate_target(std::size_t rows, double seconds) { target_.calibrate(rows, seconds); }
  void calibrate_draft(std::size_t requests, double seconds) {
    draft_.calibrate(requests, seconds);
  }
  void calibrate_projection(std::size_t rows, double seconds) {
    projection_.calibrate(rows, seconds);
  }
  // Times of real steps. A drafter call's time without its projection (projection_seconds).
  void observe_target(std::size_t rows, double seconds) { target_.observe(rows, seconds); }
  void observe_draft(std::size_t requests, double seconds) { draft_.observe(requests, seconds); }
  void observe_overhead(double seconds);
  bool empty() const { return target_.empty(); }
  // Whether steps of rows_b > rows_a rows cost nearly their full share (seconds_b at least
  // rows_b / rows_a / (1 + Speculation::kMinGain) times seconds_a): compute-bound, so larger
  // steps follow the slope and need no calibration of their own.
  static bool compute_bound(std::size_t rows_a, double seconds_a, std::size_t rows_b,
                            double seconds_b);
  // The largest drafter batch calibrated (0: none).
  std::size_t calibrated_requests() const { return draft_.calibrated_up_to(); }

  // The calibrated points, (rows or requests, seconds), without what real steps taught: kept
  // for a later run of the same job on the same host (eval/step_costs.h), which restores them
  // instead of measuring again and then refines them from its own steps.
  struct Calibration {
    std::vector<std::pair<std::size_t, double>> target, draft, projection;
  };
  Calibration calibration() const {
    return {target_.calibrated(), draft_.calibrated(), projection_.calibrated()};
  }
  void restore(const Calibration& c);

 private:
  class Curve {
   public:
    double at(std::size_t x) const;
    void calibrate(std::size_t x, double seconds);
    void observe(std::size_t x, double seconds);
    bool empty() const { return shape_.empty() && measured_.empty(); }
    std::size_t calibrated_up_to() const { return shape_.empty() ? 0 : shape_.rbegin()->first; }
    std::vector<std::pair<std::size_t, double>> calibrated() const {
      return {shape_.begin(), shape_.end()};
    }

   private:
    double shape_at(std::size_t x) const;     // 1 without a shape: measured_ is in seconds
    std::map<std::size_t, double> shape_;     // calibrated seconds, non-decreasing in x
    std::map<std::size_t, double> measured_;  // measured / shape (seconds without a shape)
  };
  static constexpr double kSmoothing = 0.25;  // weight of a new measurement
  Curve target_, draft_, projection_;
  double overhead_ = 0;
  bool overhead_seen_ = false;
};

// One decoding request as the policy sees it.
struct SpeculationCandidate {
  std::uint64_t request = 0;
  int max_k = 0;  // the most drafts it can still use (its block, fewer near max_new_tokens)
  std::size_t pending = 0;  // drafter context rows its next draft projects first
  std::size_t room = 0;     // tokens it may still generate (max_new_tokens less those it has)
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

  // Per candidate its K (0..max_k). `other_rows`: the step's prefill rows. `draining`: no request
  // of the group waits for a slot (and other_rows is 0): progress on the critical path instead
  // of goodput.
  std::vector<int> choose(std::span<const SpeculationCandidate> candidates,
                          std::size_t other_rows, bool draining = false) const;
  // Whether choose() could pick any draft at this load were every draft right and no context
  // waiting to be projected: false only for an adaptive policy whose measured costs say verify
  // rows cost more than even a perfect drafter saves (a compute-bound step on this host). A
  // request's drafter context then earns nothing, and the generator stops keeping it.
  bool could_pay(std::span<const SpeculationCandidate> candidates, std::size_t other_rows,
                 bool draining = false) const;

  StepCostModel& cost() { return cost_; }
  const StepCostModel& cost() const { return cost_; }
  AcceptanceStats& acceptance() { return acceptance_; }

  // A draft length must promise this much more goodput than plain decoding.
  static constexpr double kMinGain = 0.05;

 private:
  // `certain`: as if every draft were right (could_pay).
  std::vector<int> by_goodput(std::span<const SpeculationCandidate> candidates,
                              std::size_t other_rows, bool certain = false) const;
  std::vector<int> by_critical_path(std::span<const SpeculationCandidate> candidates,
                                    bool certain = false) const;
  // [j]: P(the candidate's drafts 1..j all right), j in 0..max_k ([0] = 1); all 1 if `certain`.
  std::vector<double> reach(const SpeculationCandidate& candidate, bool certain = false) const;
  // The time the step's decode rows add (beside `other_rows` prompt rows): `decoding` rows and
  // `extra` verify rows, the drafter's call for `drafted` requests after projecting
  // `projected` context rows, and the fixed overhead.
  double decode_seconds(std::size_t other_rows, std::size_t decoding, std::size_t extra,
                        std::size_t drafted, std::size_t projected) const;
  int block_;
  SpeculationOptions options_;
  StepCostModel cost_;
  AcceptanceStats acceptance_;
};

}  // namespace k3::model::engine
