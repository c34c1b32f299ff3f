#include "model/tokenizer/pretokenizer.h"

#include <utility>

#include "common/error.h"
#include "common/utf8.h"

namespace k3::model {
namespace {

// tokenization_kimi.py's pat_str (the eight alternatives joined with '|').
constexpr std::string_view kKimiPatStr =
    R"([\p{Han}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|)"
    R"(\s+(?!\S)|)"
    R"(\s+)";

// The same language for PCRE2 (UTF | UCP). Three rewrites, each proven over every code point by
// the tokenizer tests (pretokenizer_test.cpp):
//
// 1. Rust's \p{Han} is the Script property; PCRE2's bare \p{Han} is Script_Extensions (it would
//    also take U+3001 "、" and other shared CJK punctuation). So: \p{sc=Han}.
// 2. Rust's \s is White_Space; PCRE2's \s (UCP) also matches U+180E. So \s is spelled out as the
//    White_Space list and \S as its complement.
// 3. Class intersection (&&) does not exist in PCRE2 10.42. Every code point has exactly one
//    general category, so by De Morgan
//      [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
//        = [^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc=Han}]
//      [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
//        = [^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc=Han}]
//    (\p{C} includes Cn, the unassigned code points). A single negated class, unlike the
//    lookahead form (?:(?!\p{sc=Han})[...]), keeps PCRE2's single-character repeat fast path:
//    no backtracking frames per character, so long words cannot exhaust the JIT stack.
std::string build_pcre2_pattern() {
  // White_Space, the inside of a character class.
  const std::string ws =
      R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F})"
      R"(\x{205F}\x{3000})";
  const std::string upperish = R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc=Han}])";
  const std::string lowerish = R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc=Han}])";
  const std::string prefix = R"([^\r\n\p{L}\p{N}]?)";
  const std::string contraction = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)";
  const std::string alternatives[] = {
      R"(\p{sc=Han}+)",                                        // 1. Han run
      prefix + upperish + "*" + lowerish + "+" + contraction,  // 2. word, lower end
      prefix + upperish + "+" + lowerish + "*" + contraction,  // 3. word, upper start
      R"(\p{N}{1,3})",                                         // 4. digits
      R"(\x20?[^)" + ws + R"(\p{L}\p{N}]+[\r\n]*)",            // 5. punctuation
      "[" + ws + R"(]*[\r\n]+)",                               // 6. newlines
      "[" + ws + "]+(?![^" + ws + "])",                        // 7. spaces before space
      "[" + ws + "]+",                                         // 8. other spaces
  };
  std::string pattern;
  for (const std::string& alternative : alternatives) {
    if (!pattern.empty()) pattern += '|';
    pattern += alternative;
  }
  return pattern;
}

const std::string& pcre2_pattern() {
  static const std::string pattern = build_pcre2_pattern();
  return pattern;
}

}  // namespace

std::string_view Pretokenizer::kimi_pat_str() noexcept { return kKimiPatStr; }

const std::string& Pretokenizer::pattern() { return pcre2_pattern(); }

Pretokenizer::Pretokenizer() : regex_(pcre2_pattern(), Regex::kUnicode | Regex::kJit) {}

Pretokenizer::Cursor::Cursor(const Pretokenizer& pretokenizer) : matcher_(pretokenizer.regex_) {}

void Pretokenizer::Cursor::reset(std::string_view text) noexcept {
  text_ = text;
  pos_ = 0;
  run_begin_ = 0;
  run_end_ = 0;
}

bool Pretokenizer::Cursor::next(std::string_view& piece) {
  if (pos_ >= text_.size()) return false;
  if (pos_ >= run_end_) {
    const std::size_t valid = utf8::valid_prefix_length(text_.substr(pos_));
    if (valid == 0) {
      // A byte that is no part of a valid character: a piece of its own.
      piece = text_.substr(pos_, 1);
      ++pos_;
      return true;
    }
    run_begin_ = pos_;
    run_end_ = pos_ + valid;
  }

  // The run was validated above, so PCRE2 need not check it again.
  const std::string_view run = text_.substr(run_begin_, run_end_ - run_begin_);
  const auto match = matcher_.find(run, pos_ - run_begin_, /*anchored=*/false, /*valid_utf=*/true);
  if (!match) {
    // Unreachable: every character matches one of the alternatives. Kept lossless anyway.
    piece = text_.substr(pos_, run_end_ - pos_);
    pos_ = run_end_;
    return true;
  }
  const std::size_t match_begin = run_begin_ + match->begin;
  const std::size_t match_end = run_begin_ + match->end;
  if (match_begin > pos_) {
    // Also unreachable (no character is skipped); a gap is returned as its own piece.
    piece = text_.substr(pos_, match_begin - pos_);
    pos_ = match_begin;
    return true;
  }
  if (match_end <= match_begin) {
    throw InternalError("pre-tokenizer: empty match at byte " + std::to_string(pos_));
  }
  piece = text_.substr(match_begin, match_end - match_begin);
  pos_ = match_end;
  return true;
}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  Cursor cursor(*this);
  cursor.reset(text);
  std::string_view piece;
  while (cursor.next(piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace k3::model
