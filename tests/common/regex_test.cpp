#include "common/regex.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace k3 {
namespace {

TEST(Regex, FindAnchoredAndLast) {
  const Regex number("-?[0-9]+");
  const std::string s = "a 12 b -3 c 456";
  auto m = number.find(s);
  ASSERT_TRUE(m);
  EXPECT_EQ(s.substr(m->begin, m->end - m->begin), "12");
  EXPECT_FALSE(number.find(s, 0, /*anchored=*/true));
  m = number.find(s, 7, /*anchored=*/true);
  ASSERT_TRUE(m);
  EXPECT_EQ(s.substr(m->begin, m->end - m->begin), "-3");
  m = number.find_last(s);
  ASSERT_TRUE(m);
  EXPECT_EQ(s.substr(m->begin, m->end - m->begin), "456");
  EXPECT_FALSE(number.find_last("none"));
  // An empty-matching pattern still advances.
  EXPECT_EQ(Regex("x*").find_last("ab")->begin, 2u);
}

TEST(Regex, FullMatchReturnsGroupsAndNeedsTheWholeSubject) {
  const Regex split(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  const auto g = split.full_match("model-00002-of-00010.gguf");
  ASSERT_TRUE(g);
  ASSERT_EQ(g->size(), 3u);
  EXPECT_EQ((*g)[0], "model");
  EXPECT_EQ((*g)[1], "00002");
  EXPECT_EQ((*g)[2], "00010");
  EXPECT_FALSE(split.full_match("model-00002-of-00010.gguf.bak"));
  // The whole subject, not the first alternative that matches a prefix.
  EXPECT_TRUE(Regex("a|ab").full_match("ab"));
  const auto unset = Regex("(x)?y").full_match("y");
  ASSERT_TRUE(unset);
  EXPECT_EQ((*unset)[0], "");
}

TEST(Regex, UnicodeClassesAndInvalidUtf8) {
  const Regex digits("\\d+", Regex::kUnicode | Regex::kInvalidUtf);
  const std::string arabic = "x \xD9\xA3\xD9\xA4 y";  // U+0663 U+0664, category Nd
  const auto m = digits.find(arabic);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->begin, 2u);
  EXPECT_EQ(m->end, 6u);
  EXPECT_FALSE(Regex("\\d+").find(arabic));  // bytes mode: ASCII digits only
  // Invalid UTF-8 never matches and is no error.
  const auto after = digits.find("\xff\xfe 7");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->begin, 3u);
}

TEST(Regex, MatcherIsReusableWithJitAndGroups) {
  const Regex word("([a-z]+)([0-9]*)", Regex::kUnicode | Regex::kJit);
  Regex::Matcher m(word);
  const std::string s = "ab12 cd";
  auto found = m.find(s, 0, false, /*valid_utf=*/true);
  ASSERT_TRUE(found);
  EXPECT_EQ(m.group(1).end, 2u);
  EXPECT_EQ(m.group(2).begin, 2u);
  EXPECT_EQ(m.group(2).end, 4u);
  found = m.find(s, found->end, false, true);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->begin, 5u);
  EXPECT_EQ(m.group(2).begin, m.group(2).end);  // matched empty
  EXPECT_FALSE(m.find(s, 7, false, true));
}

TEST(Regex, ABadPatternIsAnInternalErrorNamingIt) {
  try {
    const Regex bad("a(b");
    FAIL() << "compiled";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("a(b"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace k3
