// Re-scoring completions made elsewhere: JSONL rows (ours, SGLang's raw results), SGLang's
// dump_state_text file, and the errors for bad rows, indices and mismatched data.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "eval/prompt.h"
#include "eval/score.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;

std::string score_error(const std::string& bytes) {
  const fs::path p = test::write_file(test::scratch_dir() / "completions", bytes);
  const std::string message =
      test::error_of([&] { score_completions(test::gsm8k_test_set(), p, Extractor::kSglang); });
  return message.rfind(p.string(), 0) == 0 ? message.substr(p.string().size()) : message;
}

TEST(Score, JsonlWithIndexIdOrPromptId) {
  const fs::path p = test::write_file(test::scratch_dir() / "completions.jsonl",
                                      R"({"index": 0, "output": " 16-3-4=9, 9*2=18\n#### 18"})"
                                      "\n"
                                      R"({"id": 1, "output": " I think #### -3"})"
                                      "\n"
                                      R"({"prompt_id": 2, "output": " no idea", "correct": false})"
                                      "\n"
                                      R"({"id": 3, "output_text": " 540 meters, so #### 007"})"
                                      "\n");
  const ScoreReport sglang = score_completions(test::gsm8k_test_set(), p, Extractor::kSglang);
  EXPECT_EQ(sglang.format, "jsonl");
  ASSERT_EQ(sglang.results.size(), 4u);
  EXPECT_EQ(sglang.results[0].prediction, "18");
  EXPECT_TRUE(sglang.results[0].correct);
  EXPECT_EQ(sglang.results[1].prediction, "3");  // SGLang drops the sign; label is 3
  EXPECT_TRUE(sglang.results[1].correct);
  EXPECT_TRUE(sglang.results[2].invalid);
  EXPECT_TRUE(sglang.results[3].invalid);  // "007"
  EXPECT_EQ(sglang.results[3].label, "540");
  EXPECT_EQ(format_accuracy_lines(sglang.metrics), "Accuracy: 0.500\nInvalid: 0.500\n");

  const ScoreReport flexible = score_completions(test::gsm8k_test_set(), p, Extractor::kFlexible);
  EXPECT_EQ(flexible.results[1].prediction, "-3");
  EXPECT_FALSE(flexible.results[1].correct);
  EXPECT_EQ(flexible.results[3].prediction, "7");
  EXPECT_EQ(format_accuracy_lines(flexible.metrics), "Accuracy: 0.250\nInvalid: 0.250\n");
}

TEST(Score, SglangRawResultRowsAreCheckedAgainstTheirPrompt) {
  PromptOptions o;
  o.num_shots = 2;
  o.num_questions = 2;
  const PromptSet set = build_prompts(test::gsm8k_test_set(), o, "test.jsonl");
  // What dump_bench_raw_result writes: rows joined by "\n", no final newline.
  nlohmann::json r0 = {
      {"prompt_id", 0}, {"prompt", set.text(0)}, {"output", " #### 18"}, {"correct", true}};
  nlohmann::json r1 = {
      {"prompt_id", 1}, {"prompt", set.text(0)}, {"output", " #### 3"}, {"correct", true}};
  const fs::path p =
      test::write_file(test::scratch_dir() / "raw.jsonl", r0.dump() + "\n" + r1.dump());
  EXPECT_EQ(
      test::error_of([&] { score_completions(test::gsm8k_test_set(), p, Extractor::kSglang); }),
      p.string() +
          ":2: \"prompt\" does not end with question 1 of the data (\"Question: "
          "...\\nAnswer:\"); the completions were made from other data");
  r1["prompt"] = set.text(1);
  test::write_file(p, r0.dump() + "\n" + r1.dump());
  const ScoreReport report = score_completions(test::gsm8k_test_set(), p, Extractor::kSglang);
  EXPECT_EQ(report.metrics.correct, 2u);
}

