// The run history as k3report reads it: series, trends, question-by-question comparisons, the
// latest run's regression check and the SVG chart, on histories written by append_history from
// hand-made runs.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/regex.h"
#include "eval/chart.h"
#include "eval/history.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

QuestionResult question(std::size_t id, const std::string& prediction, const std::string& label,
                        std::vector<std::int32_t> tokens) {
  QuestionResult q;
  q.id = id;
  q.prediction = prediction;
  q.label = label;
  q.correct = prediction == label;
  q.invalid = prediction == "-9999999";
  q.output_text = " #### " + prediction;
  q.completion_tokens = tokens.size();
  q.token_ids = std::move(tokens);
  return q;
}

RunRecord record(const std::string& checkpoint, const std::string& config, double accuracy,
                 const std::string& timestamp) {
  RunRecord r;
  r.timestamp = timestamp;
  r.version = "0.1.0";
  r.checkpoint = checkpoint;
  r.config_name = config;
  r.layout = "tp1 dp1 ep1";
  r.extractor = "sglang";
  r.verdict = "ok";
  r.num_shots = 5;
  r.num_questions = 4;
  r.accuracy = accuracy;
  r.invalid = 0.25;
  r.latency_s = 2;
  r.output_throughput = 40;
  return r;
}

// Appends `runs` to a fresh history in the test's scratch directory and loads it back.
History write_and_load(const std::vector<RunRecord>& runs) {
  const fs::path p = test::scratch_dir() / "history.h5";
  for (const RunRecord& r : runs) append_history(p, r);
  return load_history(p);
}

// A nightly series of "/ckpt/a" interleaved with runs of other checkpoints and configurations.
std::vector<RunRecord> mixed_runs() {
  std::vector<RunRecord> runs = {
      record("/ckpt/a", "nightly", 0.50, "2026-11-01T02:00:00Z"),   // 0
      record("/ckpt/b", "nightly", 0.90, "2026-11-01T03:00:00Z"),   // 1
      record("/ckpt/a/", "nightly", 0.60, "2026-11-02T02:00:00Z"),  // 2: same checkpoint
      record("/ckpt/a", "", 0.10, "2026-11-02T05:00:00Z"),          // 3: no configuration
      record("./ckpt/b", "production", 0.70, "2026-11-03T02:00:00Z"),
      record("/ckpt/a", "nightly", 0.55, "2026-11-03T02:00:00Z"),  // 5
  };
  runs[2].output_throughput = 50;
  runs[2].latency_s = 1.5;
  runs[2].invalid = 0;
  runs[5].output_throughput = 45;
  return runs;
}

// A minimal well-formedness check: every tag closed in order, attributes quoted, '&' only in
// entities, nothing after the root element.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t i = 0;
  bool root_closed = false;
  static const Regex entity("&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);");
  while (i < xml.size()) {
    if (xml[i] == '&') {
      if (!entity.find(xml, i, /*anchored=*/true)) return "bare & at " + std::to_string(i);
      ++i;
      continue;
    }
    if (xml[i] != '<') {
      if (root_closed && !std::isspace(static_cast<unsigned char>(xml[i])))
        return "text after the root element";
      ++i;
      continue;
    }
    const std::size_t end = xml.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.starts_with("?") || tag.starts_with("!--")) continue;
    if (tag.find('<') != std::string::npos) return "'<' inside tag " + tag;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unbalanced quotes in " + tag;
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) return "mismatched </" + tag.substr(1);
      open.pop_back();
      root_closed = open.empty();
      continue;
    }
    if (root_closed) return "second root element " + tag;
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (!tag.ends_with("/")) open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return root_closed ? "" : "no root element";
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// ---------------------------------------------------------------- loading

