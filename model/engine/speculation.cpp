#include "model/engine/speculation.h"

#include <algorithm>
#include <iterator>

#include "common/error.h"

namespace k3::model::engine {

// --- AcceptanceStats ---

AcceptanceStats::AcceptanceStats(int block) : block_(block) {
  if (block < 1) throw InternalError("speculation: a block of at least one draft is needed");
  all_.tried.assign(static_cast<std::size_t>(block), 0);
  all_.right.assign(static_cast<std::size_t>(block), 0);
}

void AcceptanceStats::observe(std::uint64_t request, std::span<const std::int32_t> drafts,
                              std::span<const std::int32_t> committed) {
  Counts& mine = by_request_[request];
  if (mine.tried.empty()) mine = {std::vector<std::uint64_t>(all_.tried.size(), 0),
                                  std::vector<std::uint64_t>(all_.tried.size(), 0)};
  const std::size_t n = std::min({drafts.size(), committed.size(), all_.tried.size()});
  for (std::size_t j = 0; j < n; ++j) {
    ++mine.tried[j];
    ++all_.tried[j];
    if (drafts[j] != committed[j]) return;
    ++mine.right[j];
    ++all_.right[j];
  }
}

double AcceptanceStats::accept_probability(std::uint64_t request, int j) const {
  const auto at = static_cast<std::size_t>(std::clamp(j, 1, block_) - 1);
  const double prior = (static_cast<double>(all_.right[at]) + 1.0) /
                       (static_cast<double>(all_.tried[at]) + 2.0);
  const auto it = by_request_.find(request);
  if (it == by_request_.end()) return prior;
  return (static_cast<double>(it->second.right[at]) + kPriorWeight * prior) /
         (static_cast<double>(it->second.tried[at]) + kPriorWeight);
}

void AcceptanceStats::forget(std::uint64_t request) { by_request_.erase(request); }

// --- StepCostModel ---

double StepCostModel::predict(const std::map<std::size_t, double>& points, std::size_t x) {
  if (points.empty()) return 0.0;
  auto hi = points.lower_bound(x);
  if (hi != points.end() && hi->first == x) return hi->second;
  if (hi == points.begin()) return hi->second;  // below every point: the smallest step's time
  if (hi == points.end()) {
    // Beyond every point: the last two points' slope (a step's time keeps growing with rows).
    auto last = std::prev(points.end());
    if (last == points.begin()) return last->second;
    auto before = std::prev(last);
    const double slope = std::max(0.0, (last->second - before->second) /
                                           static_cast<double>(last->first - before->first));
    return last->second + slope * static_cast<double>(x - last->first);
  }
  auto lo = std::prev(hi);
  const double t = static_cast<double>(x - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

void StepCostModel::observe(std::map<std::size_t, double>& points, std::size_t x,
                            double seconds) {
  auto [it, inserted] = points.emplace(x, seconds);
  if (!inserted) it->second += kSmoothing * (seconds - it->second);
}

double StepCostModel::target_seconds(std::size_t rows) const { return predict(target_, rows); }
double StepCostModel::draft_seconds(std::size_t requests) const {
  return requests == 0 ? 0.0 : predict(draft_, requests);
}
void StepCostModel::observe_target(std::size_t rows, double seconds) {
  if (rows > 0) observe(target_, rows, seconds);
}
void StepCostModel::observe_draft(std::size_t requests, double seconds) {
  if (requests > 0) observe(draft_, requests, seconds);
}
void StepCostModel::observe_overhead(double seconds) {
  seconds = std::max(0.0, seconds);
  overhead_ = overhead_seen_ ? overhead_ + kSmoothing * (seconds - overhead_) : seconds;
  overhead_seen_ = true;
}

// --- SpeculationTally ---

SpeculationTally& SpeculationTally::operator+=(const SpeculationTally& other) {
  if (k_rounds.size() < other.k_rounds.size()) k_rounds.resize(other.k_rounds.size(), 0);
  for (std::size_t k = 0; k < other.k_rounds.size(); ++k) k_rounds[k] += other.k_rounds[k];
  measured_s += other.measured_s;
  plain_estimate_s += other.plain_estimate_s;
  return *this;
}

// --- Speculation ---

Speculation::Speculation(int block, SpeculationOptions options)
    : block_(block), options_(std::move(options)), acceptance_(block) {
  if (options_.fixed_k > block) {
    throw UsageError("--speculative-num-draft-tokens " + std::to_string(options_.fixed_k) +
                     " exceeds the drafter's block size " + std::to_string(block));
  }
}

std::vector<int> Speculation::choose(std::span<const SpeculationCandidate> candidates,
                                     std::size_t other_rows) const {
  std::vector<int> k(candidates.size(), 0);
  if (options_.forced) {
    k = options_.forced(candidates);
    k.resize(candidates.size(), 0);
  } else if (!options_.adaptive || cost_.empty()) {
    std::fill(k.begin(), k.end(), options_.fixed_k < 0 ? block_ : options_.fixed_k);
  } else {
    k = by_goodput(candidates, other_rows);
  }
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::clamp(k[i], 0, candidates[i].max_k);
  return k;
}

std::vector<int> Speculation::by_goodput(std::span<const SpeculationCandidate> candidates,
                                         std::size_t other_rows) const {
  // Each extra row (request i's draft j) adds P(drafts 1..j all right) committed tokens; per
  // request these gains fall with j, so the best R rows are the R largest gains.
  struct Gain {
    double tokens;
    std::size_t request;
  };
  std::vector<Gain> gains;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    double reach = 1.0;
    for (int j = 1; j <= candidates[i].max_k; ++j) {
      reach *= acceptance_.accept_probability(candidates[i].request, j);
      gains.push_back({reach, i});
    }
  }
  std::stable_sort(gains.begin(), gains.end(),
                   [](const Gain& a, const Gain& b) { return a.tokens > b.tokens; });
  const std::size_t base_rows = other_rows + candidates.size();
  const double base_tokens = static_cast<double>(candidates.size());
  std::vector<char> drafting(candidates.size(), 0);
  std::size_t drafted_requests = 0;
  double tokens = base_tokens;
  double best = base_tokens / (cost_.target_seconds(base_rows) + cost_.overhead_seconds());
  std::size_t best_rows = 0;
  for (std::size_t r = 0; r < gains.size(); ++r) {
    tokens += gains[r].tokens;
    if (!drafting[gains[r].request]) {
      drafting[gains[r].request] = 1;
      ++drafted_requests;
    }
    const double seconds = cost_.target_seconds(base_rows + r + 1) +
                           cost_.draft_seconds(drafted_requests) + cost_.overhead_seconds();
    if (seconds > 0 && tokens / seconds > best) {
      best = tokens / seconds;
      best_rows = r + 1;
    }
  }
  std::vector<int> k(candidates.size(), 0);
  for (std::size_t r = 0; r < best_rows; ++r) ++k[gains[r].request];
  return k;
}

}  // namespace k3::model::engine
