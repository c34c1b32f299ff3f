// Baselines: relative and absolute tolerances as SGLang's tests apply them, golden token
// completions, and malformed baseline files named with the offending key.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/baseline.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;

Metrics metrics(std::size_t correct, std::size_t questions) {
  Metrics m;
  m.questions = questions;
  m.correct = correct;
  return m;
}

Baseline baseline_from(const std::string& json) {
  return read_baseline(test::write_file(test::scratch_dir() / "baseline.json", json));
}

std::string baseline_error(const std::string& json) {
  const fs::path p = test::write_file(test::scratch_dir() / "baseline.json", json);
  const std::string message = test::error_of([&] { read_baseline(p); });
  return message.rfind(p.string(), 0) == 0 ? message.substr(p.string().size()) : message;
}

std::vector<QuestionResult> with_tokens(std::vector<std::vector<std::int32_t>> tokens) {
  std::vector<QuestionResult> out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    QuestionResult r;
    r.id = i;
    r.token_ids = tokens[i];
    out.push_back(r);
  }
  return out;
}

TEST(Baseline, RelativeToleranceLikeSglangsNpuNightly) {
  const Baseline b =
      baseline_from(R"({"accuracy": 0.95, "tolerance": {"mode": "relative", "value": 0.99}})");
  EXPECT_DOUBLE_EQ(b.threshold(), 0.9405);
  const Verdict pass = judge(b, metrics(189, 200), {});  // 0.945
  EXPECT_TRUE(pass.pass);
  EXPECT_TRUE(pass.reasons.empty());
  EXPECT_EQ(pass.exit_code(), ExitCode::kOk);
  const Verdict fail = judge(b, metrics(188, 200), {});  // 0.94
  EXPECT_FALSE(fail.pass);
  EXPECT_EQ(fail.exit_code(), ExitCode::kRegression);
  EXPECT_EQ(static_cast<int>(fail.exit_code()), 1);
  ASSERT_EQ(fail.reasons.size(), 1u);
  EXPECT_EQ(fail.reasons[0],
            "accuracy 0.9400 is below the threshold 0.9405 (baseline 0.9500, relative "
            "tolerance 0.99)");
}

TEST(Baseline, AbsoluteToleranceIncludesTheThreshold) {
  const Baseline b =
      baseline_from(R"({"accuracy": 0.75, "tolerance": {"mode": "absolute", "value": 0.25}})");
  EXPECT_EQ(b.threshold(), 0.5);
  EXPECT_TRUE(judge(b, metrics(100, 200), {}).pass);  // exactly at the threshold
  const Verdict fail = judge(b, metrics(99, 200), {});
  EXPECT_FALSE(fail.pass);
  EXPECT_EQ(fail.reasons[0],
            "accuracy 0.4950 is below the threshold 0.5000 (baseline 0.7500, absolute "
            "tolerance 0.25)");
  // No questions at all never passes.
  EXPECT_FALSE(judge(b, metrics(0, 0), {}).pass);
}

TEST(Baseline, GoldenCompletionsMustMatchTokenForToken) {
  const Baseline b = baseline_from(R"({"accuracy": 0.0,
      "tolerance": {"mode": "absolute", "value": 0},
      "golden": [{"id": 0, "token_ids": [5, 6, 7]}, {"id": 2, "token_ids": [1, 2]},
                 {"id": 1, "token_ids": [9]}],
      "description": "tiny synthetic checkpoint, TP1", "benchmark": "gsm8k"})");
  EXPECT_EQ(b.description, "tiny synthetic checkpoint, TP1");
  EXPECT_FALSE(b.num_questions);
  ASSERT_EQ(b.golden.size(), 3u);
  const Verdict same = judge(b, metrics(0, 3), with_tokens({{5, 6, 7}, {9}, {1, 2}}));
  EXPECT_TRUE(same.pass);

  const Verdict differ = judge(b, metrics(3, 3), with_tokens({{5, 8, 7}, {9}, {1, 2, 3}}));
  EXPECT_FALSE(differ.pass);
  ASSERT_EQ(differ.golden_mismatches.size(), 2u);
  EXPECT_EQ(differ.golden_mismatches[0].id, 0u);
  EXPECT_EQ(differ.golden_mismatches[0].position, 1u);
  EXPECT_EQ(differ.golden_mismatches[1].id, 2u);
  EXPECT_EQ(differ.golden_mismatches[1].position, 2u);
  ASSERT_EQ(differ.reasons.size(), 1u);  // accuracy itself passes
  EXPECT_EQ(differ.reasons[0],
            "2 of 3 golden completions differ: id 0 from token 1 (3 tokens, 3 expected); id 2 "
            "from token 2 (3 tokens, 2 expected)");
}

