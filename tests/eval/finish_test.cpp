// Finishing a run: the metric lines, the verdict, the log scan, summary.json, the status file,
// the history record and the exit code, from one call per mode; speculative decoding's
// acceptance in each of them only when it ran.
#include "eval/finish.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/extract.h"
#include "eval/history_file.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;
using test::read_file;
using test::scratch_dir;
using test::write_file;

QuestionResult answered(std::size_t id, bool correct) {
  QuestionResult r;
  r.id = id;
  r.prompt_tokens = 10;
  r.output_text = correct ? "The answer is 4." : "I do not know.";
  r.prediction = correct ? "4" : std::string(kInvalidAnswer);
  r.label = "4";
  r.correct = correct;
  r.invalid = !correct;
  r.token_ids = {1, 2, 3};
  r.completion_tokens = 3;
  r.finish_reason = "length";
  r.latency_s = 0.5;
  return r;
}

// A context writing into `dir`, printing into a temporary file read back by `printed`.
struct Finisher {
  fs::path dir = scratch_dir();
  RunContext context;
  std::FILE* out = std::tmpfile();

  Finisher() {
    context.artifacts_dir = dir;
    context.history = dir / "history.h5";
    context.record.checkpoint = "/ck";
    context.record.extractor = "sglang";
    context.record.num_shots = 5;
    context.config = {{"model_path", "/ck"}};
    context.out = out;
  }
  ~Finisher() { std::fclose(out); }
  std::string printed() {
    std::rewind(out);
    std::string text;
    for (int c; (c = std::fgetc(out)) != EOF;) text.push_back(static_cast<char>(c));
    return text;
  }
};

TEST(Finish, EvaluationWritesEveryRecordAndCountsResumedRows) {
  Finisher f;
  fs::create_directories(f.dir / "logs");
  write_file(f.dir / "logs" / "rank0.log", "[06:17:16.123] [rank 0/1] [info] fine\n");
  Baseline baseline;
  baseline.accuracy = 0.9;
  baseline.source = "b.json";
  const int code = finish_evaluation(f.context, {answered(0, true)},
                                     {answered(2, false), answered(1, true)}, 2.0, baseline);
  const std::string text = f.printed();
  EXPECT_EQ(code, 1) << text;  // 2 of 3 is below 0.9
  EXPECT_NE(text.find("Resumed: 1 of 3 questions"), std::string::npos) << text;
  EXPECT_NE(text.find("REGRESSION"), std::string::npos) << text;
  EXPECT_NE(text.find("Log scan: 0 error(s) in 1 rank log(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("History: run 0 appended"), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("Status: regression\n")) << text;
  EXPECT_EQ(read_file(f.dir / "status"), "regression\n");
  const auto summary = nlohmann::json::parse(read_file(f.dir / "summary.json"));
  EXPECT_EQ(summary["status"], "regression");
  EXPECT_EQ(summary["resume"]["finished_before"], 1);
  EXPECT_EQ(summary["resume"]["this_part"]["completion_tokens"], 6);
  EXPECT_EQ(summary["config"]["model_path"], "/ck");
  const auto runs = read_history(f.context.history);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, "eval");
  EXPECT_EQ(runs[0].verdict, "regression");
  EXPECT_EQ(runs[0].num_questions, 3u);
  EXPECT_EQ(runs[0].completion_tokens, 6u);  // this part's
  EXPECT_EQ(runs[0].resumed_after, 1u);
  EXPECT_DOUBLE_EQ(runs[0].accuracy, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(runs[0].baseline_accuracy, 0.9);
  ASSERT_EQ(runs[0].results.size(), 3u);
  EXPECT_EQ(runs[0].results[1].id, 1u);  // every row, by id
}

TEST(Finish, ALoggedErrorMakesTheRunAnErrorWithoutABaseline) {
  Finisher f;
  fs::create_directories(f.dir / "logs");
  write_file(f.dir / "logs" / "rank3.log", "[06:17:16.123] [rank 3/8] [error] disk full\n");
  const int code = finish_evaluation(f.context, {}, {answered(0, true)}, 1.0, std::nullopt);
  const std::string text = f.printed();
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("rank3.log:1: [06:17:16.123] [rank 3/8] [error] disk full"),
            std::string::npos)
      << text;
  EXPECT_EQ(read_file(f.dir / "status"), "error\n");
  EXPECT_EQ(read_history(f.context.history)[0].log_errors, 1u);
}

TEST(Finish, WithoutArtifactsOrHistoryOnlyTheLinesArePrinted) {
  Finisher f;
  f.context.artifacts_dir.clear();
  f.context.history.clear();
  EXPECT_EQ(finish_evaluation(f.context, {}, {answered(0, true)}, 1.0, std::nullopt), 0);
  EXPECT_TRUE(f.printed().ends_with("Status: ok\n"));
  EXPECT_FALSE(fs::exists(f.dir / "summary.json"));
  EXPECT_FALSE(fs::exists(f.dir / "history.h5"));
}

TEST(Finish, SpeculativeDecodingReachesTheLinesTheSummaryAndTheHistory) {
  Finisher f;
  SpeculativeMetrics counts = SpeculativeMetrics::of(8, 32, 14);
  counts.draft_lengths = {2, 0, 0, 0, 8};
  counts.decode_s = 0.75;
  counts.plain_estimate_s = 1.0;
  f.context.speculative = SpeculativeRun{"dspark", 4, counts, "goodput"};
  EXPECT_EQ(finish_evaluation(f.context, {}, {answered(0, true)}, 1.0, std::nullopt), 0);
  const std::string text = f.printed();
  EXPECT_NE(text.find("Output throughput: 3.000 token/s\n"
                      "Accept length: 2.750\n"
                      "Accept rate: 0.438\n"
                      "Speculative decoding: dspark, block size 4: 8 verify rounds, 32 drafted "
                      "tokens, 14 accepted\n"
                      "Draft lengths (goodput): K=0 2, K=4 8\n"
                      "Decode time: 0.75 s; decoding plainly, by the cost model: 1.00 s (saved "
                      "0.25 s, 25.0 %)\n"),
            std::string::npos)
      << text;
  const auto summary = nlohmann::json::parse(read_file(f.dir / "summary.json"));
  EXPECT_EQ(summary["speculative"],
            nlohmann::json::parse(R"({"algorithm": "dspark", "block_size": 4, "verify_rounds": 8,
                                      "drafted_tokens": 32, "accepted_drafts": 14,
                                      "accept_length": 2.75, "accept_rate": 0.4375,
                                      "policy": "goodput", "draft_lengths": {"0": 2, "4": 8},
                                      "decode_s": 0.75, "plain_estimate_s": 1.0,
                                      "saved_s": 0.25})"));
  const auto runs = read_history(f.context.history);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].speculative, f.context.speculative);
}