TEST(HistoryLoad, MissingTextAndEmptyHistoriesAreInputErrorsNamingTheFile) {
  const fs::path dir = test::scratch_dir();
  const fs::path missing = dir / "missing.h5";
  EXPECT_EQ(test::error_of([&] { load_history(missing); }),
            missing.string() + ": no such history file");
  const fs::path text = test::write_file(dir / "history.h5", "run 1: fine\n");
  EXPECT_EQ(test::error_of([&] { load_history(text); }),
            text.string() + ": not an HDF5 file, so not a k3eval history");

  // A history whose /runs group is empty (append_history never writes one; another tool may).
  const fs::path empty = dir / "empty.h5";
  {
    const hid_t file = H5Fcreate(empty.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    H5Tset_cset(str, H5T_CSET_UTF8);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t format = H5Acreate2(file, "format", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char* value = "k3eval-history";
    EXPECT_GE(H5Awrite(format, str, &value), 0);
    const hid_t version =
        H5Acreate2(file, "format_version", H5T_STD_U64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const std::uint64_t one = 1;
    EXPECT_GE(H5Awrite(version, H5T_NATIVE_UINT64, &one), 0);
    const hid_t runs = H5Gcreate2(file, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(runs, 0);
    H5Gclose(runs);
    H5Aclose(version);
    H5Aclose(format);
    H5Sclose(scalar);
    H5Tclose(str);
    H5Fclose(file);
  }
  EXPECT_TRUE(read_history(empty).empty());
  EXPECT_EQ(test::error_of([&] { load_history(empty); }),
            empty.string() + ": the history holds no runs");
}

TEST(HistoryLoad, UnknownRunNumbersNameTheFileAndTheRange) {
  const History h = write_and_load({record("/c", "", 0.5, "t0"), record("/c", "", 0.5, "t1")});
  EXPECT_EQ(h.runs.size(), 2u);
  EXPECT_EQ(&h.run(1), &h.runs[1]);
  EXPECT_EQ(test::error_of([&] { h.run(2); }),
            h.path.string() + ": no run 2; the history holds runs 0 to 1");
  EXPECT_EQ(test::error_of([&] { compare_runs(h, 0, 7); }),
            h.path.string() + ": no run 7; the history holds runs 0 to 1");
}

// ---------------------------------------------------------------- series

TEST(HistorySeries, GroupedByCheckpointAndConfigurationInRunOrder) {
  const History h = write_and_load(mixed_runs());
  const std::vector<Series> all = select_series(h, {});
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].name(), "checkpoint /ckpt/a, configuration nightly");
  EXPECT_EQ(all[0].runs, (std::vector<std::size_t>{0, 2, 5}));  // "/ckpt/a/" is "/ckpt/a"
  EXPECT_EQ(all[1].runs, (std::vector<std::size_t>{1}));
  EXPECT_EQ(all[2].name(), "checkpoint /ckpt/a, configuration (none)");
  EXPECT_EQ(all[3].runs, (std::vector<std::size_t>{4}));

  const auto only_a = select_series(h, {.checkpoint = "/ckpt/a/", .config_name = {}});
  ASSERT_EQ(only_a.size(), 2u);
  const auto none = select_series(h, {.checkpoint = {}, .config_name = ""});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].runs, (std::vector<std::size_t>{3}));
  const auto b = select_series(h, {.checkpoint = "ckpt/b", .config_name = {}});  // "./ckpt/b"
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].runs, (std::vector<std::size_t>{4}));

  EXPECT_EQ(latest_series(h, {}).runs, (std::vector<std::size_t>{0, 2, 5}));
  EXPECT_EQ(latest_series(h, {.checkpoint = "/ckpt/b", .config_name = {}}).runs,
            (std::vector<std::size_t>{1}));

  EXPECT_EQ(
      test::error_of([&] { select_series(h, {.checkpoint = "/x", .config_name = "nightly"}); }),
      h.path.string() +
          ": no run of checkpoint /x, configuration nightly; the history holds:\n"
          "  checkpoint /ckpt/a, configuration nightly (3 runs)\n"
          "  checkpoint /ckpt/b, configuration nightly (1 run)\n"
          "  checkpoint /ckpt/a, configuration (none) (1 run)\n"
          "  checkpoint ./ckpt/b, configuration production (1 run)");
}

// ---------------------------------------------------------------- trend

