// read_gsm8k: the shared GSM8K files read in place, and every malformed line rejected with a
// message naming file:line and what was expected.
#include <gtest/gtest.h>

#include "eval/dataset.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;

std::string read_error(const std::string& bytes) {
  const fs::path p = test::write_file(test::scratch_dir() / "data.jsonl", bytes);
  const std::string message = test::error_of([&] { read_gsm8k(p); });
  // Messages start with the path; the tests compare what follows it.
  const std::string prefix = p.string();
  if (message.rfind(prefix, 0) == 0) return message.substr(prefix.size());
  return message;
}

const std::string kGood = R"({"question": "What is 1+1?", "answer": "1+1=2\n#### 2"})";

TEST(Gsm8k, ReadsTheSharedFiles) {
  const auto test = read_gsm8k(test::gsm8k_dir() / "test.jsonl");
  ASSERT_EQ(test.size(), 1319u);
  EXPECT_EQ(test[0].line, 1u);
  EXPECT_TRUE(test[0].question.starts_with("Janet\u2019s ducks lay 16 eggs per day."));
  EXPECT_TRUE(test[0].answer.ends_with("#### 18"));
  EXPECT_EQ(test[1318].line, 1319u);
  EXPECT_EQ(read_gsm8k(test::gsm8k_dir() / "train.jsonl").size(), 7473u);
}

TEST(Gsm8k, AcceptsTrailingBlankLinesCrlfAndExtraFields) {
  const fs::path p = test::write_file(
      test::scratch_dir() / "ok.jsonl",
      kGood + "\r\n" + R"({"question": "q2", "answer": "#### 3", "source": "x"})" + "\n\n  \n");
  const auto data = read_gsm8k(p);
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[0].question, "What is 1+1?");
  EXPECT_EQ(data[0].answer, "1+1=2\n#### 2");
  EXPECT_EQ(data[1].line, 2u);
  // A last line without its newline is fine too.
  EXPECT_EQ(read_gsm8k(test::write_file(p, kGood)).size(), 1u);
}

TEST(Gsm8k, RejectsEachBadLineWithFileLineAndExpectation) {
  const std::string expect =
      "expected one JSON object per line with string fields \"question\" and \"answer\"";
  EXPECT_EQ(read_error(""), ": empty file; " + expect);
  EXPECT_EQ(read_error("\n \n"), ": empty file; " + expect);
  EXPECT_EQ(read_error(kGood + "\n{\"question\": \"q\", \"answer\": 5}\n"),
            ":2: \"answer\" is a number, expected a string");
  EXPECT_EQ(read_error(kGood + "\n" + kGood + "\n{\"answer\": \"#### 1\"}\n"),
            ":3: missing \"question\"; " + expect);
  EXPECT_EQ(read_error("[1, 2]\n"), ":1: found an array; " + expect);
  EXPECT_EQ(read_error("\"text\"\n"), ":1: found a string; " + expect);
  EXPECT_EQ(read_error(kGood + "\n{\"question\": \"q\", \"answer\": \"a\"\n"),
            ":2: invalid JSON at column 32: syntax error while parsing object - unexpected "
            "end of input; expected '}'; " +
                expect);
  EXPECT_EQ(read_error("{question: 1}\n"),
            ":1: invalid JSON at column 2: syntax error while parsing object key - invalid "
            "literal; last read: '{q'; expected string literal; " +
                expect);
  EXPECT_EQ(read_error(kGood + "\n\n" + kGood + "\n"),
            ":2: empty line; " + expect + " (blank lines are allowed only at the end)");
  EXPECT_EQ(read_error("# comment\n" + kGood),
            ":1: invalid JSON at column 1: syntax error while parsing value - invalid literal; "
            "last read: '#'; " +
                expect);
}

TEST(Gsm8k, NumberTooLargeForJsonIsAnInputErrorNamingTheLine) {
  EXPECT_EQ(read_error(kGood + "\n{\"question\": \"q\", \"answer\": \"a\", \"n\": 1e99999}\n"),
            ":2: invalid JSON: number overflow parsing '1e99999'; expected one JSON object per "
            "line with string fields \"question\" and \"answer\"");
}

TEST(Gsm8k, MissingFileIsAnInputError) {
  const fs::path p = test::scratch_dir() / "absent.jsonl";
  EXPECT_EQ(test::error_of([&] { read_gsm8k(p); }),
            "cannot open " + p.string() + " (GSM8K data): No such file or directory");
}

}  // namespace
}  // namespace k3::eval
