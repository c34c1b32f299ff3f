// StopChecker: stop strings found as the completion grows token by token (including a stop
// string split across tokens), the output cut before it, and SGLang's default list.
#include <gtest/gtest.h>

#include "eval/stop.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

// Feeds `pieces` one at a time, as decoded tokens; returns the index of the piece that stopped
// the checker, or -1.
int feed(StopChecker& checker, const std::vector<std::string>& pieces, std::string& text) {
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    text += pieces[i];
    if (checker.update(text)) return static_cast<int>(i);
  }
  return -1;
}

TEST(Stop, DefaultsAreSglangsFewShotList) {
  EXPECT_EQ(sglang_stop_strings(),
            (std::vector<std::string>{"Question", "Assistant:", "<|separator|>"}));
}

TEST(Stop, CutsBeforeAStopStringSplitAcrossTokens) {
  StopChecker checker;
  std::string text;
  const int at = feed(checker, {" 9 * 2 = 18", "\n#### 18", "\n\nQu", "est", "ion: Next"}, text);
  EXPECT_EQ(at, 4);  // "Question" completes with "ion: Next"
  EXPECT_TRUE(checker.stopped());
  EXPECT_EQ(checker.matched(), "Question");
  EXPECT_EQ(checker.output(text), " 9 * 2 = 18\n#### 18\n\n");
  EXPECT_EQ(checker.stop_position(), 21u);
  // Stays stopped, whatever comes after.
  EXPECT_TRUE(checker.update(text + " more"));
  EXPECT_EQ(checker.output(text + " more"), " 9 * 2 = 18\n#### 18\n\n");
}

TEST(Stop, NoStopStringKeepsEverything) {
  StopChecker checker;
  std::string text;
  EXPECT_EQ(feed(checker, {"The answer", " is 5.", " Quest", "s end"}, text), -1);
  EXPECT_FALSE(checker.stopped());
  EXPECT_EQ(checker.output(text), text);
  EXPECT_EQ(test::error_of([&] { checker.matched(); }, ExitCode::kInternal),
            "StopChecker::matched() called before any stop string");
}

TEST(Stop, EachDefaultStopStringStops) {
  for (const std::string& stop : sglang_stop_strings()) {
    StopChecker checker;
    std::string text;
    const std::string half = stop.substr(0, stop.size() / 2);
    EXPECT_EQ(feed(checker, {"#### 4", half, stop.substr(half.size()), "tail"}, text), 2) << stop;
    EXPECT_EQ(checker.output(text), "#### 4") << stop;
    EXPECT_EQ(checker.matched(), stop);
  }
}

TEST(Stop, TheStopStringThatCompletesFirstWins) {
  StopChecker checker({"Question", "Assistant:"});
  // One big update holding both: "Assistant:" ends first.
  const std::string text = "#### 4 Assistant: Question";
  EXPECT_TRUE(checker.update(text));
  EXPECT_EQ(checker.matched(), "Assistant:");
  EXPECT_EQ(checker.output(text), "#### 4 ");
  EXPECT_EQ(truncate_at_stop("a Question b Assistant:", sglang_stop_strings()), "a ");
  EXPECT_EQ(truncate_at_stop("no stop here", sglang_stop_strings()), "no stop here");
}

TEST(Stop, ConfigurableListsAndReset) {
  StopChecker checker({"\n\nQuestion"});
  std::string text;
  // The bare word no longer stops; the few-shot boundary does.
  EXPECT_EQ(feed(checker, {"Question the premise:", " 4.", "\n", "\nQuestion"}, text), 3);
  EXPECT_EQ(checker.output(text), "Question the premise: 4.");
  checker.reset();
  EXPECT_FALSE(checker.stopped());
  EXPECT_FALSE(checker.update("fresh"));
}

TEST(Stop, StopAtTheVeryStart) {
  StopChecker checker;
  EXPECT_TRUE(checker.update("Question"));
  EXPECT_EQ(checker.output("Question"), "");
}

TEST(Stop, ContractViolationsAreErrors) {
  EXPECT_EQ(test::error_of([] { StopChecker({"a", ""}); }), "stop string 2 of 2 is empty");
  StopChecker checker;
  checker.update("abcdef");
  EXPECT_EQ(test::error_of([&] { checker.update("abc"); }, ExitCode::kInternal),
            "StopChecker: the completion shrank from 6 to 3 bytes; it may only grow");
}

}  // namespace
}  // namespace k3::eval