TEST(HistoryTrend, ChangesAgainstThePreviousRunOfTheSameSeries) {
  const History h = write_and_load(mixed_runs());
  const Series s = select_series(h, {})[0];
  const std::vector<TrendRow> rows = trend(h, s);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].run, 0u);
  EXPECT_TRUE(std::isnan(rows[0].accuracy_change));
  EXPECT_TRUE(std::isnan(rows[0].throughput_change));
  EXPECT_EQ(rows[1].run, 2u);  // not run 1, another checkpoint's
  EXPECT_NEAR(rows[1].accuracy_change, 0.10, 1e-12);
  EXPECT_NEAR(rows[1].invalid_change, -0.25, 1e-12);
  EXPECT_NEAR(rows[1].throughput_change, 0.25, 1e-12);  // 40 -> 50 token/s
  EXPECT_NEAR(rows[1].latency_change, -0.25, 1e-12);    // 2 -> 1.5 s
  EXPECT_EQ(rows[2].run, 5u);
  EXPECT_NEAR(rows[2].accuracy_change, -0.05, 1e-12);
  EXPECT_NEAR(rows[2].throughput_change, -0.10, 1e-12);
  EXPECT_EQ(rows[2].record->timestamp, "2026-11-03T02:00:00Z");

  // --last keeps the change against the run before the first row shown.
  const std::vector<TrendRow> last = trend(h, s, 2);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].run, 2u);
  EXPECT_NEAR(last[0].accuracy_change, 0.10, 1e-12);
  EXPECT_EQ(trend(h, s, 10).size(), 3u);

  const std::string table = format_trend(s, rows);
  EXPECT_EQ(table.substr(0, table.find('\n')), "checkpoint /ckpt/a, configuration nightly: 3 runs");
  EXPECT_NE(table.find("    0  2026-11-01T02:00:00Z          4     0.500        -    0.250        -"
                       "      40.000        -      2.000        -  ok\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("    2  2026-11-02T02:00:00Z          4     0.600   +0.100    0.000   -0.250"
                       "      50.000   +25.0%      1.500   -25.0%  ok\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("   -0.050"), std::string::npos) << table;
  const std::string tail = format_trend(s, last);
  EXPECT_EQ(tail.substr(0, tail.find('\n')),
            "checkpoint /ckpt/a, configuration nightly: last 2 of 3 runs");
}

TEST(HistoryTrend, NaNAccuracyOfARunWithoutQuestionsShowsAsADash) {
  RunRecord empty = record("/c", "", kNaN, "t1");
  empty.num_questions = 0;
  empty.invalid = kNaN;
  const History h = write_and_load({record("/c", "", 0.5, "t0"), empty});
  const Series s = select_series(h, {})[0];
  const auto rows = trend(h, s);
  EXPECT_TRUE(std::isnan(rows[1].accuracy_change));
  const std::string table = format_trend(s, rows);
  EXPECT_NE(table.find("    1  t1                            0         -        -        -"),
            std::string::npos)
      << table;
}

TEST(HistoryTrend, AcceptLengthAndRateColumnsWhenARunRecordedSpeculation) {
  RunRecord speculative = record("/c", "", 0.5, "t1");
  speculative.speculative = SpeculativeRun{"dspark", 4, SpeculativeMetrics::of(8, 32, 14), ""};
  const History h = write_and_load({record("/c", "", 0.5, "t0"), speculative});
  const Series s = select_series(h, {})[0];
  const std::string table = format_trend(s, trend(h, s));
  EXPECT_NE(table.find("latency s   change  accept len  accept rate  verdict\n"), std::string::npos)
      << table;
  // The run without speculation shows dashes; the columns stay aligned.
  EXPECT_NE(table.find("    0  t0                            4     0.500        -    0.250        -"
                       "      40.000        -      2.000        -           -            -  ok\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("    1  t1                            4     0.500   +0.000    0.250   +0.000"
                       "      40.000    +0.0%      2.000    +0.0%        2.75         0.44  ok\n"),
            std::string::npos)
      << table;
  // A table of runs without speculation only has no such columns.
  const std::string only_first = format_trend(s, {trend(h, s)[0]});
  EXPECT_EQ(only_first.find("accept"), std::string::npos) << only_first;
}

// ---------------------------------------------------------------- compare

TEST(HistoryCompare, QuestionByQuestion) {
  RunRecord a = record("/c", "nightly", 0.5, "2026-11-01T02:00:00Z");
  a.results = {question(0, "4", "4", {1, 2, 3}),         // stays correct, same tokens
               question(1, "7", "7", {4, 5, 6}),         // correct -> incorrect
               question(2, "9", "8", {7, 8}),            // incorrect -> correct
               question(3, "-9999999", "5", {9, 9, 9}),  // stays invalid, other tokens
               question(4, "11", "11", {1})};            // only in a
  RunRecord b = record("/c", "nightly", 0.75, "2026-11-02T02:00:00Z");
  b.results = {question(3, "-9999999", "5", {9, 9, 1, 2}),  // order differs from a's
               question(0, "4", "4", {1, 2, 3}), question(1, "70", "7", {4, 5, 6, 0}),
               question(2, "8", "8", {7, 3}), question(6, "1", "2", {5})};  // only in b
  const History h = write_and_load({a, b});
  const Comparison c = compare_runs(h, 0, 1);
  EXPECT_EQ(c.compared, 4u);
  EXPECT_EQ(c.same_tokens, 1u);
  EXPECT_EQ(c.answers_changed, 2u);
  EXPECT_EQ(c.became_correct, 1u);
  EXPECT_EQ(c.became_incorrect, 1u);
  EXPECT_EQ(c.only_a, (std::vector<std::size_t>{4}));
  EXPECT_EQ(c.only_b, (std::vector<std::size_t>{6}));
  ASSERT_EQ(c.changes.size(), 3u);
  EXPECT_EQ(c.changes[0].id, 1u);
  EXPECT_EQ(c.changes[0].first_token_difference, 3u);  // a prefix of the new tokens
  EXPECT_EQ(c.changes[1].first_token_difference, 1u);
  EXPECT_EQ(c.changes[2].old_prediction, "invalid");

  EXPECT_EQ(format_comparison(h, c),
            "run 0 (2026-11-01T02:00:00Z) -> run 1 (2026-11-02T02:00:00Z): checkpoint /c, "
            "configuration nightly\n"
            "  id 1: 7 -> 70, correct -> incorrect, tokens differ from position 3 (3 -> 4 tokens)\n"
            "  id 2: 9 -> 8, incorrect -> correct, tokens differ from position 1 (2 -> 2 tokens)\n"
            "  id 3: invalid -> invalid, still incorrect, tokens differ from position 2 (3 -> 4 "
            "tokens)\n"
            "accuracy: 0.500 -> 0.750 (+0.250)\n"
            "totals: 4 questions compared, 2 answers changed (1 correct -> incorrect, 1 incorrect "
            "-> correct), tokens identical for 1 of 4\n"
            "only in run 0: 1 question (ids 4)\n"
            "only in run 1: 1 question (ids 6)\n");

  // The same run against itself, and runs of different series.
  const std::string same = format_comparison(h, compare_runs(h, 1, 1));
  EXPECT_NE(same.find("  no answer and no token changed\n"), std::string::npos) << same;
  EXPECT_NE(same.find("tokens identical for 5 of 5"), std::string::npos) << same;
}

TEST(HistoryCompare, RunsOfDifferentSeriesAreNotedAndDuplicateIdsRefused) {
  RunRecord a = record("/c", "nightly", 0.5, "t0");
  a.results = {question(0, "1", "1", {1})};
  RunRecord b = record("/d", "nightly", 0.5, "t1");
  b.results = {question(0, "1", "1", {1}), question(0, "2", "1", {2})};
  const History h = write_and_load({a, a, b});
  EXPECT_NE(format_comparison(h, compare_runs(h, 0, 1)).find("no answer and no token changed"),
            std::string::npos);
  EXPECT_EQ(test::error_of([&] { compare_runs(h, 0, 2); }),
            h.path.string() + ": run 2 holds question id 0 twice");
  RunRecord c = b;
  c.results.pop_back();
  const History h2 = write_and_load({a, c});
  EXPECT_NE(format_comparison(h2, compare_runs(h2, 0, 1))
                .find("note: the runs are of different series; run 1 is checkpoint /d, "
                      "configuration nightly\n"),
            std::string::npos);
}

// ---------------------------------------------------------------- check

const Tolerance kExact{Tolerance::Mode::kAbsolute, 0.0};

TEST(HistoryCheck, VerdictsOfTheLatestRun) {
  RunRecord regressed = record("/c", "nightly", 0.5, "t1");
  regressed.verdict = "regression";
  regressed.baseline_accuracy = 0.9;
  regressed.threshold = 0.891;
  History h = write_and_load({record("/c", "nightly", 0.4, "t0"), regressed});
  CheckResult r = check_latest(h, {}, kExact);
  EXPECT_TRUE(r.regressed);
  EXPECT_EQ(r.run, 1u);
  EXPECT_EQ(r.line,
            "check: run 1 (checkpoint /c, configuration nightly) REGRESSION: verdict "
            "\"regression\" (accuracy 0.5000, baseline 0.9000, threshold 0.8910)");

  RunRecord error = record("/c", "nightly", 0.5, "t1");
  error.verdict = "error";
  error.log_errors = 3;
  h = write_and_load({error});
  r = check_latest(h, {}, kExact);
  EXPECT_TRUE(r.regressed);
  EXPECT_EQ(r.line,
            "check: run 0 (checkpoint /c, configuration nightly) REGRESSION: verdict \"error\" "
            "(accuracy 0.5000, 3 error(s) in the rank logs)");

  // With a baseline, an ok verdict stands even below the previous run.
  RunRecord passed = record("/c", "nightly", 0.3, "t1");
  passed.baseline_accuracy = 0.3;
  passed.threshold = 0.297;
  h = write_and_load({record("/c", "nightly", 0.9, "t0"), passed});
  r = check_latest(h, {}, kExact);
  EXPECT_FALSE(r.regressed);
  EXPECT_EQ(r.line,
            "check: run 1 (checkpoint /c, configuration nightly) ok: verdict ok against the "
            "baseline (accuracy 0.3000, threshold 0.2970)");
}

TEST(HistoryCheck, WithoutABaselineAgainstThePreviousRunOfTheSeries) {
  // Run 2 (another checkpoint) sits between the two runs of /c.
  History h = write_and_load({record("/c", "n", 0.50, "t0"), record("/d", "n", 0.10, "t1"),
                              record("/c", "n", 0.48, "t2")});
  EXPECT_TRUE(check_latest(h, {}, kExact).regressed) << "against run 0 of /c, not run 1 of /d";
  CheckResult r = check_latest(h, {.checkpoint = "/c", .config_name = {}}, kExact);
  EXPECT_TRUE(r.regressed);
  EXPECT_EQ(r.run, 2u);
  EXPECT_EQ(r.line,
            "check: run 2 (checkpoint /c, configuration n) REGRESSION: accuracy 0.4800 is below "
            "0.5000 (previous run 0: 0.5000 - 0 (absolute tolerance))");
  EXPECT_FALSE(
      check_latest(h, {}, Tolerance{Tolerance::Mode::kAbsolute, 0.02}).regressed);  // 0.48 >= 0.48
  EXPECT_TRUE(check_latest(h, {}, Tolerance{Tolerance::Mode::kAbsolute, 0.01}).regressed);
  // SGLang's relative rule: 0.48 < 0.50 x 0.99 = 0.495, but >= 0.50 x 0.95.
  EXPECT_TRUE(check_latest(h, {}, Tolerance{Tolerance::Mode::kRelative, 0.99}).regressed);
  r = check_latest(h, {}, Tolerance{Tolerance::Mode::kRelative, 0.95});
  EXPECT_FALSE(r.regressed);
  EXPECT_EQ(r.line,
            "check: run 2 (checkpoint /c, configuration n) ok: accuracy 0.4800 >= 0.4750 "
            "(previous run 0: 0.5000 x 0.95 (relative tolerance))");

  // The latest run of /d is its first: nothing to compare with.
  r = check_latest(h, {.checkpoint = "/d", .config_name = {}}, kExact);
  EXPECT_FALSE(r.regressed);
  EXPECT_EQ(r.line,
            "check: run 1 (checkpoint /d, configuration n) ok: accuracy 0.1000, no baseline and no "
            "previous run to compare with");

  // Equal accuracy is no regression; a run without questions is one.
  h = write_and_load({record("/c", "n", 0.5, "t0"), record("/c", "n", 0.5, "t1")});
  EXPECT_FALSE(check_latest(h, {}, kExact).regressed);
  h = write_and_load({record("/c", "n", 0.5, "t0"), record("/c", "n", kNaN, "t1")});
  EXPECT_TRUE(check_latest(h, {}, kExact).regressed);
  h = write_and_load({record("/c", "n", kNaN, "t0"), record("/c", "n", 0.1, "t1")});
  r = check_latest(h, {}, kExact);
  EXPECT_FALSE(r.regressed);
  EXPECT_NE(r.line.find("previous run 0 has no accuracy to compare with"), std::string::npos);
}

// ---------------------------------------------------------------- throughput runs

RunRecord throughput_run(const std::string& checkpoint, double tokens_per_s, const std::string& t) {
  RunRecord r = record(checkpoint, "n", kNaN, t);
  r.kind = "throughput";
  r.invalid = kNaN;
  r.num_questions = 8;
  r.input_tokens = 256;
  r.completion_tokens = 48;
  r.output_throughput = tokens_per_s;
  return r;
}

TEST(HistoryThroughput, OwnSeriesBesideTheEvaluationsJudgedOnTokensPerSecond) {
  // Evaluations and throughput runs of one checkpoint and configuration, interleaved.
  const History h =
      write_and_load({record("/c", "n", 0.5, "t0"), throughput_run("/c", 100, "t1"),
                      record("/c", "n", 0.5, "t2"), throughput_run("/c", 80, "t3")});
  const auto series = select_series(h, {});
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].runs, (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(series[1].runs, (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(series[1].name(), "checkpoint /c, configuration n, offline throughput runs");
  // The trend of the throughput runs compares them with each other: -20 %, no accuracy.
  const auto rows = trend(h, series[1]);
  EXPECT_NEAR(rows[1].throughput_change, -0.2, 1e-12);
  const std::string table = format_trend(series[1], rows);
  EXPECT_NE(table.find("requests"), std::string::npos) << table;
  EXPECT_NE(table.find("-20.0%"), std::string::npos) << table;
  // The latest run is a throughput run 20 % below the previous one.
  CheckResult r = check_latest(h, {}, Tolerance{Tolerance::Mode::kRelative, 0.9});
  EXPECT_TRUE(r.regressed);
  EXPECT_EQ(r.line,
            "check: run 3 (checkpoint /c, configuration n, offline throughput runs) REGRESSION: "
            "output throughput 80.000 token/s is below 90.000 (previous run 1: 100.000 x 0.9 "
            "(relative tolerance))");
  EXPECT_FALSE(check_latest(h, {}, Tolerance{Tolerance::Mode::kRelative, 0.8}).regressed);
  // A throughput baseline recorded with the run decides instead.
  RunRecord judged = throughput_run("/c", 80, "t4");
  judged.baseline_output_throughput = 75;
  judged.throughput_threshold = 67.5;
  r = check_latest(write_and_load({throughput_run("/c", 200, "t0"), judged}), {},
                   Tolerance{Tolerance::Mode::kRelative, 0.99});
  EXPECT_FALSE(r.regressed) << r.line;
  EXPECT_NE(r.line.find("against the throughput baseline"), std::string::npos) << r.line;
  judged.verdict = "regression";
  EXPECT_TRUE(check_latest(write_and_load({judged}), {}, kExact).regressed);
  // compare is question by question: it refuses a throughput run, saying where to look.
  const std::string message = test::error_of([&] { compare_runs(h, 0, 1); });
  EXPECT_NE(message.find("run 1 is an offline throughput run"), std::string::npos) << message;
}

// ---------------------------------------------------------------- plot

TEST(HistoryPlot, WellFormedSvgWithAxesPointsLinesTitleAndLegend) {
  std::vector<RunRecord> runs = mixed_runs();
  runs[5].verdict = "regression";
  const History h = write_and_load(runs);
  const Series s = select_series(h, {})[0];  // runs 0, 2, 5
  const std::string svg = plot_svg(h, s);
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_TRUE(svg.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "));
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find(">GSM8K accuracy and output throughput</text>"), std::string::npos);
  EXPECT_NE(svg.find("checkpoint /ckpt/a, configuration nightly; 3 runs, 2026-11-01 to "
                     "2026-11-03"),
            std::string::npos);
  EXPECT_NE(svg.find("<g id=\"legend\">"), std::string::npos);
  EXPECT_NE(svg.find("<g id=\"accuracy\">"), std::string::npos);
  EXPECT_NE(svg.find("<g id=\"throughput\">"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2u);  // one line per panel
  // 3 points per panel, the legend's 2 points and its red ring; a red ring per panel.
  EXPECT_EQ(count(svg, "<circle cx="), 9u);
  EXPECT_EQ(count(svg, "<circle class=\"alarm\""), 2u);
  EXPECT_NE(svg.find("<title>run 5 (2026-11-03T02:00:00Z): accuracy 0.550, verdict "
                     "regression</title>"),
            std::string::npos);
  // Accuracy 0 to 1 by 0.2; throughput up to 50 token/s by 10.
  for (const char* tick : {">0.0</text>", ">0.2</text>", ">1.0</text>", ">0</text>", ">10</text>",
                           ">50</text>", ">2026-11-02</text>", ">5</text>"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
  EXPECT_NE(svg.find(">output throughput (token/s)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">run (in time order)</text>"), std::string::npos);

  const fs::path out = h.path.parent_path() / "trend.svg";
  write_plot(out, h, s);
  EXPECT_EQ(test::read_file(out), svg);
  const fs::path bad = h.path.parent_path() / "no-such-dir" / "trend.svg";
  EXPECT_NE(test::error_of([&] { write_plot(bad, h, s); }).find(bad.string()), std::string::npos);
}

TEST(HistoryPlot, HostileNamesOneRunGapsAndSmallThroughputs) {
  RunRecord odd = record("/ck<&>\"'\x01\xff", "n&b", 0.5, "2026-11-01T00:00:00Z");
  odd.output_throughput = 0.37;
  RunRecord empty = odd;
  empty.accuracy = kNaN;
  RunRecord third = odd;
  third.output_throughput = 0.21;
  History h = write_and_load({odd});
  std::string svg = plot_svg(h, select_series(h, {})[0]);
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_NE(svg.find("checkpoint /ck&lt;&amp;&gt;&quot;&apos;\xEF\xBF\xBD\xEF\xBF\xBD, "
                     "configuration n&amp;b; 1 run, 2026-11-01"),
            std::string::npos)
      << svg;
  EXPECT_EQ(count(svg, "<polyline"), 0u);         // one point draws no line
  EXPECT_EQ(count(svg, "<circle cx="), 2u + 3u);  // and the legend's 3

  h = write_and_load({odd, empty, third});
  svg = plot_svg(h, select_series(h, {})[0]);
  test::write_file(h.path.parent_path() / "hostile.svg", svg);  // for a look, or xmllint
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_EQ(count(svg, "<circle cx="), 2u + 3u + 3u);  // no accuracy point for the NaN run
  EXPECT_EQ(count(svg, "<polyline"), 1u);              // accuracy broken into two single points
  for (const char* tick : {">0.0</text>", ">0.1</text>", ">0.4</text>"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
}

TEST(HistoryPlot, ManyRunsLabelEveryFewOnesCountedBackFromTheLatest) {
  std::vector<RunRecord> runs;
  for (int i = 0; i < 30; ++i) {
    runs.push_back(record("/c", "n", 0.01 * i, "2026-11-" + std::to_string(10 + i / 3) + "T00"));
  }
  const History h = write_and_load(runs);
  const std::string svg = plot_svg(h, select_series(h, {})[0]);
  EXPECT_EQ(xml_problem(svg), "");
  // 30 runs, every 3rd labelled: 29, 26, ..., 2 in both panels.
  EXPECT_NE(svg.find(">29</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">28</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "text-anchor=\"middle\" fill=\"#666666\""), 10u);  // dates, bottom panel
}

TEST(XmlEscape, EntitiesInvalidUtf8AndForbiddenCharacters) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\t\n"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\t\n");
  const std::string bad = "\xEF\xBF\xBD";
  EXPECT_EQ(xml_escape(std::string("x\0y", 3)), "x" + bad + "y");
  EXPECT_EQ(xml_escape("\xff"), bad);
  EXPECT_EQ(xml_escape("\xc0\xaf"), bad + bad);            // overlong '/'
  EXPECT_EQ(xml_escape("\xed\xa0\x80"), bad + bad + bad);  // a UTF-16 surrogate
  EXPECT_EQ(xml_escape("\xe2\x82"), bad);                  // cut short: one maximal subpart
  EXPECT_EQ(xml_escape("\xe2\x82x"), bad + "x");
  EXPECT_EQ(xml_escape("\xef\xbf\xbe"), bad);              // U+FFFE, a valid but forbidden character
}

}  // namespace
}  // namespace k3::eval
