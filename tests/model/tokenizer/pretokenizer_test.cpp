#include "model/tokenizer/pretokenizer.h"

#include <gtest/gtest.h>
#include <pcre2.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/utf8.h"

namespace k3::model {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view text) {
  static const Pretokenizer pretokenizer;
  Pieces out;
  for (const std::string_view p : pretokenizer.split(text)) out.emplace_back(p);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Hand-derived splits. Each expectation follows from the eight alternatives in order:
// (1) Han run, (2) [^\r\n L N]? upperish* lowerish+ contraction?, (3) [^\r\n L N]? upperish+
// lowerish* contraction?, (4) N{1,3}, (5) ' '?[^\s L N]+[\r\n]*, (6) \s*[\r\n]+, (7) \s+(?!\S),
// (8) \s+.

TEST(PretokenizerSplit, Contractions) {
  EXPECT_EQ(split("he's"), (Pieces{"he's"}));
  EXPECT_EQ(split("HE'S"), (Pieces{"HE'S"}));  // (2) fails on all caps, (3) takes it
  EXPECT_EQ(split("They're"), (Pieces{"They're"}));
  EXPECT_EQ(split("THEY'RE"), (Pieces{"THEY'RE"}));
  EXPECT_EQ(split("I'll"), (Pieces{"I'll"}));
  EXPECT_EQ(split("we'VE"), (Pieces{"we'VE"}));
  EXPECT_EQ(split("don't"), (Pieces{"don't"}));
  EXPECT_EQ(split("I'm"), (Pieces{"I'm"}));
  EXPECT_EQ(split("she'd"), (Pieces{"she'd"}));
  EXPECT_EQ(split(" HE'D go"), (Pieces{" HE'D", " go"}));
  // Not a listed contraction: the apostrophe starts the next piece.
  EXPECT_EQ(split("it'x"), (Pieces{"it", "'x"}));
  EXPECT_EQ(split("rock'n'roll"), (Pieces{"rock", "'n", "'roll"}));
  // Rust's (?i) folds 's' with U+017F LONG S; PCRE2 (UTF) does too.
  EXPECT_EQ(split("it'\xC5\xBF"), (Pieces{"it'\xC5\xBF"}));
}

TEST(PretokenizerSplit, DigitsInRunsOfAtMostThree) {
  EXPECT_EQ(split("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(split("$12.50"), (Pieces{"$", "12", ".", "50"}));
  EXPECT_EQ(split("x = 5;  y"), (Pieces{"x", " =", " ", "5", ";", " ", " y"}));
  EXPECT_EQ(split("48/2 = <<48/2=24>>24"),
            (Pieces{"48", "/", "2", " =", " <<", "48", "/", "2", "=", "24", ">>", "24"}));
}

TEST(PretokenizerSplit, HanRunsNextToLatin) {
  EXPECT_EQ(split("中文English混合"), (Pieces{"中文", "English", "混合"}));
  EXPECT_EQ(split("你好世界"), (Pieces{"你好世界"}));
  EXPECT_EQ(split("日本語のテキスト"), (Pieces{"日本語", "のテキスト"}));
  // U+3001 has Script=Common (Script_Extensions includes Han): not part of the Han run, as in
  // Rust's \p{Han}, so it is (2)'s one-character prefix of the next word. PCRE2's bare
  // \p{Han} would have given "中文、", "English".
  EXPECT_EQ(split("中文、English"), (Pieces{"中文", "、English"}));
  EXPECT_EQ(split("中文、中文"), (Pieces{"中文", "、", "中文"}));
  EXPECT_EQ(split(" 中文"), (Pieces{" ", "中文"}));
}

TEST(PretokenizerSplit, MixedCase) {
  EXPECT_EQ(split("HelloWorld"), (Pieces{"Hello", "World"}));
  EXPECT_EQ(split("HTTPServer"), (Pieces{"HTTPServer"}));  // upperish* then lowerish+
  EXPECT_EQ(split("HTTPServerError"), (Pieces{"HTTPServer", "Error"}));
  EXPECT_EQ(split("camelCaseString"), (Pieces{"camel", "Case", "String"}));
  EXPECT_EQ(split("ABC"), (Pieces{"ABC"}));
  EXPECT_EQ(split("Привет мир"), (Pieces{"Привет", " мир"}));
  EXPECT_EQ(split("e\xCC\x81t\xC3\xA9"), (Pieces{"e\xCC\x81t\xC3\xA9"}));  // marks stay in words
}

TEST(PretokenizerSplit, WhitespaceBeforeWords) {
  EXPECT_EQ(split("   hello"), (Pieces{"  ", " hello"}));
  EXPECT_EQ(split("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split("\thello"), (Pieces{"\thello"}));  // (2)'s prefix takes a tab too
  EXPECT_EQ(split("a \t b"), (Pieces{"a", " \t", " b"}));
}

TEST(PretokenizerSplit, Newlines) {
  EXPECT_EQ(split("a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(split("a \nb"), (Pieces{"a", " \n", "b"}));
  EXPECT_EQ(split("a  \n  b"), (Pieces{"a", "  \n", " ", " b"}));
  EXPECT_EQ(split("x\r\ny"), (Pieces{"x", "\r\n", "y"}));
  EXPECT_EQ(split("\n"), (Pieces{"\n"}));
  EXPECT_EQ(split("\nHello"), (Pieces{"\n", "Hello"}));  // (2)'s prefix excludes \r and \n
}

TEST(PretokenizerSplit, TrailingSpaces) {
  EXPECT_EQ(split("hello   "), (Pieces{"hello", "   "}));
  EXPECT_EQ(split("hello "), (Pieces{"hello", " "}));
  EXPECT_EQ(split(" "), (Pieces{" "}));
}

TEST(PretokenizerSplit, PunctuationRunsTakeFollowingNewlines) {
  EXPECT_EQ(split("Hi!!!\n\nNext"), (Pieces{"Hi", "!!!\n\n", "Next"}));
  EXPECT_EQ(split("end.\n"), (Pieces{"end", ".\n"}));
  EXPECT_EQ(split("a ...\r\nb"), (Pieces{"a", " ...\r\n", "b"}));
  EXPECT_EQ(split("#### 72"), (Pieces{"####", " ", "72"}));
  EXPECT_EQ(split(" \"quoted\""), (Pieces{" \"", "quoted", "\""}));
}

// Rust's \s is White_Space: U+0085 is whitespace, U+180E is not (PCRE2's own \s has it).
// Punctuation runs (5) stop at whitespace, which shows the difference.
TEST(PretokenizerSplit, WhiteSpaceIsTheUnicodeProperty) {
  EXPECT_EQ(split("!\xC2\x85"), (Pieces{"!", "\xC2\x85"}));
  EXPECT_EQ(split("!\xE1\xA0\x8E"), (Pieces{"!\xE1\xA0\x8E"}));
  EXPECT_EQ(split("x\xC2\x85\xC2\x85y"), (Pieces{"x", "\xC2\x85", "\xC2\x85y"}));
  // (2)'s optional prefix is any non-letter, non-digit other than \r \n, whitespace included.
  EXPECT_EQ(split("a\xE3\x80\x80"
                  "b"),
            (Pieces{"a",
                    "\xE3\x80\x80"
                    "b"}));  // U+3000
}

TEST(PretokenizerSplit, InvalidUtf8BytesArePiecesOfTheirOwn) {
  EXPECT_EQ(split("ab\xFF"
                  "cd"),
            (Pieces{"ab", "\xFF", "cd"}));
  EXPECT_EQ(split("\xE4\xB8"), (Pieces{"\xE4", "\xB8"}));  // truncated character
  EXPECT_EQ(split("\xED\xA0\x80 x"), (Pieces{"\xED", "\xA0", "\x80", " x"}));
  // Each valid run is split on its own: the trailing spaces before the bad byte end a run.
  EXPECT_EQ(split("a  \x80"
                  "b"),
            (Pieces{"a", "  ", "\x80", "b"}));
  EXPECT_EQ(split(std::string("a\0b", 3)), (Pieces{"a", std::string("\0b", 2)}));
}

// ---------------------------------------------------------------------------------------------
// The PCRE2 rewrite of Kimi's classes, checked code point by code point over all of Unicode.

struct Code {
  explicit Code(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    // Anchored in the pattern (not by match options) so that the JIT can run it.
    const std::string anchored = "^(?:" + pattern + ")\\z";
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(anchored.c_str()), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (code == nullptr) throw std::runtime_error("bad test pattern " + pattern);
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    md = pcre2_match_data_create_from_pattern(code, nullptr);
  }
  ~Code() {
    pcre2_match_data_free(md);
    pcre2_code_free(code);
  }
  bool full(const std::string& s) const {
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >=
           0;
  }
  pcre2_code* code;
  pcre2_match_data* md;
};

// Calls f(cp, utf8) for every Unicode scalar value.
template <class F>
void for_each_scalar(F&& f) {
  std::string s;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    s.clear();
    utf8::append(s, cp);
    f(cp, s);
  }
}

TEST(PretokenizerPattern, ClassIntersectionRewriteEqualsKimiOnEveryCodePoint) {
  // Definitions read straight off Kimi's classes (one property per test).
  const Code upper_set("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]");
  const Code lower_set("[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]");
  const Code han("\\p{sc=Han}");
  // The lookahead form and the De Morgan form the pattern uses.
  const Code upper_lookahead("(?:(?!\\p{sc=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])");
  const Code lower_lookahead("(?:(?!\\p{sc=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])");
  const Code upper_used("[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc=Han}]");
  const Code lower_used("[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc=Han}]");
  // De Morgan needs the general categories to partition the code points.
  const Code cats[] = {Code("\\p{L}"), Code("\\p{M}"), Code("\\p{N}"), Code("\\p{P}"),
                       Code("\\p{S}"), Code("\\p{Z}"), Code("\\p{C}")};
  std::size_t upper_count = 0, lower_count = 0, han_letters = 0;
  for_each_scalar([&](char32_t cp, const std::string& s) {
    int in = 0;
    for (const Code& c : cats) in += c.full(s);
    ASSERT_EQ(in, 1) << "U+" << std::hex << static_cast<std::uint32_t>(cp);
    const bool is_han = han.full(s);
    const bool upper = upper_set.full(s) && !is_han;
    const bool lower = lower_set.full(s) && !is_han;
    ASSERT_EQ(upper_lookahead.full(s), upper) << std::hex << static_cast<std::uint32_t>(cp);
    ASSERT_EQ(upper_used.full(s), upper) << std::hex << static_cast<std::uint32_t>(cp);
    ASSERT_EQ(lower_lookahead.full(s), lower) << std::hex << static_cast<std::uint32_t>(cp);
    ASSERT_EQ(lower_used.full(s), lower) << std::hex << static_cast<std::uint32_t>(cp);
    upper_count += upper;
    lower_count += lower;
    han_letters += is_han && upper_set.full(s);
  });
  // Sanity: the classes are large, and the Han exclusion removes many letters.
  EXPECT_GT(upper_count, 30000u);
  EXPECT_GT(lower_count, 30000u);
  EXPECT_GT(han_letters, 90000u);
}

TEST(PretokenizerPattern, WhitespaceClassIsWhiteSpaceProperty) {
  // White_Space (Unicode PropList.txt), which is what Rust's \s means.
  const char32_t white_space[] = {0x9,    0xA,    0xB,    0xC,    0xD,    0x20,   0x85,
                                  0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                  0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                  0x2029, 0x202F, 0x205F, 0x3000};
  const Code ws(
      "[\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
      "\\x{2029}\\x{202F}\\x{205F}\\x{3000}]");
  const Code pcre_s("\\s");
  std::size_t k = 0;
  std::vector<char32_t> pcre_only;
  for_each_scalar([&](char32_t cp, const std::string& s) {
    const bool want = k < std::size(white_space) && white_space[k] == cp;
    if (want) ++k;
    ASSERT_EQ(ws.full(s), want) << std::hex << static_cast<std::uint32_t>(cp);
    if (pcre_s.full(s) != want) pcre_only.push_back(cp);
  });
  // The one place PCRE2's \s differs from White_Space, the reason for the explicit class.
  EXPECT_EQ(pcre_only, std::vector<char32_t>{0x180E});
  // And the pattern really uses this class (not \s).
  EXPECT_EQ(Pretokenizer::pattern().find("\\s"), std::string::npos);
}

TEST(PretokenizerPattern, HanIsTheScriptNotScriptExtensions) {
  const Code script("\\p{sc=Han}");
  const Code extensions("\\p{Han}");  // PCRE2 10.40+: Script_Extensions
  EXPECT_TRUE(script.full("中"));
  EXPECT_FALSE(script.full("\xE3\x80\x81"));  // U+3001
  EXPECT_TRUE(extensions.full("\xE3\x80\x81"));
  EXPECT_TRUE(script.full("\xE3\x80\x85"));  // U+3005 々 (Lm, Han)
}

TEST(Pretokenizer, PiecesTileAllOfUnicode) {
  std::string text;
  for_each_scalar([&](char32_t, const std::string& s) { text += s; });
  std::string joined;
  std::size_t count = 0;
  const Pretokenizer p;
  Pretokenizer::Cursor cursor(p);
  cursor.reset(text);
  std::string_view piece;
  while (cursor.next(piece)) {
    ASSERT_FALSE(piece.empty());
    joined += piece;
    ++count;
  }
  EXPECT_EQ(joined, text);
  EXPECT_GT(count, 1000u);
}

TEST(Pretokenizer, RandomBytesTileTheInput) {
  std::mt19937 rng(12345);
  const Pretokenizer p;
  const char alphabet[] = {'a',    'B',    ' ',    '\n',   '\r',   '1',    '\'',
                           's',    '!',    '\t',   '\x80', '\xC3', '\xA9', '\xE4',
                           '\xB8', '\xAD', '\xF0', '\x9F', '\xFF', '\0'};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 64);
    for (int i = 0; i < len; ++i) text.push_back(alphabet[rng() % sizeof alphabet]);
    std::string joined;
    for (const std::string_view piece : p.split(text)) {
      ASSERT_FALSE(piece.empty());
      joined += piece;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(Pretokenizer, LongRunsDoNotExhaustTheMatcher) {
  const Pretokenizer p;
  for (const std::string unit : {"a", "A", " ", "\n", "!", "中", "\xE3\x81\xAE", "7"}) {
    std::string text;
    for (int i = 0; i < 200000; ++i) text += unit;
    const std::vector<std::string_view> pieces = p.split(text);
    std::size_t total = 0;
    for (const auto piece : pieces) total += piece.size();
    EXPECT_EQ(total, text.size()) << unit;
    if (unit == "7") {
      EXPECT_EQ(pieces.size(), (200000u + 2) / 3);
    } else {
      EXPECT_EQ(pieces.size(), 1u) << unit;
    }
  }
}

TEST(Pretokenizer, JitIsUsed) { EXPECT_TRUE(Pretokenizer().jit_enabled()); }

}  // namespace
}  // namespace k3::model
