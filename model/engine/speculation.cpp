#include "model/engine/speculation.h"

#include <algorithm>
#include <iterator>

#include "common/error.h"

namespace k3::model::engine {

// --- AcceptanceStats ---

AcceptanceStats::AcceptanceStats(int block) : block_(block) {
  if (block < 1) throw InternalError("speculation: a block of at least one draft is needed");
  all_.tried.assign(static_cast<std::size_t>(block), 0.0);
  all_.right.assign(static_cast<std::size_t>(block), 0.0);
}

void AcceptanceStats::observe(std::uint64_t request, std::span<const std::int32_t> drafts,
                              std::span<const std::int32_t> committed) {
  Counts& mine = by_request_[request];
  if (mine.tried.empty()) mine = {std::vector<double>(all_.tried.size(), 0.0),
                                  std::vector<double>(all_.tried.size(), 0.0)};
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
  const double prior =
      (all_.right[at] + kOptimism * kOptimismWeight) / (all_.tried[at] + kOptimismWeight);
  const auto it = by_request_.find(request);
  if (it == by_request_.end()) return prior;
  return (it->second.right[at] + kPriorWeight * prior) / (it->second.tried[at] + kPriorWeight);
}

void AcceptanceStats::forget(std::uint64_t request) { by_request_.erase(request); }

void AcceptanceStats::age() {
  const double keep = 1.0 - 1.0 / kMemorySteps;
  auto fade = [keep](Counts& c) {
    for (double& n : c.tried) n *= keep;
    for (double& n : c.right) n *= keep;
  };
  fade(all_);
  for (auto& [request, counts] : by_request_) fade(counts);
}

// --- StepCostModel ---

namespace {

// Linear between points; below the first, the first; beyond the last, the last (`slope`: plus
// the slope from the point nearest half the last one's x to the last, not below 0: over that
// span one noisy point moves it little).
double interpolate(const std::map<std::size_t, double>& points, std::size_t x, bool slope) {
  if (points.empty()) return 0.0;
  auto hi = points.lower_bound(x);
  if (hi != points.end() && hi->first == x) return hi->second;
  if (hi == points.begin()) return hi->second;
  if (hi == points.end()) {
    auto last = std::prev(points.end());
    if (!slope || last == points.begin()) return last->second;
    auto from = points.lower_bound(last->first / 2);
    if (from == last) from = std::prev(last);
    const double rise = std::max(0.0, (last->second - from->second) /
                                          static_cast<double>(last->first - from->first));
    return last->second + rise * static_cast<double>(x - last->first);
  }
  auto lo = std::prev(hi);
  const double t = static_cast<double>(x - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

}  // namespace

double StepCostModel::Curve::at(std::size_t x) const {
  if (shape_.empty()) return interpolate(measured_, x, true);
  const double base = interpolate(shape_, x, true);
  return measured_.empty() ? base : base * interpolate(measured_, x, false);
}

double StepCostModel::Curve::shape_at(std::size_t x) const {
  return shape_.empty() ? 1.0 : interpolate(shape_, x, true);
}

void StepCostModel::Curve::calibrate(std::size_t x, double seconds) {
  // Measurements are kept as ratios to the shape, and what was measured, in seconds, stays what
  // it was when a new point reshapes the curve: a calibration for a larger batch moves the
  // extrapolation beyond the old last point several times over (a 512-row prefill step measured
  // at 0.55 s read as 3.1 s).
  std::vector<double> measured_seconds;
  for (const auto& [at, ratio] : measured_) measured_seconds.push_back(ratio * shape_at(at));
  auto [it, inserted] = shape_.emplace(x, seconds);
  if (!inserted) it->second = std::min(it->second, seconds);
  // Non-decreasing: a step never gets faster with more rows; a point below one before it was
  // measured in a quieter moment.
  double floor = 0;
  for (auto& [rows, s] : shape_) floor = s = std::max(s, floor);
  auto kept = measured_seconds.begin();
  for (auto& [at, ratio] : measured_) {
    const double now = shape_at(at), was = *kept++;
    if (now > 0) ratio = was / now;
  }
}

void StepCostModel::Curve::observe(std::size_t x, double seconds) {
  if (x == 0) return;
  const double base = shape_at(x);
  if (base <= 0) return;
  const double value = seconds / base;
  auto [it, inserted] = measured_.emplace(x, value);
  if (!inserted) it->second += kSmoothing * (value - it->second);
}

bool StepCostModel::compute_bound(std::size_t rows_a, double seconds_a, std::size_t rows_b,
                                  double seconds_b) {
  const double more_rows = static_cast<double>(rows_b) / static_cast<double>(rows_a);
  return seconds_b * (1.0 + Speculation::kMinGain) >= seconds_a * more_rows;
}

void StepCostModel::restore(const Calibration& c) {
  for (const auto& [rows, seconds] : c.target) target_.calibrate(rows, seconds);
  for (const auto& [requests, seconds] : c.draft) draft_.calibrate(requests, seconds);
  for (const auto& [rows, seconds] : c.projection) projection_.calibrate(rows, seconds);
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
                                     std::size_t other_rows, bool draining) const {
  std::vector<int> k(candidates.size(), 0);
  if (options_.forced) {
    k = options_.forced(candidates);
    k.resize(candidates.size(), 0);
  } else if (!options_.adaptive || cost_.empty()) {
    std::fill(k.begin(), k.end(), options_.fixed_k < 0 ? block_ : options_.fixed_k);
  } else if (draining && other_rows == 0) {
    k = by_critical_path(candidates);
  } else {
    k = by_goodput(candidates, other_rows);
  }
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::clamp(k[i], 0, candidates[i].max_k);
  return k;
}

bool Speculation::could_pay(std::span<const SpeculationCandidate> candidates,
                            std::size_t other_rows, bool draining) const {
  if (!adaptive() || cost_.empty()) return true;
  std::vector<SpeculationCandidate> unburdened(candidates.begin(), candidates.end());
  for (SpeculationCandidate& c : unburdened) c.pending = 0;
  const std::vector<int> k = draining && other_rows == 0
                                 ? by_critical_path(unburdened, true)
                                 : by_goodput(unburdened, other_rows, true);
  return std::any_of(k.begin(), k.end(), [](int n) { return n > 0; });
}

std::vector<int> Speculation::by_goodput(std::span<const SpeculationCandidate> candidates,
                                         std::size_t other_rows, bool certain) const {
  // Each extra row (request i's draft j) adds P(drafts 1..j all right) committed tokens; per
  // request these gains fall with j, so the best R rows are the R largest gains.
  struct Gain {
    double tokens;
    std::size_t request;
  };
  std::vector<Gain> gains;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::vector<double> r = reach(candidates[i], certain);
    for (std::size_t j = 1; j < r.size(); ++j) gains.push_back({r[j], i});
  }
  std::stable_sort(gains.begin(), gains.end(),
                   [](const Gain& a, const Gain& b) { return a.tokens > b.tokens; });
  const std::size_t n = candidates.size();
  double tokens = static_cast<double>(n);
  const double plain_seconds = decode_seconds(other_rows, n, 0, 0, 0);
  const double plain = plain_seconds > 0 ? tokens / plain_seconds : 0.0;
  std::vector<char> drafting(candidates.size(), 0);
  std::size_t drafted_requests = 0, projected = 0;
  double best = plain * (1.0 + kMinGain);
  std::size_t best_rows = 0;
  for (std::size_t r = 0; r < gains.size(); ++r) {
    tokens += gains[r].tokens;
    if (!drafting[gains[r].request]) {
      drafting[gains[r].request] = 1;
      ++drafted_requests;
      projected += candidates[gains[r].request].pending;
    }
    const double seconds = decode_seconds(other_rows, n, r + 1, drafted_requests, projected);
    if (seconds > 0 && tokens / seconds > best) {
      best = tokens / seconds;
      best_rows = r + 1;
    }
  }
  std::vector<int> k(candidates.size(), 0);
  for (std::size_t r = 0; r < best_rows; ++r) ++k[gains[r].request];
  return k;
}

std::vector<double> Speculation::reach(const SpeculationCandidate& candidate,
                                       bool certain) const {
  std::vector<double> r(1, 1.0);
  for (int j = 1; j <= candidate.max_k; ++j)
    r.push_back(certain ? 1.0 : r.back() * acceptance_.accept_probability(candidate.request, j));
  return r;
}

double Speculation::decode_seconds(std::size_t other_rows, std::size_t decoding, std::size_t extra,
                                   std::size_t drafted, std::size_t projected) const {
  const double prompt_seconds = other_rows > 0 ? cost_.target_seconds(other_rows) : 0.0;
  return std::max(0.0, cost_.target_seconds(other_rows + decoding + extra) - prompt_seconds) +
         cost_.draft_seconds(drafted) + cost_.projection_seconds(projected) +
         cost_.overhead_seconds();
}

std::vector<int> Speculation::by_critical_path(std::span<const SpeculationCandidate> candidates,
                                               bool certain) const {
  const std::size_t n = candidates.size();
  std::vector<int> k(n, 0);
  if (n == 0) return k;
  std::size_t longest = 0;
  for (const SpeculationCandidate& c : candidates) longest = std::max(longest, c.room);
  std::vector<std::vector<double>> reaches(n);
  for (std::size_t i = 0; i < n; ++i) reaches[i] = reach(candidates[i], certain);
  // How many drafts request i needs for the path to shorten by 1 + m (<= 0: none).
  auto needed = [&](std::size_t i, int m) {
    return static_cast<long long>(candidates[i].room) - static_cast<long long>(longest) + m;
  };
  const double plain_seconds = decode_seconds(0, n, 0, 0, 0);
  double best = plain_seconds > 0 ? (1.0 + kMinGain) / plain_seconds : 0.0;
  std::vector<int> level(n, 0);
  for (int top = 1; top <= block_; ++top) {
    std::size_t extra = 0, drafted = 0, projected = 0;
    for (std::size_t i = 0; i < n; ++i) {
      level[i] = static_cast<int>(std::clamp<long long>(needed(i, top), 0, candidates[i].max_k));
      extra += static_cast<std::size_t>(level[i]);
      if (level[i] > 0) {
        ++drafted;
        projected += candidates[i].pending;
      }
    }
    double progress = 1.0;
    for (int m = 1; m <= top; ++m) {
      double all_right = 1.0;
      for (std::size_t i = 0; i < n && all_right > 0; ++i) {
        const long long j = needed(i, m);
        if (j <= 0) continue;
        all_right *= j <= level[i] ? reaches[i][static_cast<std::size_t>(j)] : 0.0;
      }
      progress += all_right;
    }
    const double seconds = decode_seconds(0, n, extra, drafted, projected);
    if (seconds > 0 && progress / seconds > best) {
      best = progress / seconds;
      k = level;
    }
  }
  return k;
}

}  // namespace k3::model::engine