TEST(Baseline, MustFitTheRunsQuestions) {
  const Baseline b = baseline_from(R"({"accuracy": 0.5, "num_questions": 3,
      "tolerance": {"mode": "relative", "value": 1},
      "golden": [{"id": 7, "token_ids": []}, {"id": 9, "token_ids": []}]})");
  EXPECT_EQ(b.num_questions, 3u);
  const std::vector<std::size_t> two = {0, 1};
  EXPECT_EQ(test::error_of([&] { check_baseline_fits(b, two); }),
            b.source +
                " was measured on 3 questions, this run evaluates 2 (accuracies over different "
                "question sets are not comparable)");
  const std::vector<std::size_t> ids = {0, 1, 7};
  EXPECT_EQ(test::error_of([&] { check_baseline_fits(b, ids); }),
            b.source + ": golden completions for question ids 9 that this run does not evaluate");
  const std::vector<std::size_t> fits = {9, 1, 7};
  EXPECT_EQ(test::error_of([&] { check_baseline_fits(b, fits); }), "no error");
  EXPECT_EQ(test::error_of([&] { judge(b, metrics(1, 1), with_tokens({{}})); }),
            b.source + ": golden completions for question ids 7, 9 that this run did not evaluate");
}

TEST(Baseline, MalformedFilesNameTheKey) {
  EXPECT_EQ(baseline_error(R"({"accuracy": 1e99999, "tolerance": {}})").rfind(
                ": invalid JSON: number overflow parsing '1e99999'", 0),
            0u);
  EXPECT_EQ(baseline_error(R"({"tolerance": {"mode": "relative", "value": 0.99}})"),
            ": missing \"accuracy\"");
  EXPECT_EQ(baseline_error(R"({"accuracy": "high", "tolerance": {}})"),
            ": \"accuracy\" is \"high\", expected a number");
  EXPECT_EQ(baseline_error(R"({"accuracy": 95, "tolerance": {}})"),
            ": \"accuracy\" is 95, expected a number in [0, 1]");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9})"), ": missing \"tolerance\"");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "tolerance": {"mode": "percent", "value": 1}})"),
            ": \"tolerance.mode\" is \"percent\", expected \"relative\" or \"absolute\"");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "tolerance": {"mode": "relative"}})"),
            ": missing \"tolerance.value\"");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "tolerance": {"mode": "relative", "value": 0}})"),
            ": \"tolerance.value\" is 0, expected a number in (0, 1]");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "tolerance": {"mode": "absolute", "value": 1.5}})"),
            ": \"tolerance.value\" is 1.5, expected a number in [0, 1]");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "tolerence": {}})"),
            ": unknown key \"tolerence\" (expected accuracy, tolerance, golden, num_questions, "
            "benchmark, description)");
  EXPECT_EQ(baseline_error(R"({"accuracy": null, "tolerance": {}})"),
            ": \"accuracy\" is null, expected a number in [0, 1] (a placeholder: set it from the "
            "first accepted run)");
  const std::string ok_tol = R"("tolerance": {"mode": "relative", "value": 0.99})";
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "benchmark": "mmlu", )" + ok_tol + "}"),
            ": \"benchmark\" is \"mmlu\", expected \"gsm8k\"");
  EXPECT_EQ(baseline_error(R"({"accuracy": 0.9, "num_questions": 0, )" + ok_tol + "}"),
            ": \"num_questions\" is 0, expected a question count (>= 1)");
  const std::string head = R"({"accuracy": 0.9, "tolerance": {"mode": "relative", "value": 1},)";
  EXPECT_EQ(baseline_error(head + R"("golden": {}})"),
            ": \"golden\" is an object, expected an array of {\"id\", \"token_ids\"}");
  EXPECT_EQ(baseline_error(head + R"("golden": [{"id": -1, "token_ids": []}]})"),
            ": \"golden[0].id\" is -1, expected a question id (an unsigned integer)");
  EXPECT_EQ(baseline_error(head + R"("golden": [{"id": 1, "token_ids": [1, "x"]}]})"),
            ": \"golden[0].token_ids[1]\" is \"x\", expected a token id (0 .. 2^31-1)");
  EXPECT_EQ(baseline_error(head + R"("golden": [{"id": 1, "token_ids": []}, {"id": 1,
      "token_ids": []}]})"),
            ": \"golden[1].id\" repeats id 1 of golden[0]");
  EXPECT_EQ(baseline_error(head + R"("golden": [{"id": 1, "tokens": []}]})"),
            ": unknown key \"golden[0].tokens\" (expected id, token_ids)");
  EXPECT_EQ(baseline_error("{\"accuracy\": 0.9,\n \"tolerance\": }"),
            ": invalid JSON at line 2, column 15: syntax error while parsing value - unexpected "
            "'}'; expected '[', '{', or a literal; expected {\"accuracy\": x, \"tolerance\": "
            "{\"mode\": \"relative\"|\"absolute\", \"value\": v}, \"golden\": [{\"id\": i, "
            "\"token_ids\": [...]}] (optional)}");
  EXPECT_EQ(baseline_error("[0.9]"),
            ": found an array; expected {\"accuracy\": x, \"tolerance\": {\"mode\": "
            "\"relative\"|\"absolute\", \"value\": v}, \"golden\": [{\"id\": i, \"token_ids\": "
            "[...]}] (optional)}");
}

// ---------------------------------------------------------------- throughput

