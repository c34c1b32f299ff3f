// The speculation policy without an engine: acceptance counting, the step-time model, and the
// per-request draft lengths it picks for known costs and acceptance.
#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "model/engine/speculation.h"

namespace k3::test {
namespace {

using model::engine::AcceptanceStats;
using model::engine::Speculation;
using model::engine::SpeculationCandidate;
using model::engine::SpeculationOptions;
using model::engine::StepCostModel;

// `rounds` proposals of request `id` whose first `right` drafts are right (block 7).
void observe(AcceptanceStats& stats, std::uint64_t id, int rounds, int right) {
  const std::vector<std::int32_t> drafts = {1, 2, 3, 4, 5, 6, 7};
  std::vector<std::int32_t> committed = drafts;
  if (right < 7) committed[static_cast<std::size_t>(right)] = 99;
  for (int r = 0; r < rounds; ++r) stats.observe(id, drafts, committed);
}

// Target steps costing fixed + per_row x rows, the drafter `draft` per call.
void cost(Speculation& s, double fixed, double per_row, double draft) {
  for (std::size_t rows : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512})
    s.cost().observe_target(rows, fixed + per_row * static_cast<double>(rows));
  for (std::size_t n : {1, 2, 4, 8, 16, 32, 64}) s.cost().observe_draft(n, draft);
}

std::vector<SpeculationCandidate> candidates(int n, int max_k = 7) {
  std::vector<SpeculationCandidate> c;
  for (int i = 0; i < n; ++i) c.push_back({static_cast<std::uint64_t>(i), max_k});
  return c;
}

TEST(AcceptanceStats, CountsPositionsUpToTheFirstWrongDraft) {
  AcceptanceStats stats(7);
  observe(stats, 1, 50, 2);  // positions 1, 2 right, 3 wrong, 4.. never tried
  EXPECT_GT(stats.accept_probability(1, 1), 0.9);
  EXPECT_GT(stats.accept_probability(1, 2), 0.9);
  EXPECT_LT(stats.accept_probability(1, 3), 0.1);
  // No evidence: the optimistic prior (3 right of 4), so that the policy tries the drafter.
  EXPECT_NEAR(stats.accept_probability(1, 4), 0.75, 1e-9);
  // Only the committed tokens known so far count: one known and right tries position 1 only.
  // (Request 2's one success, with the counts over all requests, 4/5, as a prior of weight 4.)
  AcceptanceStats partial(7);
  partial.observe(2, std::vector<std::int32_t>{5, 6, 7}, std::vector<std::int32_t>{5});
  EXPECT_NEAR(partial.accept_probability(2, 1), (1.0 + 4.0 * 4.0 / 5.0) / 5.0, 1e-9);
  EXPECT_NEAR(partial.accept_probability(2, 2), 0.75, 1e-9);
}

TEST(AcceptanceStats, ANewRequestStartsFromEveryRequestsCounts) {
  AcceptanceStats stats(7);
  observe(stats, 1, 100, 7);
  EXPECT_GT(stats.accept_probability(42, 5), 0.95);
  stats.forget(1);
  EXPECT_GT(stats.accept_probability(1, 5), 0.95);  // the counts over all requests stay
}

TEST(AcceptanceStats, OldEvidenceFadesSoThePolicyTriesAgain) {
  AcceptanceStats stats(7);
  observe(stats, 1, 20, 0);  // every first draft wrong
  EXPECT_LT(stats.accept_probability(1, 1), 0.15);
  for (int step = 0; step < 200; ++step) stats.age();
  EXPECT_GT(stats.accept_probability(1, 1), 0.7);  // back near the optimistic prior
  observe(stats, 1, 3, 7);  // new evidence counts in full
  EXPECT_GT(stats.accept_probability(1, 1), 0.8);
}

TEST(StepCostModel, InterpolatesBetweenMeasuredRowsAndExtrapolatesBeyond) {
  StepCostModel m;
  m.observe_target(8, 1.0);
  m.observe_target(16, 2.0);
  EXPECT_DOUBLE_EQ(m.target_seconds(12), 1.5);
  EXPECT_DOUBLE_EQ(m.target_seconds(32), 4.0);  // the last two points' slope
  EXPECT_DOUBLE_EQ(m.target_seconds(1), 1.0);   // below: the smallest measured step
  m.observe_target(16, 4.0);                    // a new measurement moves the point
  EXPECT_GT(m.target_seconds(16), 2.0);
  EXPECT_LT(m.target_seconds(16), 4.0);
  EXPECT_DOUBLE_EQ(m.draft_seconds(0), 0.0);
}

TEST(StepCostModel, AMeasurementScalesTheCalibratedCurveAroundIt) {
  StepCostModel m;
  for (std::size_t rows : {8, 16, 32}) m.calibrate_target(rows, static_cast<double>(rows) / 8);
  m.calibrate_target(16, 5.0);  // the faster of two calibrations counts
  EXPECT_DOUBLE_EQ(m.target_seconds(16), 2.0);
  // A real step at 16 rows takes twice the calibrated time: the rows around it follow, so an
  // extra row costs what the calibrated slope says, scaled, never nothing.
  m.observe_target(16, 4.0);
  EXPECT_DOUBLE_EQ(m.target_seconds(16), 4.0);
  EXPECT_DOUBLE_EQ(m.target_seconds(24), 6.0);
  EXPECT_DOUBLE_EQ(m.target_seconds(64), 16.0);  // beyond: the calibrated slope, scaled
  EXPECT_GT(m.target_seconds(17), m.target_seconds(16));
}

TEST(StepCostModel, AMeasuredStepKeepsItsTimeWhenALaterCalibrationReshapesTheCurve) {
  StepCostModel m;
  // The warm-up calibrates a few rows; a 512-row prefill step is measured far beyond them.
  for (std::size_t rows : {1, 2, 4, 8}) m.calibrate_target(rows, 0.01 + 0.001 * rows);
  m.observe_target(512, 0.6);
  EXPECT_DOUBLE_EQ(m.target_seconds(512), 0.6);
  // The job's batch then calibrates larger steps, with a steeper slope than 4 to 8 rows showed:
  // the step measured at 512 rows still took 0.6 s.
  for (std::size_t rows : {16, 32, 64, 128}) m.calibrate_target(rows, 0.002 * rows);
  EXPECT_NEAR(m.target_seconds(512), 0.6, 1e-12);
  // Without a shape, measurements are seconds; a first calibration keeps them too.
  StepCostModel online;
  online.observe_target(10, 0.05);
  online.calibrate_target(10, 0.02);
  online.calibrate_target(20, 0.04);
  EXPECT_NEAR(online.target_seconds(10), 0.05, 1e-12);
  EXPECT_NEAR(online.target_seconds(20), 0.10, 1e-12);  // scaled as the measurement beside it
}

TEST(StepCostModel, StepsAreComputeBoundOnceDoublingTheRowsNearlyDoublesTheTime) {
  EXPECT_FALSE(StepCostModel::compute_bound(16, 0.100, 32, 0.150));  // memory-bound: rows cheap
  EXPECT_FALSE(StepCostModel::compute_bound(16, 0.100, 32, 0.185));
  EXPECT_TRUE(StepCostModel::compute_bound(16, 0.100, 32, 0.191));  // 2 / 1.05 = 1.905
  EXPECT_TRUE(StepCostModel::compute_bound(16, 0.100, 32, 0.206));  // the deep pair's batch 16
  EXPECT_TRUE(StepCostModel::compute_bound(40, 0.100, 80, 0.250));
  EXPECT_FALSE(StepCostModel::compute_bound(64, 0.100, 80, 0.110));  // 1.25x rows, 1.1x time
}

TEST(StepCostModel, TheCalibratedCurveNeverFallsWithMoreRows) {
  StepCostModel m;
  m.calibrate_target(8, 2.0);
  m.calibrate_target(16, 1.0);  // measured in a quieter moment than the point before it
  m.calibrate_target(32, 3.0);
  EXPECT_DOUBLE_EQ(m.target_seconds(16), 2.0);
  EXPECT_DOUBLE_EQ(m.target_seconds(12), 2.0);
  EXPECT_EQ(m.calibrated_requests(), 0u);
  m.calibrate_draft(4, 0.1);
  EXPECT_EQ(m.calibrated_requests(), 4u);
  EXPECT_DOUBLE_EQ(m.projection_seconds(0), 0.0);
}

TEST(StepCostModel, ARestoredCalibrationPredictsWhatTheMeasuredOneDid) {
  StepCostModel measured;
  for (std::size_t rows : {1, 10, 20, 40}) measured.calibrate_target(rows, 0.01 + 0.002 * rows);
  measured.calibrate_draft(1, 0.007);
  measured.calibrate_draft(10, 0.04);
  measured.calibrate_projection(64, 0.0025);
  measured.observe_target(10, 0.06);  // a real step: not part of the calibration
  const StepCostModel::Calibration kept = measured.calibration();
  ASSERT_EQ(kept.target.size(), 4u);
  EXPECT_EQ(kept.target[3], (std::pair<std::size_t, double>(40, 0.09)));
  StepCostModel restored;
  restored.restore(kept);
  EXPECT_EQ(restored.calibrated_requests(), 10u);
  for (std::size_t rows : {1, 7, 20, 33, 80}) {
    EXPECT_NEAR(restored.target_seconds(rows), 0.01 + 0.002 * static_cast<double>(rows), 1e-12)
        << rows;
  }
  EXPECT_DOUBLE_EQ(restored.draft_seconds(10), 0.04);
  EXPECT_DOUBLE_EQ(restored.projection_seconds(64), 0.0025);
}

TEST(Speculation, WithoutEvidenceItDraftsToLearnWhatTheDrafterIsWorth) {
  Speculation s(7, {});
  cost(s, 0.050, 0.0005, 0.010);
  for (int k : s.choose(candidates(4), 0)) EXPECT_GT(k, 0);
}

TEST(Speculation, PromptRowsInTheStepDoNotMakeVerifyRowsLookCheap) {
  Speculation s(7, {});
  cost(s, 0.100, 0.0001, 0.010);  // memory-bound: alone, verifying pays
  for (int id = 0; id < 4; ++id) observe(s.acceptance(), static_cast<std::uint64_t>(id), 50, 7);
  for (int k : s.choose(candidates(4), 0)) EXPECT_EQ(k, 7);
  // Beside a 512-row prompt chunk the weights are read anyway: the decode rows add only their
  // own rows' time, and the drafter's call would cost more than the extra tokens save.
  for (int k : s.choose(candidates(4), 512)) EXPECT_EQ(k, 0);
}

TEST(Speculation, ARequestWithALongBacklogPaysForProjectingItFirst) {
  Speculation s(7, {});
  cost(s, 0.050, 0.0005, 0.002);
  for (std::size_t rows : {1, 64, 128}) s.cost().calibrate_projection(rows, 0.004 * rows);
  observe(s.acceptance(), 0, 50, 2);
  observe(s.acceptance(), 1, 50, 2);
  std::vector<SpeculationCandidate> c = {{0, 7, 0}, {1, 7, 64}};
  const auto k = s.choose(c, 0);
  EXPECT_GT(k[0], 0);
  EXPECT_EQ(k[1], 0);  // 64 rows to project (0.256 s) first: not worth two tokens
}

TEST(Speculation, PicksNoDraftsWhenVerifyingCostsMoreThanItSaves) {
  Speculation s(7, {});
  cost(s, 0.0, 0.010, 0.005);  // compute-bound: every row costs the same
  observe(s.acceptance(), 0, 50, 1);  // about one right draft per round
  for (int n : {1, 4, 16}) {
    for (int k : s.choose(candidates(n), 0)) EXPECT_EQ(k, 0) << n << " requests";
  }
}

TEST(Speculation, PicksTheWholeBlockWhenAcceptanceIsHighAndTheStepIsMemoryBound) {
  Speculation s(7, {});
  cost(s, 0.100, 0.0001, 0.010);  // reading the weights dominates: extra rows are cheap
  for (int id = 0; id < 4; ++id) observe(s.acceptance(), static_cast<std::uint64_t>(id), 50, 7);
  for (int k : s.choose(candidates(4), 0)) EXPECT_EQ(k, 7);
  // A request near its max_new_tokens verifies only the drafts it can use.
  auto near_end = candidates(1, 3);
  EXPECT_EQ(s.choose(near_end, 0), std::vector<int>{3});
}

TEST(Speculation, ARequestWhoseAcceptanceCollapsesDropsItsDraftLength) {
  Speculation s(7, {});
  cost(s, 0.050, 0.002, 0.010);  // between the two: rows cost something
  for (int id = 0; id < 2; ++id) observe(s.acceptance(), static_cast<std::uint64_t>(id), 30, 7);
  const auto before = s.choose(candidates(2), 0);
  EXPECT_GT(before[0], 2);
  EXPECT_EQ(before[0], before[1]);
  observe(s.acceptance(), 1, 200, 0);  // request 1's drafts are now always wrong
  const auto after = s.choose(candidates(2), 0);
  EXPECT_EQ(after[0], before[0]);
  EXPECT_LT(after[1], before[1]);
}

// Requests with their rooms (tokens each may still generate), block 7.
std::vector<SpeculationCandidate> with_rooms(std::vector<std::size_t> rooms) {
  std::vector<SpeculationCandidate> c;
  for (std::size_t i = 0; i < rooms.size(); ++i)
    c.push_back({static_cast<std::uint64_t>(i), 7, 0, rooms[i]});
  return c;
}

TEST(Speculation, ADrainingGroupInLockstepDraftsOnlyWhenEveryRequestWouldAdvance) {
  Speculation s(7, {});
  cost(s, 0.030, 0.0005, 0.010);
  // Each request's first draft right half the time, the later ones always.
  for (int id = 0; id < 10; ++id) {
    observe(s.acceptance(), static_cast<std::uint64_t>(id), 25, 7);
    observe(s.acceptance(), static_cast<std::uint64_t>(id), 25, 0);
  }
  const auto lockstep = with_rooms(std::vector<std::size_t>(10, 40));
  // With a queue behind them every right draft is a token the queue gets sooner.
  for (int k : s.choose(lockstep, 0, false)) EXPECT_GT(k, 0);
  // Draining, the group ends with its last request: ten in lockstep all advance only with
  // probability 0.5^10, which no drafter call is worth.
  for (int k : s.choose(lockstep, 0, true)) EXPECT_EQ(k, 0);
}

TEST(Speculation, ADrainingGroupDraftsForTheRequestThatWouldFinishLast) {
  Speculation s(7, {});
  cost(s, 0.030, 0.0005, 0.002);
  for (int id = 0; id < 4; ++id) observe(s.acceptance(), static_cast<std::uint64_t>(id), 50, 7);
  // Request 0 has 30 tokens to go, the others 20 at most: only its drafts shorten the run, and
  // it needs 10 more tokens than the next before theirs would matter.
  const auto k = s.choose(with_rooms({30, 20, 12, 20}), 0, true);
  EXPECT_EQ(k[0], 7);
  EXPECT_EQ(k[1], 0);
  EXPECT_EQ(k[2], 0);
  EXPECT_EQ(k[3], 0);
  // Two tokens apart, both must advance for the run to gain more than two.
  const auto close = s.choose(with_rooms({30, 28}), 0, true);
  EXPECT_EQ(close[0], 7);
  EXPECT_EQ(close[1], 5);
}

TEST(Speculation, ARequestAloneDrainsAsGoodputWouldChoose) {
  Speculation s(7, {});
  cost(s, 0.030, 0.002, 0.004);
  observe(s.acceptance(), 0, 50, 3);
  const auto alone = with_rooms({100});
  EXPECT_EQ(s.choose(alone, 0, true), s.choose(alone, 0, false));
  EXPECT_GT(s.choose(alone, 0, true)[0], 0);
}

TEST(Speculation, FixedAndForcedLengthsAreClampedToWhatEachRequestCanUse) {
  SpeculationOptions fixed;
  fixed.adaptive = false;
  fixed.fixed_k = 5;
  Speculation s(7, fixed);
  EXPECT_EQ(s.choose(std::vector<SpeculationCandidate>{{0, 7}, {1, 2}}, 0),
            (std::vector<int>{5, 2}));
  SpeculationOptions forced;
  forced.forced = [](std::span<const SpeculationCandidate> c) {
    return std::vector<int>(c.size(), 9);
  };
  Speculation f(7, forced);
  EXPECT_FALSE(f.adaptive());
  EXPECT_EQ(f.choose(std::vector<SpeculationCandidate>{{0, 7}, {1, 4}}, 0),
            (std::vector<int>{7, 4}));
  SpeculationOptions too_long;
  too_long.adaptive = false;
  too_long.fixed_k = 8;
  EXPECT_THROW(Speculation(7, too_long), k3::UsageError);
}

// Whether a drafter context is worth keeping: only the costs decide, as if every draft were
// right; a fixed, forced or not yet measured policy always keeps it.
TEST(Speculation, DraftingCouldPayOnlyWhereVerifyRowsCostLessThanAPerfectDraftSaves) {
  Speculation compute_bound(7, {});
  cost(compute_bound, 0.0, 0.010, 0.005);  // every row costs the same, the drafter more on top
  observe(compute_bound.acceptance(), 0, 50, 7);  // even a drafter that is always right
  for (int n : {1, 4, 16}) {
    EXPECT_FALSE(compute_bound.could_pay(candidates(n), 0)) << n << " requests";
    EXPECT_FALSE(compute_bound.could_pay(candidates(n), 0, true)) << n << " requests, draining";
  }
  Speculation memory_bound(7, {});
  cost(memory_bound, 0.100, 0.0001, 0.010);
  observe(memory_bound.acceptance(), 0, 50, 0);  // a drafter that is never right: choose() says
  EXPECT_EQ(memory_bound.choose(candidates(1), 0), std::vector<int>{0});  // no drafts now,
  EXPECT_TRUE(memory_bound.could_pay(candidates(1), 0));  // but its context is kept
  EXPECT_TRUE(memory_bound.could_pay(candidates(4), 0, true));
  // A backlog to project does not count against keeping the context: it is paid once.
  std::vector<SpeculationCandidate> backlog = {{0, 7, 64}};
  EXPECT_TRUE(memory_bound.could_pay(backlog, 0));
  // Requests that can draft no more (max_k 0) can pay nothing.
  EXPECT_FALSE(memory_bound.could_pay(candidates(2, 0), 0));
  SpeculationOptions fixed;
  fixed.adaptive = false;
  Speculation f(7, fixed);
  cost(f, 0.0, 0.010, 0.005);
  EXPECT_TRUE(f.could_pay(candidates(16), 0));
  Speculation unmeasured(7, {});
  EXPECT_TRUE(unmeasured.could_pay(candidates(16), 0));
}

TEST(Speculation, WithoutAMeasuredCostItVerifiesTheWholeBlock) {
  Speculation s(7, {});
  EXPECT_FALSE(s.calibrated());
  EXPECT_EQ(s.choose(candidates(2), 0), (std::vector<int>{7, 7}));
}

}  // namespace
}  // namespace k3::test
