// Answer extraction: SGLang's get_answer_value reproduced case by case (Python 3.11 semantics
// of re.findall(r"\d+") and ast.literal_eval), and the flexible extractor's documented rules.
#include <gtest/gtest.h>

#include "eval/dataset.h"
#include "eval/extract.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

const std::string kInv(kInvalidAnswer);

TEST(ExtractSglang, TakesTheLastIntegerOfTheText) {
  EXPECT_EQ(extract_sglang("She makes 9 * 2 = $18 every day.\n#### 18"), "18");
  EXPECT_EQ(extract_sglang("3 apples and 4 pears make 7 fruits, 7 * 2 = 14"), "14");
  EXPECT_EQ(extract_sglang(" The answer is 42.\n\n"), "42");
  EXPECT_EQ(extract_sglang("42"), "42");
}

TEST(ExtractSglang, RemovesEveryCommaFirst) {
  EXPECT_EQ(extract_sglang("#### 70,000"), "70000");
  EXPECT_EQ(extract_sglang("1,2,3"), "123");
  EXPECT_EQ(extract_sglang("12, 5"), "5");  // ", " leaves a space: two runs
}

TEST(ExtractSglang, HasNoSignAndNoDecimals) {
  EXPECT_EQ(extract_sglang("#### -7"), "7");
  EXPECT_EQ(extract_sglang("It costs $1,234.50"), "50");
  EXPECT_EQ(extract_sglang("3.0"), "0");
}

TEST(ExtractSglang, LeadingZerosAreInvalidLikeLiteralEval) {
  EXPECT_EQ(extract_sglang("0"), "0");
  EXPECT_EQ(extract_sglang("00"), "0");  // a valid Python literal
  EXPECT_EQ(extract_sglang("000000"), "0");
  EXPECT_EQ(extract_sglang("007"), kInv);  // SyntaxError: leading zeros
  EXPECT_EQ(extract_sglang("the answer is 05"), kInv);
  EXPECT_EQ(extract_sglang("05 or rather 5"), "5");  // only the last run counts
  EXPECT_EQ(extract_sglang("10"), "10");
  EXPECT_EQ(extract_sglang("0,5"), kInv);  // "05" once the comma is gone
}

TEST(ExtractSglang, NothingToMatchIsInvalid) {
  EXPECT_EQ(extract_sglang(""), kInv);
  EXPECT_EQ(extract_sglang("I do not know."), kInv);
  EXPECT_EQ(extract_sglang(",,,"), kInv);
  EXPECT_TRUE(is_invalid(extract_sglang("no digits")));
  EXPECT_EQ(kInvalid, -9999999);
  EXPECT_EQ(kInvalidAnswer, "-9999999");
}

TEST(ExtractSglang, HugeNumbersAreExactUpToPythonsDigitLimit) {
  EXPECT_EQ(extract_sglang("1234567890123456789012345678901234567890"),
            "1234567890123456789012345678901234567890");
  const std::string limit(4300, '7');
  EXPECT_EQ(extract_sglang("x " + limit), limit);
  EXPECT_EQ(extract_sglang("x " + limit + "7"), kInv);  // 4301 digits: SyntaxError in 3.11+
  EXPECT_EQ(extract_sglang(std::string(5000, '0')), "0");
}

TEST(ExtractSglang, UnicodeDigitsMatchTheRunButAreInvalidLiterals) {
  // Python's \d matches any Nd digit; literal_eval rejects them ("invalid character").
  EXPECT_EQ(extract_sglang("\u0661\u0662\u0663"), kInv);  // Arabic-Indic 123
  EXPECT_EQ(extract_sglang("5 and \uff13"), kInv);        // full-width 3 is last
  EXPECT_EQ(extract_sglang("12\u0663"), kInv);            // one mixed run
  EXPECT_EQ(extract_sglang("\u0663 then 5"), "5");
  EXPECT_EQ(extract_sglang("caf\xc3\xa9 costs 4 \xe2\x82\xac"), "4");  // other non-ASCII
}

