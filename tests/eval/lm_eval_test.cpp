// results.json in lm-evaluation-harness's shape: its gsm8k filters on completions, and the keys
// and types lm-eval v0.4 writes for the task.
#include "eval/lm_eval.h"

#include <gtest/gtest.h>

namespace k3::eval {
namespace {

QuestionResult result(std::string output, std::string label) {
  QuestionResult r;
  r.output_text = std::move(output);
  r.label = std::move(label);
  return r;
}

TEST(LmEvalFilters, StrictTakesTheFirstHashAnswerFlexibleTheLastNumber) {
  EXPECT_EQ(lm_eval_strict_match("She has 3 + 4 = 7 apples.\n#### 7"), "7");
  EXPECT_EQ(lm_eval_strict_match("#### 1,200 then #### 5"), "1,200");
  EXPECT_EQ(lm_eval_strict_match("The answer is 7."), "[invalid]");
  EXPECT_EQ(lm_eval_flexible_extract("The answer is 7."), "7.");
  EXPECT_EQ(lm_eval_flexible_extract("It costs $1,234 in total"), "$1,234");
  EXPECT_EQ(lm_eval_flexible_extract("no number here"), "[invalid]");
  EXPECT_EQ(lm_eval_normalize("$1,234."), "1234");
  EXPECT_EQ(lm_eval_normalize("Natalia sold 48 clips.\n#### 72"), "72");
  EXPECT_EQ(lm_eval_normalize("-3"), "-3");
}

TEST(LmEvalResults, HasTheStructureLmEvalWritesForGsm8k) {
  const std::vector<QuestionResult> rs = {
      result("2 + 3 = 5\n#### 5", "5"),       // strict and flexible
      result("so the answer is 12.", "12"),  // flexible only
      result("#### 4", "9"),                 // neither
      result("nothing", "3")};               // neither, both filters invalid
  const nlohmann::json config = {{"model_path", "/ckpt/kimi-k3"}, {"num_shots", 5},
                                 {"max_new_tokens", 64},          {"temperature", 0.0},
                                 {"seed", 0},                     {"parallel", 64},
                                 {"num_questions", 4}};
  const nlohmann::ordered_json j = lm_eval_results(rs, config);
  const auto& g = j.at("results").at("gsm8k");
  EXPECT_EQ(g.at("alias"), "gsm8k");
  EXPECT_DOUBLE_EQ(g.at("exact_match,strict-match").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(g.at("exact_match,flexible-extract").get<double>(), 0.5);
  // mean_stderr: sample standard deviation over sqrt(n): p = 0.5, n = 4 -> sqrt(1/3) / 2.
  EXPECT_NEAR(g.at("exact_match_stderr,flexible-extract").get<double>(), 0.288675, 1e-6);
  EXPECT_NEAR(g.at("exact_match_stderr,strict-match").get<double>(), 0.25, 1e-9);
  for (const char* key : {"results", "group_subtasks", "configs", "versions", "n-shot",
                          "higher_is_better", "n-samples", "config"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.at("n-samples").at("gsm8k").at("original"), 4);
  EXPECT_EQ(j.at("n-samples").at("gsm8k").at("effective"), 4);
  EXPECT_EQ(j.at("n-shot").at("gsm8k"), 5);
  EXPECT_EQ(j.at("higher_is_better").at("gsm8k").at("exact_match"), true);
  const auto& task = j.at("configs").at("gsm8k");
  EXPECT_EQ(task.at("task"), "gsm8k");
  EXPECT_EQ(task.at("num_fewshot"), 5);
  EXPECT_EQ(task.at("output_type"), "generate_until");
  EXPECT_EQ(task.at("generation_kwargs").at("do_sample"), false);
  EXPECT_EQ(task.at("generation_kwargs").at("max_gen_toks"), 64);
  ASSERT_EQ(task.at("filter_list").size(), 2u);
  EXPECT_EQ(task.at("filter_list")[0].at("name"), "strict-match");
  EXPECT_EQ(task.at("filter_list")[1].at("name"), "flexible-extract");
  EXPECT_EQ(j.at("config").at("model_args"), "pretrained=/ckpt/kimi-k3");
  EXPECT_EQ(j.at("config").at("batch_size"), 64);
  EXPECT_TRUE(j.at("date").is_number());
}

TEST(LmEvalResults, OneQuestionHasNoStandardError) {
  const auto j = lm_eval_results({result("#### 5", "5")}, nlohmann::json::object());
  EXPECT_EQ(j.at("results").at("gsm8k").at("exact_match_stderr,strict-match"), "N/A");
  EXPECT_TRUE(j.at("config").at("model_args").is_null());
}

}  // namespace
}  // namespace k3::eval
