// build_prompts: SGLang's few-shot text byte for byte on the shared test.jsonl, the prefix/suffix
// split, the leak-free variant, and the option errors.
#include <gtest/gtest.h>

#include <cstdint>

#include "eval/prompt.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

// FNV-1a 64: the reference texts are pinned by length and hash (computed with SGLang's
// get_few_shot_examples / get_one_example in Python) instead of copying the data here.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

TEST(Prompts, TwoShotsMatchSglangExactly) {
  PromptOptions o;
  o.num_shots = 2;
  o.num_questions = 3;
  const PromptSet set = build_prompts(test::gsm8k_test_set(), o, "test.jsonl");
  // The separators, literally: "Question: " ... "\nAnswer: " + solution + "\n\n", twice.
  EXPECT_TRUE(set.prefix.starts_with("Question: Janet\u2019s ducks lay 16 eggs per day."));
  EXPECT_NE(set.prefix.find("market?\nAnswer: Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck"),
            std::string::npos);
  EXPECT_NE(set.prefix.find("#### 18\n\nQuestion: A robe takes 2 bolts"), std::string::npos);
  EXPECT_TRUE(set.prefix.ends_with("3 bolts of fabric\n#### 3\n\n"));
  EXPECT_EQ(set.prefix.size(), 674u);
  EXPECT_EQ(fnv1a(set.prefix), 0x8325a0edf73aa5e0ull);

  ASSERT_EQ(set.prompts.size(), 3u);
  EXPECT_EQ(set.prompts[2].id, 2u);
  EXPECT_TRUE(set.prompts[2].suffix.starts_with("Question: Josh decides to try flipping"));
  EXPECT_TRUE(set.prompts[2].suffix.ends_with("How much profit did he make?\nAnswer:"));
  EXPECT_EQ(set.text(2).size(), 873u);
  EXPECT_EQ(fnv1a(set.text(2)), 0x935b4a8cb47a66beull);
  // SGLang asks question 0 with its own solution in the prefix.
  EXPECT_EQ(set.text(0).size(), 974u);
  EXPECT_EQ(fnv1a(set.text(0)), 0xa52a77bb255c2dbbull);
  EXPECT_EQ(set.prompts[0].label, "18");
  EXPECT_EQ(set.prompts[1].label, "3");
  EXPECT_EQ(set.prompts[2].label, "70000");
}

TEST(Prompts, SglangDefaultsAreFiveShotsAndTwoHundredQuestions) {
  const PromptSet set = build_prompts(test::gsm8k_test_set(), PromptOptions{}, "test.jsonl");
  EXPECT_EQ(set.prefix.size(), 2216u);
  EXPECT_EQ(fnv1a(set.prefix), 0xc2b16f05e48cbe0dull);
  ASSERT_EQ(set.prompts.size(), 200u);
  EXPECT_EQ(set.prompts.front().id, 0u);
  EXPECT_EQ(set.prompts.back().id, 199u);
}

TEST(Prompts, FormatExampleIsGetOneExample) {
  const Question q{1, "How many?", "Two.\n#### 2"};
  EXPECT_EQ(format_example(q, false), "Question: How many?\nAnswer:");
  EXPECT_EQ(format_example(q, true), "Question: How many?\nAnswer: Two.\n#### 2");
}

TEST(Prompts, ZeroShotsHaveAnEmptyPrefix) {
  PromptOptions o;
  o.num_shots = 0;
  o.num_questions = 1;
  const PromptSet set = build_prompts(test::gsm8k_test_set(), o, "test.jsonl");
  EXPECT_EQ(set.prefix, "");
  EXPECT_EQ(set.text(0), format_example(test::gsm8k_test_set()[0], false));
}

TEST(Prompts, ExcludingShotQuestionsStartsAfterTheShots) {
  PromptOptions o;
  o.num_shots = 5;
  o.num_questions = 1314;
  o.exclude_shot_questions = true;
  const PromptSet set = build_prompts(test::gsm8k_test_set(), o, "test.jsonl");
  EXPECT_EQ(fnv1a(set.prefix), 0xc2b16f05e48cbe0dull);  // the same shots
  ASSERT_EQ(set.prompts.size(), 1314u);
  EXPECT_EQ(set.prompts.front().id, 5u);
  EXPECT_EQ(set.prompts.back().id, 1318u);
  EXPECT_EQ(set.prompts.front().suffix, format_example(test::gsm8k_test_set()[5], false));
}

TEST(Prompts, OptionsBeyondTheDataAreUsageErrors) {
  const auto& d = test::gsm8k_test_set();
  auto build = [&](std::size_t shots, std::size_t n, bool exclude) {
    return test::error_of([&] {
      build_prompts(d, PromptOptions{shots, n, exclude}, "test.jsonl");
    });
  };
  EXPECT_EQ(build(1320, 1, false), "num_shots = 1320 exceeds the 1319 questions in test.jsonl");
  EXPECT_EQ(build(5, 1320, false), "num_questions = 1320 exceeds the 1319 questions in test.jsonl");
  EXPECT_EQ(build(5, 1315, true),
            "num_questions = 1315 exceeds the 1314 questions after the 5 shots in test.jsonl "
            "(exclude_shot_questions)");
  EXPECT_EQ(build(5, 0, false), "num_questions must be at least 1");
  EXPECT_EQ(build(0, 1319, false), "no error");
  EXPECT_EQ(build(1319, 1319, false), "no error");
}

TEST(Prompts, AReferenceAnswerWithoutANumberIsAnInputError) {
  const std::vector<Question> d = {{1, "q0", "#### 4"}, {2, "q1", "I forgot"}};
  EXPECT_EQ(test::error_of([&] {
              build_prompts(d, PromptOptions{0, 2, false}, "mini.jsonl");
            }),
            "mini.jsonl:2: the reference answer has no usable final number (SGLang's "
            "get_answer_value gives INVALID); expected it to end in \"#### <number>\"");
  // Shots are not labelled, so a shot without a number is fine.
  EXPECT_EQ(build_prompts(d, PromptOptions{2, 1, false}, "mini.jsonl").prompts[0].label, "4");
}

}  // namespace
}  // namespace k3::eval