TEST(ExtractSglang, InvalidUtf8NeverMatchesButSplitsRuns) {
  EXPECT_EQ(extract_sglang("\xff"
                           "12\xfe"),
            "12");
  EXPECT_EQ(extract_sglang("3\x80"
                           "4"),
            "4");
  EXPECT_EQ(extract_sglang("\xc3"), kInv);
}

TEST(ExtractSglang, LabelsOfTheWholeTestSetMatchSglang) {
  // Reference values from SGLang's get_answer_value run over the same file in Python:
  // 1319 labels summing to 9009213, none INVALID; lines 490 and 1114 end in "#### -10" and
  // "#### -3", whose labels drop the sign.
  const auto data = read_gsm8k(test::gsm8k_dir() / "test.jsonl");
  ASSERT_EQ(data.size(), 1319u);
  unsigned long long sum = 0;
  for (const Question& q : data) {
    const std::string label = extract_sglang(q.answer);
    ASSERT_FALSE(is_invalid(label)) << "line " << q.line;
    sum += std::stoull(label);
  }
  EXPECT_EQ(sum, 9009213u);
  EXPECT_EQ(extract_sglang(data[0].answer), "18");
  EXPECT_EQ(extract_sglang(data[2].answer), "70000");
  EXPECT_EQ(extract_sglang(data[489].answer), "10");
  EXPECT_EQ(extract_sglang(data[1113].answer), "3");
}

TEST(ExtractFlexible, PrefersTheNumberAfterFourHashes) {
  EXPECT_EQ(extract_flexible("9 * 2 = 18\n#### 18\nQuestion 5"), "18");
  EXPECT_EQ(extract_flexible("#### $1,234 in total, not 7"), "1234");
  EXPECT_EQ(extract_flexible("so ####-5"), "-5");
  EXPECT_EQ(extract_flexible("#### 18.00"), "18");
  EXPECT_EQ(extract_flexible("#### 12 then #### 13"), "12");
  // "####" without a number right after it: back to the last number.
  EXPECT_EQ(extract_flexible("5 apples #### unsure, maybe 7"), "7");
}

TEST(ExtractFlexible, OtherwiseTheLastSignedDecimal) {
  EXPECT_EQ(extract_flexible("The change is -3.50 dollars."), "-3.5");
  EXPECT_EQ(extract_flexible("10-2=8"), "8");
  EXPECT_EQ(extract_flexible("it is 5-3"), "3");  // '-' after a digit is an operator
  EXPECT_EQ(extract_flexible("a total of 1,234,567 people"), "1234567");
  EXPECT_EQ(extract_flexible("lists a,1"), "1");
  EXPECT_EQ(extract_flexible("The answer is 3."), "3");
  EXPECT_EQ(extract_flexible("0.50"), "0.5");
}

TEST(ExtractFlexible, CanonicalisesLeadingZerosAndMinusZero) {
  EXPECT_EQ(extract_flexible("007"), "7");
  EXPECT_EQ(extract_flexible("-0"), "0");
  EXPECT_EQ(extract_flexible("-0.000"), "0");
  EXPECT_EQ(extract_flexible("000.100"), "0.1");
  EXPECT_EQ(extract_flexible("123456789012345678901234567890"), "123456789012345678901234567890");
}

TEST(ExtractFlexible, NothingToMatchIsInvalid) {
  EXPECT_EQ(extract_flexible(""), kInv);
  EXPECT_EQ(extract_flexible("####"), kInv);
  EXPECT_EQ(extract_flexible("no idea"), kInv);
}

TEST(Extractor, NamesAndDispatch) {
  EXPECT_EQ(parse_extractor("sglang"), Extractor::kSglang);
  EXPECT_EQ(parse_extractor("flexible"), Extractor::kFlexible);
  EXPECT_EQ(extractor_name(Extractor::kFlexible), "flexible");
  EXPECT_EQ(extract_answer("#### -4", Extractor::kSglang), "4");
  EXPECT_EQ(extract_answer("#### -4", Extractor::kFlexible), "-4");
  EXPECT_EQ(test::error_of([] { parse_extractor("strict"); }),
            "answer extractor 'strict' is not one of sglang, flexible");
}

}  // namespace
}  // namespace k3::eval