std::string throughput_error(const std::string& json) {
  const fs::path p = test::write_file(test::scratch_dir() / "throughput.json", json);
  const std::string message = test::error_of([&] { read_throughput_baseline(p); });
  return message.rfind(p.string(), 0) == 0 ? message.substr(p.string().size()) : message;
}

ThroughputBaseline throughput_from(const std::string& json) {
  return read_throughput_baseline(test::write_file(test::scratch_dir() / "throughput.json", json));
}

TEST(ThroughputBaseline, RelativeAndAbsoluteTolerancesSetTheThreshold) {
  const auto rel = throughput_from(
      R"J({"benchmark": "throughput", "output_throughput": 100, "tolerance": {"mode": "relative",
          "value": 0.9}, "machine": "cpu (2 logical CPUs)", "description": "nightly"})J");
  EXPECT_DOUBLE_EQ(rel.threshold(), 90);
  EXPECT_EQ(rel.machine, "cpu (2 logical CPUs)");
  EXPECT_TRUE(judge_throughput(rel, 100).pass);  // a baseline at the measured value passes
  EXPECT_TRUE(judge_throughput(rel, 90).pass);
  const auto below = judge_throughput(rel, 80);  // 20 % under: a regression
  EXPECT_FALSE(below.pass);
  EXPECT_EQ(below.reason,
            "output throughput 80.000 token/s is 20.0 % below the baseline 100.000 token/s, under "
            "the threshold 90.000 (relative tolerance 0.9)");
  EXPECT_FALSE(judge_throughput(rel, std::nan("")).pass);
  const auto abs = throughput_from(
      R"J({"benchmark": "throughput", "output_throughput": 100, "tolerance": {"mode": "absolute",
          "value": 15}, "machine": "m", "layout": "world=8"})J");
  EXPECT_DOUBLE_EQ(abs.threshold(), 85);
  EXPECT_FALSE(judge_throughput(abs, 84.9).pass);
}

TEST(ThroughputBaseline, OtherMachinesAndLayoutsAreRefusedBeforeTheRun) {
  const auto b = throughput_from(
      R"J({"benchmark": "throughput", "output_throughput": 100, "tolerance": {"mode": "relative",
          "value": 0.9}, "machine": "cpu A (2 logical CPUs)", "layout": "world=8 tp=8"})J");
  EXPECT_NO_THROW(check_throughput_baseline_fits(b, "cpu A (2 logical CPUs)", "world=8 tp=8"));
  const std::string other =
      test::error_of([&] { check_throughput_baseline_fits(b, "cpu B (64 logical CPUs)", "world=8 tp=8"); });
  EXPECT_NE(other.find("was measured on \"cpu A (2 logical CPUs)\", this machine is \"cpu B (64 "
                       "logical CPUs)\""),
            std::string::npos)
      << other;
  const std::string layout =
      test::error_of([&] { check_throughput_baseline_fits(b, "cpu A (2 logical CPUs)", "world=1"); });
  EXPECT_NE(layout.find("was measured with layout \"world=8 tp=8\", this run has \"world=1\""),
            std::string::npos)
      << layout;
}

TEST(ThroughputBaseline, MalformedFilesNameTheKey) {
  EXPECT_NE(throughput_error(R"J({"accuracy": 0.9, "tolerance": {"mode": "relative", "value": 0.99}})J")
                .find("an accuracy baseline"),
            std::string::npos);
  EXPECT_EQ(throughput_error(R"J({"benchmark": "gsm8k", "output_throughput": 1, "tolerance":
      {"mode": "relative", "value": 0.9}, "machine": "m"})J"),
            ": \"benchmark\" is \"gsm8k\", expected \"throughput\"");
  EXPECT_EQ(throughput_error(R"J({"benchmark": "throughput", "output_throughput": 0, "tolerance":
      {"mode": "relative", "value": 0.9}, "machine": "m"})J").rfind(": \"output_throughput\" is 0", 0),
            0u);
  EXPECT_EQ(throughput_error(R"J({"benchmark": "throughput", "output_throughput": 10, "tolerance":
      {"mode": "absolute", "value": 11}, "machine": "m"})J").rfind(": \"tolerance.value\" is 11", 0),
            0u);
  EXPECT_EQ(throughput_error(R"J({"benchmark": "throughput", "output_throughput": 10, "tolerance":
      {"mode": "relative", "value": 0.9}})J"),
            ": missing \"machine\"");
  EXPECT_NE(throughput_error(R"J({"benchmark": "throughput", "output_throughput": 10, "tolerance":
      {"mode": "relative", "value": 0.9}, "machine": "m", "speed": 3})J").find("unknown key \"speed\""),
            std::string::npos);
  // And an accuracy run refuses a throughput baseline, saying what it is.
  EXPECT_NE(baseline_error(R"J({"benchmark": "throughput", "accuracy": 0.5, "tolerance": {"mode":
      "relative", "value": 0.9}})J").find("use it with --mode throughput"),
            std::string::npos);
}

}  // namespace
}  // namespace k3::eval