TEST(Finish, WithoutSpeculationNothingMentionsIt) {
  Finisher f;
  EXPECT_EQ(finish_evaluation(f.context, {}, {answered(0, true)}, 1.0, std::nullopt), 0);
  const std::string text = f.printed();
  EXPECT_EQ(text.find("ccept"), std::string::npos) << text;
  EXPECT_EQ(text.find("peculative"), std::string::npos) << text;
  const auto summary = nlohmann::json::parse(read_file(f.dir / "summary.json"));
  EXPECT_FALSE(summary.contains("speculative")) << summary.dump(2);
  EXPECT_EQ(read_history(f.context.history)[0].speculative, std::nullopt);
}

TEST(Finish, ThroughputRunJudgesTokensPerSecondAndRecordsItsKind) {
  Finisher f;
  ThroughputOutcome outcome;
  outcome.seconds = 2.0;
  outcome.dp_groups = 1;
  for (std::size_t i = 0; i < 4; ++i) {
    outcome.requests.push_back({i, 0, 16, 8, 0.1, 1.0 + 0.1 * static_cast<double>(i)});
  }
  ThroughputBaseline baseline;
  baseline.output_throughput = 100;  // 32 tokens in 2 s is 16 token/s
  baseline.tolerance.value = 0.9;
  baseline.source = "t.json";
  EXPECT_EQ(finish_throughput(f.context, outcome, baseline), 1) << f.printed();
  const std::string text = f.printed();
  EXPECT_NE(text.find("Baseline: 100.000 token/s"), std::string::npos) << text;
  EXPECT_EQ(read_file(f.dir / "status"), "regression\n");
  const std::string requests = read_file(f.dir / "requests.jsonl");
  EXPECT_EQ(std::count(requests.begin(), requests.end(), '\n'), 4);
  EXPECT_NE(requests.find("\"output_tokens\":8"), std::string::npos) << requests;
  const auto runs = read_history(f.context.history);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, "throughput");
  EXPECT_EQ(runs[0].extractor, "");
  EXPECT_EQ(runs[0].completion_tokens, 32u);
  EXPECT_DOUBLE_EQ(runs[0].output_throughput, 16.0);
  EXPECT_TRUE(std::isnan(runs[0].accuracy));
  EXPECT_TRUE(runs[0].results.empty());
  EXPECT_EQ(runs[0].speculative, std::nullopt);
  EXPECT_EQ(text.find("ccept"), std::string::npos) << text;
  EXPECT_FALSE(nlohmann::json::parse(read_file(f.dir / "summary.json")).contains("speculative"));
}

TEST(Finish, SpeculativeThroughputRunReportsAcceptance) {
  Finisher f;
  f.context.speculative = SpeculativeRun{"dspark", 7, SpeculativeMetrics::of(100, 700, 210), ""};
  ThroughputOutcome outcome;
  outcome.seconds = 1.0;
  outcome.dp_groups = 1;
  outcome.requests.push_back({0, 0, 16, 310, 0.1, 1.0});
  EXPECT_EQ(finish_throughput(f.context, outcome, std::nullopt), 0);
  const std::string text = f.printed();
  EXPECT_NE(text.find("Speculative decoding:                    dspark, block size 7: 100 verify "
                      "rounds, 700 drafted tokens, 210 accepted\n"
                      "Accept length:                           3.10\n"
                      "Accept rate:                             0.30\n"),
            std::string::npos)
      << text;
  const auto summary = nlohmann::json::parse(read_file(f.dir / "summary.json"));
  EXPECT_EQ(summary["speculative"]["verify_rounds"], 100);
  EXPECT_DOUBLE_EQ(summary["speculative"]["accept_length"].get<double>(), 3.1);
  EXPECT_DOUBLE_EQ(summary["speculative"]["accept_rate"].get<double>(), 0.3);
  const auto runs = read_history(f.context.history);
  EXPECT_EQ(runs[0].speculative, f.context.speculative);
}

}  // namespace
}  // namespace k3::eval
