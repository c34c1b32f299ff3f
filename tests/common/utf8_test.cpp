#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace k3 {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, StepClassifiesMaximalSubparts) {
  EXPECT_EQ(utf8::step("a").kind, utf8::StepKind::kValid);
  const utf8::Step han = utf8::step("\xE4\xB8\xAD");
  EXPECT_EQ(han.kind, utf8::StepKind::kValid);
  EXPECT_EQ(han.length, 3u);
  EXPECT_EQ(han.code_point, U'中');
  EXPECT_EQ(utf8::step("\xF0\x9F\x98\x80").code_point, U'\U0001F600');
  EXPECT_EQ(utf8::step("\xE4\xB8").kind, utf8::StepKind::kIncomplete);
  EXPECT_EQ(utf8::step("\xE4\xB8").length, 2u);
  EXPECT_EQ(utf8::step("\xE4\xB8"
                       "a")
                .kind,
            utf8::StepKind::kInvalid);
  EXPECT_EQ(utf8::step("\xE4\xB8"
                       "a")
                .length,
            2u);
  EXPECT_EQ(utf8::step("\xC0\xAF").length, 1u);          // overlong lead
  EXPECT_EQ(utf8::step("\xED\xA0\x80").length, 1u);      // surrogate
  EXPECT_EQ(utf8::step("\xF4\x90\x80\x80").length, 1u);  // above U+10FFFF
  EXPECT_EQ(utf8::step("\xE0\x80\x80").length, 1u);      // overlong 3-byte
  EXPECT_EQ(utf8::step("\xF5").kind, utf8::StepKind::kInvalid);
  EXPECT_EQ(utf8::step("\x80").kind, utf8::StepKind::kInvalid);
}

// Expected strings are CPython's bytes.decode("utf-8", "replace") of the same bytes.
TEST(Utf8, ReplaceInvalidMatchesPythonReplace) {
  EXPECT_EQ(utf8::replace_invalid("\xFF"), kFffd);
  EXPECT_EQ(utf8::replace_invalid("a\xC3"), "a" + kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xE4\xB8"), kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xE4\xB8"
                                  "a"),
            kFffd + "a");
  EXPECT_EQ(utf8::replace_invalid("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xE0\x80\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8::replace_invalid("\x80\x80"), kFffd + kFffd);
  EXPECT_EQ(utf8::replace_invalid("\xF0\x9F\x98\x80x"), "\xF0\x9F\x98\x80x");
  EXPECT_EQ(utf8::replace_invalid("\xF0\x9F\x98"
                                  "a\xE4"),
            kFffd + "a" + kFffd);
}

TEST(Utf8, ValidPrefixLength) {
  EXPECT_EQ(utf8::valid_prefix_length(""), 0u);
  EXPECT_EQ(utf8::valid_prefix_length("hello world, long enough for the fast path"), 42u);
  EXPECT_EQ(utf8::valid_prefix_length("abcdefghij\xFFxyz"), 10u);
  EXPECT_EQ(utf8::valid_prefix_length("\xE4\xB8\xAD\xE6\x96"), 3u);
  EXPECT_TRUE(utf8::is_valid("\xE4\xB8\xAD\xE6\x96\x87"));
}

// CPython's str.isspace over all of Unicode is exactly these code points.
TEST(Utf8, PythonIsspaceIsExactlyPythonsSet) {
  const char32_t expected[] = {0x9,    0xA,    0xB,    0xC,    0xD,    0x1C,   0x1D,   0x1E,
                               0x1F,   0x20,   0x85,   0xA0,   0x1680, 0x2000, 0x2001, 0x2002,
                               0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                               0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  std::size_t k = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    const bool want = k < std::size(expected) && expected[k] == cp;
    if (want) ++k;
    ASSERT_EQ(utf8::python_isspace(cp), want) << std::hex << static_cast<std::uint32_t>(cp);
  }
}

TEST(Utf8, AppendEncodes) {
  std::string s;
  utf8::append(s, U'A');
  utf8::append(s, U'é');
  utf8::append(s, U'中');
  utf8::append(s, U'\U0001F600');
  EXPECT_EQ(s, "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace k3