TEST(Score, SglangDumpStateTextFile) {
  PromptOptions o;
  o.num_shots = 2;
  o.num_questions = 3;
  const PromptSet set = build_prompts(test::gsm8k_test_set(), o, "test.jsonl");
  const std::vector<std::string> outputs = {" Janet sells 9 eggs.\n#### 18\n\n",
                                            " It takes 3 bolts.\n#### 4\n\n", ""};
  // dump_state_text: "=" * 40 + f" {i} " + "=" * 40 + "\n" + text + "\n" + "=" * 80 + "\n\n".
  std::string dump;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    dump += std::string(40, '=') + " " + std::to_string(i) + " " + std::string(40, '=') + "\n" +
            set.text(i) + outputs[i] + "\n" + std::string(80, '=') + "\n\n";
  }
  const fs::path p = test::write_file(test::scratch_dir() / "tmp_output_gsm8k.txt", dump);
  const ScoreReport report = score_completions(test::gsm8k_test_set(), p, Extractor::kSglang);
  EXPECT_EQ(report.format, "sglang-dump");
  ASSERT_EQ(report.results.size(), 3u);
  // Question 0's own solution is in the prefix; the completion is what follows the last ask.
  EXPECT_EQ(report.results[0].output_text, outputs[0]);
  EXPECT_TRUE(report.results[0].correct);
  EXPECT_EQ(report.results[1].prediction, "4");
  EXPECT_FALSE(report.results[1].correct);
  EXPECT_EQ(report.results[2].output_text, "");
  EXPECT_TRUE(report.results[2].invalid);

  // Cut short: the last state has no closing rule.
  const std::string cut = dump.substr(0, dump.size() - 50);
  EXPECT_EQ(
      score_error(cut),
      ":" + std::to_string(1 + std::count(cut.begin(), cut.begin() + cut.rfind("= 2 ="), '\n')) +
          ": state 2 is not closed by a line of 80 '=' and a blank line (truncated dump?)");
  // States out of order.
  std::string swapped = dump;
  swapped.replace(swapped.find("= 1 ="), 5, "= 5 =");
  EXPECT_TRUE(score_error(swapped).ends_with(": expected the header of state 1 (" +
                                             std::string(40, '=') + " 1 " + std::string(40, '=') +
                                             ") of a dump_state_text file"));
  // A dump of other data.
  std::string other = dump;
  other.replace(other.rfind("Josh decides"), 4, "Joan");
  EXPECT_TRUE(score_error(other).ends_with(
      ": state 2 does not contain question 2 of the data (\"Question: ...\\nAnswer:\"); the dump "
      "was made from other data"));
}

TEST(Score, BadRowsAndIndicesNameTheLine) {
  EXPECT_EQ(score_error(R"({"index": 1319, "output": "4"})"),
            ":1: index 1319 is out of range: the data has 1319 questions (0..1318)");
  EXPECT_EQ(score_error(R"({"index": 3, "output": "4"})"
                        "\n"
                        R"({"index": 4, "output": "4"})"
                        "\n"
                        R"({"id": 3, "output": "5"})"),
            ":3: duplicate index 3 (already on line 1)");
  EXPECT_EQ(score_error(R"({"index": 1, "id": 1, "output": "4"})"),
            ":1: has both \"index\" and \"id\"; expected only one");
  EXPECT_EQ(score_error(R"({"index": -1, "output": "4"})"),
            ":1: \"index\" is -1, expected a question index (an unsigned integer)");
  EXPECT_EQ(score_error(R"({"index": 1, "text": "4"})"),
            ":1: expected one object per line with \"index\" (or \"id\", \"prompt_id\") and "
            "\"output\" (or \"output_text\")");
  EXPECT_EQ(score_error(R"({"index": 1, "output": 4})"),
            ":1: \"output\" is a number, expected a string");
  EXPECT_EQ(score_error("{\"index\": 1, \"output\": \"4\"}\n{\"index\": 2,"),
            ":2: invalid JSON at column 13: syntax error while parsing object key - unexpected "
            "end of input; expected string literal; expected one object per line with "
            "\"index\" (or \"id\", \"prompt_id\") and \"output\" (or \"output_text\")");
  EXPECT_EQ(score_error("Accuracy: 0.5\n"),
            ": neither JSONL completions ({\"index\": i, \"output\": text} per line) nor an "
            "SGLang dump_state_text file (tmp_output_gsm8k.txt)");
}

}  // namespace
}  // namespace k3::eval
